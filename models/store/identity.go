package store

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/countersign/countersign/models"
)

type tenantRow struct {
	ID        string `gorm:"primaryKey"`
	Name      string
	CreatedAt int64 `gorm:"autoCreateTime:false"`
}

func (tenantRow) TableName() string { return "tenants" }

type userRow struct {
	ID           string `gorm:"primaryKey"`
	TenantID     string
	Name         string
	Role         string
	PasswordHash string
	Disabled     bool
	CreatedAt    int64 `gorm:"autoCreateTime:false"`
	// CreatedBy, PasswordResetBy: a user id, models.EnrolledByCLI or "".
	CreatedBy       string
	PasswordResetBy string
	PasswordResetAt *int64
	TimeZone        string
}

func (userRow) TableName() string { return "users" }

// SetUserTimeZone stores the zone a user reads times in. With onlyIfUnset
// it changes nothing when the user chose a zone already (the browser's zone
// is only a default). ENotFound for an unknown user.
func (s *Store) SetUserTimeZone(ctx context.Context, tenantID, userID, zone string, onlyIfUnset bool) error {
	q := s.db.WithContext(ctx).Model(&userRow{}).Where("tenant_id = ? AND id = ?", tenantID, userID)
	if onlyIfUnset {
		q = q.Where("time_zone = ''")
	}
	res := q.Update("time_zone", zone)
	if res.Error != nil {
		return dbErr(res.Error)
	}
	if res.RowsAffected == 0 && !onlyIfUnset {
		return models.Errorf(models.ENotFound, "no user %q", userID)
	}
	return nil
}

func (r userRow) model() models.User {
	return models.User{ID: r.ID, TenantID: r.TenantID, Name: r.Name, Role: models.Role(r.Role),
		Disabled: r.Disabled, CreatedAt: fromMS(r.CreatedAt), CreatedBy: r.CreatedBy,
		PasswordResetBy: r.PasswordResetBy, PasswordResetAt: fromMSPtr(r.PasswordResetAt), TimeZone: r.TimeZone}
}

type agentRow struct {
	ID          string `gorm:"primaryKey"`
	TenantID    string
	Name        string
	OwnerUserID *string
	KeyHash     string
	ReadAll     bool
	CreatedBy   string
	CreatedAt   int64 `gorm:"autoCreateTime:false"`
	RevokedAt   *int64
}

func (agentRow) TableName() string { return "agents" }

func (r agentRow) model() models.Agent {
	a := models.Agent{ID: r.ID, TenantID: r.TenantID, Name: r.Name, ReadAll: r.ReadAll, CreatedBy: r.CreatedBy,
		CreatedAt: fromMS(r.CreatedAt), RevokedAt: fromMSPtr(r.RevokedAt)}
	if r.OwnerUserID != nil {
		a.OwnerUserID = *r.OwnerUserID
	}
	return a
}

// insertOnce inserts row and reports whether it was inserted; a conflict on
// any unique constraint inserts nothing and reports false.
func insertOnce(tx *gorm.DB, row any) (bool, error) {
	res := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(row)
	if res.Error != nil {
		return false, res.Error
	}
	return res.RowsAffected == 1, nil
}

// CreateTenant creates a tenant. It returns EAlreadyExists when the name is
// taken.
func (s *Store) CreateTenant(ctx context.Context, name string) (models.Tenant, error) {
	row := tenantRow{ID: models.NewID("ten"), Name: name, CreatedAt: ms(s.clock.Now())}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "tenant %q already exists", name)
		}
		return recordSigningKeys(tx, row.ID, fromMS(row.CreatedAt))
	})
	if err != nil {
		return models.Tenant{}, err
	}
	return models.Tenant{ID: row.ID, Name: row.Name, CreatedAt: fromMS(row.CreatedAt)}, nil
}

// TenantByName returns the tenant with that name, or ENotFound.
func (s *Store) TenantByName(ctx context.Context, name string) (models.Tenant, error) {
	var row tenantRow
	err := s.db.WithContext(ctx).Where("name = ?", name).Take(&row).Error
	if err != nil {
		return models.Tenant{}, notFound(err, "no tenant %q", name)
	}
	return models.Tenant{ID: row.ID, Name: row.Name, CreatedAt: fromMS(row.CreatedAt)}, nil
}

// TenantNames returns the names of up to limit tenants, by name, and how
// many tenants there are.
func (s *Store) TenantNames(ctx context.Context, limit int) ([]string, int, error) {
	var n int64
	if err := s.read.WithContext(ctx).Model(&tenantRow{}).Count(&n).Error; err != nil {
		return nil, 0, dbErr(err)
	}
	var names []string
	if err := s.read.WithContext(ctx).Model(&tenantRow{}).Order("name").Limit(limit).Pluck("name", &names).Error; err != nil {
		return nil, 0, dbErr(err)
	}
	return names, int(n), nil
}

// TenantByID returns the tenant, or ENotFound.
func (s *Store) TenantByID(ctx context.Context, id string) (models.Tenant, error) {
	var row tenantRow
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if err != nil {
		return models.Tenant{}, notFound(err, "no such tenant")
	}
	return models.Tenant{ID: row.ID, Name: row.Name, CreatedAt: fromMS(row.CreatedAt)}, nil
}

