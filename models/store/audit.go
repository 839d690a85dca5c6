package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"time"

	"gorm.io/gorm"
	litedriver "modernc.org/sqlite"

	"github.com/countersign/countersign/models"
)

type auditEntryRow struct {
	TenantID   string `gorm:"primaryKey"`
	Seq        int64  `gorm:"primaryKey"`
	PrevHash   string
	Hash       string
	Kind       string
	ProposalID string
	Body       string
	CreatedAt  int64 `gorm:"autoCreateTime:false"`
}

func (auditEntryRow) TableName() string { return "audit_entries" }

func (r auditEntryRow) model() models.AuditEntry {
	return models.AuditEntry{TenantID: r.TenantID, Seq: r.Seq, Prev: r.PrevHash, Hash: r.Hash, Kind: r.Kind,
		ProposalID: r.ProposalID, Body: r.Body, CreatedAt: fromMS(r.CreatedAt)}
}

type auditCheckpointRow struct {
	TenantID  string `gorm:"primaryKey"`
	Seq       int64  `gorm:"primaryKey"`
	Hash      string
	KID       string `gorm:"column:kid"`
	JWS       string `gorm:"column:jws"`
	CreatedAt int64  `gorm:"autoCreateTime:false"`
}

func (auditCheckpointRow) TableName() string { return "audit_checkpoints" }

func (r auditCheckpointRow) model() models.Checkpoint {
	return models.Checkpoint{TenantID: r.TenantID, Seq: r.Seq, Hash: r.Hash, KeyID: r.KID, JWS: r.JWS,
		CreatedAt: fromMS(r.CreatedAt)}
}

// maxAppendTries bounds appendAudit's retries. Each retry happens only after
// another transaction appended (and committed) the entry this one wanted, so
// the chain always progresses; the bound only turns a pathological pile-up
// into an error instead of a spin.
const maxAppendTries = 1000

// appendAudit appends events to the tenant's chain inside tx, the
// transaction that makes the change they record: both commit or neither
// does. Call it as the last statement of a transaction, so that a
// transaction waiting here holds no lock another one needs to commit.
//
// Each event takes the position after the chain's head, linked to the
// head's hash, by an INSERT with ON CONFLICT DO NOTHING on the primary key
// (tenant_id, seq): of two transactions that saw the same head one inserts
// and the other — on PostgreSQL after waiting for the first to commit —
// inserts nothing and tries again on the new head. No fork, no gap, and no
// read-then-write race.
//
// That is one statement per event: INSERT … SELECT reads the head and the
// database computes the entry's hash over the body it assembles from the
// entry's canonical template, so the bytes are those Go would produce — on
// PostgreSQL with its sha256, on SQLite with countersign_audit_hash, a
// function of this package registered with the SQLite driver
// (models.AuditHash).
func appendAudit(tx *gorm.DB, tenantID string, at time.Time, evs ...models.AuditEvent) error {
	for _, ev := range evs {
		tpl, err := ev.Template(tenantID, ms(at))
		if err != nil {
			return err
		}
		if err := appendOne(tx, tenantID, at, ev, tpl); err != nil {
			return err
		}
	}
	return nil
}

// pgAppend is the PostgreSQL append: head, link, hash and insert in one
// statement. h is the head ((0, "") for an empty chain). $1 tenant, $2–$4
// the template's prefix, middle and suffix, $5 kind, $6 proposal, $7 time.
const pgAppend = `INSERT INTO audit_entries (tenant_id, seq, prev_hash, hash, kind, proposal_id, body, created_at)
SELECT $1, h.seq + 1, h.hash,
       'sha256:' || encode(sha256(convert_to(CAST($2 AS text) || h.hash || CAST($3 AS text) || (h.seq + 1)::text || CAST($4 AS text), 'UTF8')), 'hex'),
       $5, $6, CAST($2 AS text) || h.hash || CAST($3 AS text) || (h.seq + 1)::text || CAST($4 AS text), $7
FROM (SELECT seq, hash FROM (
        (SELECT seq, hash FROM audit_entries WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1)
        UNION ALL SELECT 0::bigint, ''::text
      ) AS c ORDER BY seq DESC LIMIT 1) AS h
ON CONFLICT DO NOTHING`

// liteAppend is pgAppend for SQLite: the same head, link and body, hashed
// by countersign_audit_hash. (WHERE true keeps ON CONFLICT from being read
// as a join's ON.)
const liteAppend = `INSERT INTO audit_entries (tenant_id, seq, prev_hash, hash, kind, proposal_id, body, created_at)
SELECT $1, b.seq, b.prev, countersign_audit_hash(b.body), $5, $6, b.body, $7
FROM (SELECT h.seq + 1 AS seq, h.hash AS prev, $2 || h.hash || $3 || (h.seq + 1) || $4 AS body
      FROM (SELECT seq, hash FROM (SELECT seq, hash FROM audit_entries WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1)
            UNION ALL SELECT 0, '' ORDER BY 1 DESC LIMIT 1) AS h) AS b
WHERE true
ON CONFLICT DO NOTHING`