// CreateUser creates a console user with an already hashed password, as the
// command line does: its CreatedBy is models.EnrolledByCLI. It returns
// EAlreadyExists when the tenant has a user of that name.
func (s *Store) CreateUser(ctx context.Context, tenantID, name string, role models.Role, passwordHash string) (models.User, error) {
	if !role.Valid() {
		return models.User{}, models.Errorf(models.EInvalidRequest, "role must be reviewer or admin")
	}
	row := userRow{ID: models.NewID("usr"), TenantID: tenantID, Name: name, Role: string(role),
		PasswordHash: passwordHash, CreatedAt: ms(s.clock.Now()), CreatedBy: models.EnrolledByCLI}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "user %q already exists", name)
		}
		return appendAudit(tx, tenantID, fromMS(row.CreatedAt), adminEvent(models.AuditUserCreated, "", userData(row)))
	})
	if err != nil {
		return models.User{}, err
	}
	return row.model(), nil
}

// UserCredentials returns the user of that name in the tenant and its
// password hash, or ENotFound.
func (s *Store) UserCredentials(ctx context.Context, tenantID, name string) (models.User, string, error) {
	var row userRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND name = ?", tenantID, name).Take(&row).Error
	if err != nil {
		return models.User{}, "", notFound(err, "no such user")
	}
	return row.model(), row.PasswordHash, nil
}

// UserByID returns a user of the tenant, or ENotFound.
func (s *Store) UserByID(ctx context.Context, tenantID, id string) (models.User, error) {
	var row userRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error
	if err != nil {
		return models.User{}, notFound(err, "no such user")
	}
	return row.model(), nil
}

// CreateAgent creates an agent principal whose API key hashes to keyHash,
// as the command line does (CreatedBy models.EnrolledByCLI). ownerUserID
// may be empty. EAlreadyExists when the name is taken.
func (s *Store) CreateAgent(ctx context.Context, tenantID, name, ownerUserID, keyHash string) (models.Agent, error) {
	row := agentRow{ID: models.NewID("agt"), TenantID: tenantID, Name: name, KeyHash: keyHash,
		CreatedBy: models.EnrolledByCLI, CreatedAt: ms(s.clock.Now())}
	if ownerUserID != "" {
		row.OwnerUserID = &ownerUserID
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if ownerUserID != "" {
			var n int64
			if err := tx.Model(&userRow{}).Where("tenant_id = ? AND id = ?", tenantID, ownerUserID).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return models.Errorf(models.ENotFound, "owner user not found in this tenant")
			}
		}
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "agent %q already exists", name)
		}
		return appendAudit(tx, tenantID, fromMS(row.CreatedAt), adminEvent(models.AuditAgentCreated, "", agentData(row)))
	})
	if err != nil {
		return models.Agent{}, err
	}
	return row.model(), nil
}

// AgentByKeyHash returns the active agent whose key hashes to keyHash, or
// EUnauthenticated. Every agent request starts with it, so it reads on the
// reader pool: on SQLite it never waits for the one writer connection.
func (s *Store) AgentByKeyHash(ctx context.Context, keyHash string) (models.Agent, error) {
	var row agentRow
	qctx, c := raw(s.read.WithContext(ctx))
	err := c.QueryRowContext(qctx, `SELECT id, tenant_id, name, owner_user_id, key_hash, read_all, created_by, created_at, revoked_at
 FROM agents WHERE key_hash = $1 AND revoked_at IS NULL`, keyHash).Scan(&row.ID, &row.TenantID, &row.Name, &row.OwnerUserID,
		&row.KeyHash, &row.ReadAll, &row.CreatedBy, &row.CreatedAt, &row.RevokedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return models.Agent{}, models.Errorf(models.EUnauthenticated, "unknown or revoked API key")
	}
	if err != nil {
		return models.Agent{}, dbErr(err)
	}
	return row.model(), nil
}

// SetAgentReadAll grants (on) or withdraws an agent's right to read every
// proposal of its tenant, and returns the agent. ENotFound for an unknown
// or foreign agent.
func (s *Store) SetAgentReadAll(ctx context.Context, tenantID, agentID string, on bool) (models.Agent, error) {
	var out models.Agent
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&agentRow{}).Where("tenant_id = ? AND id = ?", tenantID, agentID).Update("read_all", on)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return models.Errorf(models.ENotFound, "no agent %q", agentID)
		}
		var row agentRow
		if err := tx.Where("id = ?", agentID).Take(&row).Error; err != nil {
			return err
		}
		out = row.model()
		return nil
	})
	return out, err
}

// RevokeAgent disables an agent's key.
func (s *Store) RevokeAgent(ctx context.Context, tenantID, agentID string) error {
	now := s.clock.Now()
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&agentRow{}).
			Where("tenant_id = ? AND id = ? AND revoked_at IS NULL", tenantID, agentID).
			Update("revoked_at", ms(now))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return models.Errorf(models.ENotFound, "no active agent with that id")
		}
		return appendAudit(tx, tenantID, now, adminEvent(models.AuditAgentRevoked, "", map[string]any{"agent_id": agentID}))
	})
}

func notFound(err error, format string, args ...any) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return models.Errorf(models.ENotFound, format, args...)
	}
	return dbErr(err)
}

// AgentByName returns the tenant's agent with that name, or ENotFound.
func (s *Store) AgentByName(ctx context.Context, tenantID, name string) (models.Agent, error) {
	var row agentRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND name = ?", tenantID, name).Take(&row).Error; err != nil {
		return models.Agent{}, notFound(err, "no agent %q", name)
	}
	return row.model(), nil
}

// AgentByID returns an agent of the tenant, or ENotFound.
func (s *Store) AgentByID(ctx context.Context, tenantID, id string) (models.Agent, error) {
	var row agentRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
		return models.Agent{}, notFound(err, "no agent %q", id)
	}
	return row.model(), nil
}