func init() {
	litedriver.MustRegisterDeterministicScalarFunction("countersign_audit_hash", 1,
		func(_ *litedriver.FunctionContext, args []driver.Value) (driver.Value, error) {
			switch v := args[0].(type) {
			case string:
				return models.AuditHash([]byte(v)), nil
			case []byte:
				return models.AuditHash(v), nil
			}
			return nil, fmt.Errorf("countersign_audit_hash: want text, got %T", args[0])
		})
}

func appendOne(tx *gorm.DB, tenantID string, at time.Time, ev models.AuditEvent, tpl models.AuditTemplate) error {
	q := liteAppend
	if tx.Dialector.Name() == "postgres" {
		q = pgAppend
	}
	ctx, c := raw(tx)
	for range maxAppendTries {
		n, err := execCount(ctx, c, q, tenantID, tpl.Prefix, tpl.Middle, tpl.Suffix, ev.Kind, ev.ProposalID, ms(at))
		if err != nil {
			return err
		}
		if n == 1 {
			return nil
		}
	}
	return models.Errorf(models.EUnavailable, "the audit log is too busy; try again")
}

// appendOnly makes the database itself refuse changes to audit entries and
// checkpoints. Trigger syntax differs between the dialects, so the store
// installs them after the migrations (idempotently) instead of a migration
// file.
func (s *Store) appendOnly(ctx context.Context) error {
	var stmts []string
	tables := []string{"audit_entries", "audit_checkpoints"}
	if s.dialect == Postgres {
		stmts = append(stmts, `CREATE OR REPLACE FUNCTION countersign_append_only() RETURNS trigger AS $$
BEGIN
  RAISE EXCEPTION 'countersign: % is append-only', TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql`)
		for _, t := range tables {
			stmts = append(stmts, fmt.Sprintf(`CREATE OR REPLACE TRIGGER %s_append_only BEFORE UPDATE OR DELETE ON %s
FOR EACH ROW EXECUTE FUNCTION countersign_append_only()`, t, t))
		}
	} else {
		for _, t := range tables {
			for _, op := range []string{"UPDATE", "DELETE"} {
				stmts = append(stmts, fmt.Sprintf(`CREATE TRIGGER IF NOT EXISTS %s_no_%s BEFORE %s ON %s
BEGIN SELECT RAISE(ABORT, 'countersign: %s is append-only'); END`, t, op, op, t, t))
			}
		}
	}
	for _, q := range stmts {
		if _, err := s.sqlDB.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("append-only triggers: %w", err)
		}
	}
	return nil
}

// AuditEntries returns up to limit entries of the tenant's chain with seq >
// after, in chain order.
func (s *Store) AuditEntries(ctx context.Context, tenantID string, after int64, limit int) ([]models.AuditEntry, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	var rows []auditEntryRow
	err := s.read.WithContext(ctx).Where("tenant_id = ? AND seq > ?", tenantID, after).
		Order("seq").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	return entryModels(rows), nil
}

// AuditEntriesSince returns the tenant's entries created at or after since,
// from the first such entry to the head, in chain order (at most limit).
func (s *Store) AuditEntriesSince(ctx context.Context, tenantID string, since time.Time, limit int) ([]models.AuditEntry, error) {
	var first auditEntryRow
	err := s.read.WithContext(ctx).Select("seq").Where("tenant_id = ? AND created_at >= ?", tenantID, ms(since)).
		Order("seq").Limit(1).Find(&first).Error
	if err != nil {
		return nil, dbErr(err)
	}
	if first.Seq == 0 {
		return nil, nil
	}
	var rows []auditEntryRow
	err = s.read.WithContext(ctx).Where("tenant_id = ? AND seq >= ?", tenantID, first.Seq).
		Order("seq").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	return entryModels(rows), nil
}

// ProposalAudit returns the entries of the tenant's chain about one
// proposal, in chain order.
func (s *Store) ProposalAudit(ctx context.Context, tenantID, proposalID string) ([]models.AuditEntry, error) {
	var rows []auditEntryRow
	err := s.read.WithContext(ctx).Where("tenant_id = ? AND proposal_id = ?", tenantID, proposalID).
		Order("seq").Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	return entryModels(rows), nil
}

func entryModels(rows []auditEntryRow) []models.AuditEntry {
	out := make([]models.AuditEntry, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out
}

// AuditHead is the last entry of a tenant's chain.
type AuditHead struct {
	TenantID string
	Seq      int64
	Hash     string
}

// UncheckpointedHeads returns, for every tenant whose chain grew since its
// last checkpoint, the current head. It starts from the tenants and finds
// each head through the chain's key: its cost does not grow with the
// chains' length (this runs every minute, and a scan of every entry would
// hold up the writes behind it).
func (s *Store) UncheckpointedHeads(ctx context.Context) ([]AuditHead, error) {
	var rows []struct {
		TenantID string
		Seq      *int64
		Hash     *string
		Signed   *int64
	}
	err := s.read.WithContext(ctx).Raw(`SELECT t.id AS tenant_id,
  (SELECT e.seq FROM audit_entries e WHERE e.tenant_id = t.id ORDER BY e.seq DESC LIMIT 1) AS seq,
  (SELECT e.hash FROM audit_entries e WHERE e.tenant_id = t.id ORDER BY e.seq DESC LIMIT 1) AS hash,
  (SELECT c.seq FROM audit_checkpoints c WHERE c.tenant_id = t.id ORDER BY c.seq DESC LIMIT 1) AS signed
FROM tenants t ORDER BY t.id`).Scan(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	var out []AuditHead
	for _, r := range rows {
		if r.Seq != nil && r.Hash != nil && (r.Signed == nil || *r.Seq > *r.Signed) {
			out = append(out, AuditHead{TenantID: r.TenantID, Seq: *r.Seq, Hash: *r.Hash})
		}
	}
	return out, nil
}

// Head returns the tenant's current head (Seq 0 for an empty chain).
func (s *Store) Head(ctx context.Context, tenantID string) (AuditHead, error) {
	h := AuditHead{TenantID: tenantID}
	err := s.db.WithContext(ctx).Raw("SELECT seq, hash FROM audit_entries WHERE tenant_id = ? ORDER BY seq DESC LIMIT 1", tenantID).
		Scan(&h).Error
	h.TenantID = tenantID
	return h, dbErr(err)
}

// AddCheckpoint stores a signed checkpoint. A checkpoint for the same
// position stored first (by another instance) wins; nothing is replaced.
func (s *Store) AddCheckpoint(ctx context.Context, c models.Checkpoint) error {
	row := auditCheckpointRow{TenantID: c.TenantID, Seq: c.Seq, Hash: c.Hash, KID: c.KeyID, JWS: c.JWS,
		CreatedAt: ms(c.CreatedAt)}
	return s.tx(ctx, func(tx *gorm.DB) error {
		_, err := insertOnce(tx, &row)
		return err
	})
}

// Checkpoints returns the tenant's checkpoints with seq >= from, in order.
func (s *Store) Checkpoints(ctx context.Context, tenantID string, from int64) ([]models.Checkpoint, error) {
	var rows []auditCheckpointRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND seq >= ?", tenantID, from).Order("seq").Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	out := make([]models.Checkpoint, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// LatestCheckpoint returns the tenant's newest checkpoint, or ok=false.
func (s *Store) LatestCheckpoint(ctx context.Context, tenantID string) (models.Checkpoint, bool, error) {
	var row auditCheckpointRow
	err := s.read.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("seq DESC").Limit(1).Find(&row).Error
	if err != nil {
		return models.Checkpoint{}, false, dbErr(err)
	}
	return row.model(), row.Seq > 0, nil
}

// Audit records an event that is not a change the store makes itself (a
// sign-in, a failed step-up, a policy reload) as one entry of its own.
func (s *Store) Audit(ctx context.Context, tenantID string, at time.Time, ev models.AuditEvent) error {
	return s.tx(ctx, func(tx *gorm.DB) error { return appendAudit(tx, tenantID, at, ev) })
}

type auditReaderRow struct {
	ID        string `gorm:"primaryKey"`
	TenantID  string
	Name      string
	KeyHash   string
	CreatedAt int64 `gorm:"autoCreateTime:false"`
	RevokedAt *int64
}

func (auditReaderRow) TableName() string { return "audit_readers" }

// CreateAuditReader stores an audit reader key (only its hash) for the
// tenant. EAlreadyExists when the name is taken.
func (s *Store) CreateAuditReader(ctx context.Context, tenantID, name, keyHash string) (models.AuditReader, error) {
	now := s.clock.Now()
	row := auditReaderRow{ID: models.NewID("aud"), TenantID: tenantID, Name: name, KeyHash: keyHash, CreatedAt: ms(now)}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "an audit reader named %q exists", name)
		}
		return appendAudit(tx, tenantID, now, models.AuditEvent{Kind: models.AuditReaderCreated, Actor: models.ActorSystem,
			Data: map[string]any{"reader_id": row.ID, "name": name}})
	})
	if err != nil {
		return models.AuditReader{}, err
	}
	return models.AuditReader{ID: row.ID, TenantID: tenantID, Name: name, CreatedAt: fromMS(row.CreatedAt)}, nil
}

// AuditReaderByKeyHash returns the unrevoked audit reader with that key
// hash, or EUnauthenticated.
func (s *Store) AuditReaderByKeyHash(ctx context.Context, keyHash string) (models.AuditReader, error) {
	var row auditReaderRow
	err := s.read.WithContext(ctx).Where("key_hash = ? AND revoked_at IS NULL", keyHash).Take(&row).Error
	if err != nil {
		if models.IsCode(notFound(err, ""), models.ENotFound) {
			return models.AuditReader{}, models.Errorf(models.EUnauthenticated, "unknown or revoked audit key")
		}
		return models.AuditReader{}, dbErr(err)
	}
	return models.AuditReader{ID: row.ID, TenantID: row.TenantID, Name: row.Name, CreatedAt: fromMS(row.CreatedAt)}, nil
}
