package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// The console's sessions, sign-in rate limits, cookie keys and admin
// operations, for models/auth.

type consoleSessionRow struct {
	IDHash     string `gorm:"primaryKey"`
	TenantID   string
	UserID     string
	CSRFToken  string `gorm:"column:csrf_token"`
	AMR        string `gorm:"column:amr"`
	CreatedAt  int64  `gorm:"autoCreateTime:false"`
	LastSeenAt int64
	ExpiresAt  int64
	RevokedAt  *int64
	// KeyID is the passkey the session began with, nil for a password.
	KeyID *string
}

func (consoleSessionRow) TableName() string { return "console_sessions" }

type loginAttemptRow struct {
	AttemptKey  string `gorm:"primaryKey"`
	WindowStart int64
	Failures    int
	NextAt      int64
}

func (loginAttemptRow) TableName() string { return "login_attempts" }

type consoleKeyRow struct {
	Name      string `gorm:"primaryKey"`
	HashKey   string
	BlockKey  string
	CreatedAt int64 `gorm:"autoCreateTime:false"`
}

func (consoleKeyRow) TableName() string { return "console_keys" }

// cookieKeysName names the one row of console_keys in use.
const cookieKeysName = "session-cookie"

// CreateConsoleSession stores a new console session under s.Handle; the raw
// id is never stored. EUnavailable on database errors.
func (s *Store) CreateConsoleSession(ctx context.Context, sess models.Session) error {
	amr, err := json.Marshal(sess.AMR)
	if err != nil {
		return err
	}
	row := consoleSessionRow{IDHash: sess.Handle, TenantID: sess.Tenant.ID, UserID: sess.User.ID,
		CSRFToken: sess.CSRF, AMR: string(amr), CreatedAt: ms(sess.CreatedAt),
		LastSeenAt: ms(sess.LastSeen), ExpiresAt: ms(sess.ExpiresAt), KeyID: optional(sess.KeyID)}
	data := map[string]any{"user_id": sess.User.ID, "amr": json.RawMessage(amr), "method": models.ApprovalMethod(sess.AMR, nil)}
	if sess.KeyID != "" {
		data["key_id"] = sess.KeyID
	}
	return s.tx(ctx, func(tx *gorm.DB) error {
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		return appendAudit(tx, sess.Tenant.ID, sess.CreatedAt, adminEvent(models.AuditSignIn, sess.User.ID, data))
	})
}

// TouchConsoleSession returns the session (without ID) if it is live at
// now: not revoked, its user not disabled, less than idle since its last
// activity and before its absolute end; otherwise EUnauthenticated. When
// active, the request is a person's and the idle timeout slides to now —
// written at most once per slideEvery, so that page views do not each
// write; a background refresh (active false) never slides it. Nothing here
// decides anything at most once: the slide is a plain conditional update
// that never revives a revoked or ended session.
func (s *Store) TouchConsoleSession(ctx context.Context, handle string, now time.Time, idle, slideEvery time.Duration, active bool) (models.Session, error) {
	db := s.read.WithContext(ctx)
	var row consoleSessionRow
	err := db.Where("id_hash = ? AND revoked_at IS NULL AND last_seen_at > ? AND expires_at > ?",
		handle, ms(now)-idle.Milliseconds(), ms(now)).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return models.Session{}, models.Errorf(models.EUnauthenticated, "your session has ended; sign in again")
	}
	if err != nil {
		return models.Session{}, dbErr(err)
	}
	var u userRow
	err = db.Where("tenant_id = ? AND id = ? AND disabled = ?", row.TenantID, row.UserID, false).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return models.Session{}, models.Errorf(models.EUnauthenticated, "your session has ended; sign in again")
	}
	if err != nil {
		return models.Session{}, dbErr(err)
	}
	var t tenantRow
	if err := db.Where("id = ?", row.TenantID).Take(&t).Error; err != nil {
		return models.Session{}, dbErr(err)
	}
	var amr []string
	if err := json.Unmarshal([]byte(row.AMR), &amr); err != nil {
		return models.Session{}, fmt.Errorf("console session amr: %w", err)
	}
	if active && ms(now)-row.LastSeenAt >= slideEvery.Milliseconds() {
		res := s.db.WithContext(ctx).Model(&consoleSessionRow{}).
			Where("id_hash = ? AND revoked_at IS NULL AND last_seen_at < ?", handle, ms(now)).
			Update("last_seen_at", ms(now))
		if res.Error != nil {
			return models.Session{}, dbErr(res.Error)
		}
		if res.RowsAffected == 1 {
			row.LastSeenAt = ms(now)
		}
	}
	return models.Session{Handle: row.IDHash, User: u.model(),
		Tenant: models.Tenant{ID: t.ID, Name: t.Name, CreatedAt: fromMS(t.CreatedAt)},
		CSRF:   row.CSRFToken, AMR: amr, CreatedAt: fromMS(row.CreatedAt),
		LastSeen: fromMS(row.LastSeenAt), ExpiresAt: fromMS(row.ExpiresAt), KeyID: deref(row.KeyID)}, nil
}

// RevokeConsoleSession ends one session. Ending an unknown or ended session
// is no error. EUnavailable on database errors.
func (s *Store) RevokeConsoleSession(ctx context.Context, handle string, now time.Time) error {
	return dbErr(s.db.WithContext(ctx).Model(&consoleSessionRow{}).
		Where("id_hash = ? AND revoked_at IS NULL", handle).
		Update("revoked_at", ms(now)).Error)
}

// RevokeUserConsoleSessions ends every session of one user of the tenant.
// EUnavailable on database errors.
func (s *Store) RevokeUserConsoleSessions(ctx context.Context, tenantID, userID string, now time.Time) error {
	return dbErr(revokeUserSessions(s.db.WithContext(ctx), tenantID, userID, now))
}

func revokeUserSessions(tx *gorm.DB, tenantID, userID string, now time.Time) error {
	return tx.Model(&consoleSessionRow{}).
		Where("tenant_id = ? AND user_id = ? AND revoked_at IS NULL", tenantID, userID).
		Update("revoked_at", ms(now)).Error
}

// revokeKeySessions ends the live sessions that one of the user's keys
// began, but the one whose handle is except (none when ""), and returns
// how many it ended.
func revokeKeySessions(tx *gorm.DB, tenantID, userID, keyID, except string, now time.Time) (int64, error) {
	q := tx.Model(&consoleSessionRow{}).
		Where("key_id = ? AND tenant_id = ? AND user_id = ? AND revoked_at IS NULL", keyID, tenantID, userID)
	if except != "" {
		q = q.Where("id_hash <> ?", except)
	}
	res := q.Update("revoked_at", ms(now))
	return res.RowsAffected, res.Error
}

// errLimited rolls back a reservation that hit a limit.
var errLimited = errors.New("login attempt limit reached")

// ReserveLoginAttempt counts one sign-in attempt against every limit, or
// against none when any of them is reached: then ok is false and retryAt is
// when the latest blocking limit lets an attempt through again.
//
// A fixed-window limit (Backoff 0) allows Max attempts per window, which
// starts with the key's first attempt and restarts once it is window old;
// its count is a conditional UPDATE (failures < max). A backoff limit allows
// Max attempts freely, then makes each further attempt wait Backoff,
// doubling per attempt up to window; it starts over once quiet for a
// window past its last wait.
// Its count is a compare-and-set on the failure count and next_at, so
// parallel attempts cannot overshoot either kind of limit on any database
// or across instances. EUnavailable on database errors.
func (s *Store) ReserveLoginAttempt(ctx context.Context, now time.Time, window time.Duration, limits []models.LoginLimit) (time.Time, bool, error) {
	var retryAt time.Time
	err := s.tx(ctx, func(tx *gorm.DB) error {
		limited := false
		for _, l := range limits {
			if _, err := insertOnce(tx, &loginAttemptRow{AttemptKey: l.Key, WindowStart: ms(now)}); err != nil {
				return err
			}
			// A key quiet for a whole window (and, for a backoff key, a
			// whole window past its last wait) starts over.
			quiet := ms(now.Add(-window))
			err := tx.Model(&loginAttemptRow{}).
				Where("attempt_key = ? AND window_start <= ? AND next_at <= ?", l.Key, quiet, quiet).
				Updates(map[string]any{"window_start": ms(now), "failures": 0, "next_at": 0}).Error
			if err != nil {
				return err
			}
			var until time.Time
			if l.Backoff > 0 {
				until, err = reserveBackoff(tx, l, now, window)
			} else {
				until, err = reserveWindow(tx, l, window)
			}
			if err != nil {
				return err
			}
			if !until.IsZero() {
				limited = true
				if until.After(retryAt) {
					retryAt = until
				}
			}
		}
		if limited {
			return errLimited
		}
		return nil
	})
	if errors.Is(err, errLimited) {
		return retryAt, false, nil
	}
	if err != nil {
		return time.Time{}, false, dbErr(err)
	}
	return time.Time{}, true, nil
}

// reserveWindow counts one attempt on a fixed-window key; when the window
// is full it returns the window's end.
func reserveWindow(tx *gorm.DB, l models.LoginLimit, window time.Duration) (time.Time, error) {
	res := tx.Model(&loginAttemptRow{}).Where("attempt_key = ? AND failures < ?", l.Key, l.Max).
		Update("failures", gorm.Expr("failures + 1"))
	if res.Error != nil {
		return time.Time{}, res.Error
	}
	if res.RowsAffected == 1 {
		return time.Time{}, nil
	}
	var row loginAttemptRow
	if err := tx.Where("attempt_key = ?", l.Key).Take(&row).Error; err != nil {
		return time.Time{}, err
	}
	return fromMS(row.WindowStart).Add(window), nil
}

// reserveBackoff counts one attempt on a backoff key unless the key must
// still wait; then it returns when the wait ends.
func reserveBackoff(tx *gorm.DB, l models.LoginLimit, now time.Time, window time.Duration) (time.Time, error) {
	for range 8 {
		var row loginAttemptRow
		if err := tx.Where("attempt_key = ?", l.Key).Take(&row).Error; err != nil {
			return time.Time{}, err
		}
		if row.NextAt > ms(now) {
			return fromMS(row.NextAt), nil
		}
		n := row.Failures + 1
		next := int64(0)
		if d := models.BackoffDelay(n, l.Max, l.Backoff, window); d > 0 {
			next = ms(now.Add(d))
		}
		res := tx.Model(&loginAttemptRow{}).
			Where("attempt_key = ? AND failures = ? AND next_at <= ?", l.Key, row.Failures, ms(now)).
			Updates(map[string]any{"failures": n, "next_at": next, "window_start": ms(now)})
		if res.Error != nil {
			return time.Time{}, res.Error
		}
		if res.RowsAffected == 1 {
			return time.Time{}, nil
		}
		// Another attempt counted first: look again.
	}
	return time.Time{}, errors.New("login attempt backoff: too much contention")
}

// ReleaseLoginAttempt takes back one attempt counted for key.
func (s *Store) ReleaseLoginAttempt(ctx context.Context, key string) error {
	return dbErr(s.db.WithContext(ctx).Model(&loginAttemptRow{}).
		Where("attempt_key = ? AND failures > 0", key).
		Update("failures", gorm.Expr("failures - 1")).Error)
}

// ClearLoginAttempts forgets every attempt counted for key.
func (s *Store) ClearLoginAttempts(ctx context.Context, key string) error {
	return dbErr(s.db.WithContext(ctx).Where("attempt_key = ?", key).Delete(&loginAttemptRow{}).Error)
}

// ConsoleCookieKeys stores hashKey and blockKey as the session cookie's keys
// unless keys are stored already, and returns the stored keys: the first
// instance to start decides, and every later start reads the same keys.
// EUnavailable on database errors.
func (s *Store) ConsoleCookieKeys(ctx context.Context, hashKey, blockKey []byte, now time.Time) ([]byte, []byte, error) {
	var row consoleKeyRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := insertOnce(tx, &consoleKeyRow{Name: cookieKeysName,
			HashKey:   s.sealKey(column("console_keys", "hash_key"), cookieKeysName, hashKey),
			BlockKey:  s.sealKey(column("console_keys", "block_key"), cookieKeysName, blockKey),
			CreatedAt: ms(now)}); err != nil {
			return err
		}
		return tx.Where("name = ?", cookieKeysName).Take(&row).Error
	})
	if err != nil {
		return nil, nil, err
	}
	hk, err1 := s.openKey(column("console_keys", "hash_key"), row.Name, row.HashKey)
	bk, err2 := s.openKey(column("console_keys", "block_key"), row.Name, row.BlockKey)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, fmt.Errorf("console cookie keys: %w", err)
	}
	return hk, bk, nil
}

// requireAdmin checks, inside tx, that actor is an active admin of its
// tenant now; EForbidden otherwise.
func requireAdmin(tx *gorm.DB, actor models.User) error {
	var n int64
	err := tx.Model(&userRow{}).
		Where("tenant_id = ? AND id = ? AND role = ? AND disabled = ?", actor.TenantID, actor.ID, string(models.RoleAdmin), false).
		Count(&n).Error
	if err != nil {
		return err
	}
	if n == 0 {
		return models.Errorf(models.EForbidden, "only administrators can manage reviewers and agents")
	}
	return nil
}

// AdminListUsers returns the users of the actor's tenant, by name.
// EForbidden unless actor is an active admin.
func (s *Store) AdminListUsers(ctx context.Context, actor models.User) ([]models.User, error) {
	var rows []userRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := requireAdmin(tx, actor); err != nil {
			return err
		}
		return tx.Where("tenant_id = ?", actor.TenantID).Order("name, id").Find(&rows).Error
	})
	if err != nil {
		return nil, err
	}
	out := make([]models.User, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// AdminSecurityKeyCounts counts, per user of the actor's tenant, the
// security keys that may approve (neither removed nor flagged): who can
// approve a security-key tier. EForbidden unless actor is an active admin.
func (s *Store) AdminSecurityKeyCounts(ctx context.Context, actor models.User) (map[string]int, error) {
	var rows []struct {
		UserID string
		N      int
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := requireAdmin(tx, actor); err != nil {
			return err
		}
		return tx.Table("webauthn_credentials").Select("user_id, COUNT(*) AS n").
			Where("tenant_id = ? AND removed_at IS NULL AND flagged_at IS NULL", actor.TenantID).
			Group("user_id").Scan(&rows).Error
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.UserID] = r.N
	}
	return out, nil
}

// AdminCreateUser creates a user in the actor's tenant. EForbidden unless
// actor is an active admin; EInvalidRequest for an unknown role;
// EAlreadyExists when the name is taken.
func (s *Store) AdminCreateUser(ctx context.Context, actor models.User, name string, role models.Role, passwordHash string) (models.User, error) {
	if !role.Valid() {
		return models.User{}, models.Errorf(models.EInvalidRequest, "role must be reviewer or admin")
	}
	row := userRow{ID: models.NewID("usr"), TenantID: actor.TenantID, Name: name, Role: string(role),
		PasswordHash: passwordHash, CreatedAt: ms(s.clock.Now()), CreatedBy: actor.ID}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := requireAdmin(tx, actor); err != nil {
			return err
		}
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "a user named %q already exists", name)
		}
		return appendAudit(tx, actor.TenantID, fromMS(row.CreatedAt), adminEvent(models.AuditUserCreated, actor.ID, userData(row)))
	})
	if err != nil {
		return models.User{}, err
	}
	return row.model(), nil
}

// AdminSetUserDisabled disables or re-enables a user of the actor's tenant.
// Disabling also, in the same transaction, ends the user's sessions and
// voids the user's approvals of proposals still awaiting confirmation, so
// they stop counting toward a quorum (each such proposal's revision moves,
// waking waiters). Confirmations already issued stay; an administrator
// revokes them explicitly. Disabling the tenant's last active administrator
// is refused (EForbidden, see keepsAnAdmin). EForbidden unless actor is an
// active admin; ENotFound for users of other tenants.
func (s *Store) AdminSetUserDisabled(ctx context.Context, actor models.User, userID string, disabled bool, now time.Time) (models.User, error) {
	return s.adminUpdateUser(ctx, actor, userID, disabledEdit(actor.TenantID, disabled, now), now)
}

// SetUserDisabled is AdminSetUserDisabled for the command line, the
// installation's operator: no administrator is needed, the user is named,
// and the audit log records the system as the actor. Disabling the last
// active administrator is refused here too (EForbidden).
func (s *Store) SetUserDisabled(ctx context.Context, tenantID, name string, disabled bool, now time.Time) (models.User, error) {
	return s.editUserByName(ctx, tenantID, name, disabledEdit(tenantID, disabled, now), now)
}

// disabledEdit disables a user (ending their sessions and voiding their
// approvals of proposals still awaiting confirmation) or enables one; a
// user already so is left as is, and nothing is logged.
func disabledEdit(tenantID string, disabled bool, now time.Time) userEdit {
	e := userEdit{set: map[string]any{"disabled": disabled}, endSessions: disabled, demotes: disabled,
		unchanged: func(r userRow) bool { return r.Disabled == disabled }}
	if disabled {
		e.after = func(tx *gorm.DB, userID string) error { return voidPendingApprovals(tx, tenantID, userID, now) }
	}
	return e
}

// AdminSetUserRole gives a user of the actor's tenant role, audited with
// the role it replaces; a user who has the role already is left as is, and
// nothing is logged. The user's sessions stay: each request reads the
// user's role afresh (TouchConsoleSession), so a demoted administrator's
// next request is a reviewer's. Taking the role of the tenant's last active
// administrator is refused, whoever asks, the administrator included
// (EForbidden, see keepsAnAdmin). EInvalidRequest for an unknown role;
// EForbidden unless actor is an active admin; ENotFound for users of other
// tenants.
func (s *Store) AdminSetUserRole(ctx context.Context, actor models.User, userID string, role models.Role, now time.Time) (models.User, error) {
	if !role.Valid() {
		return models.User{}, models.Errorf(models.EInvalidRequest, "role must be reviewer or admin")
	}
	return s.adminUpdateUser(ctx, actor, userID, roleEdit(role), now)
}

// SetUserRole is AdminSetUserRole for the command line, the installation's
// operator: no administrator is needed, the user is named, and the audit
// log records the system as the actor. The last active administrator keeps
// the role here too: the operator makes another user one first.
func (s *Store) SetUserRole(ctx context.Context, tenantID, name string, role models.Role, now time.Time) (models.User, error) {
	if !role.Valid() {
		return models.User{}, models.Errorf(models.EInvalidRequest, "role must be reviewer or admin")
	}
	return s.editUserByName(ctx, tenantID, name, roleEdit(role), now)
}

// editUserByName applies e to the tenant's user of that name, as the
// system: the command line's edits.
func (s *Store) editUserByName(ctx context.Context, tenantID, name string, e userEdit, now time.Time) (models.User, error) {
	var row userRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if e.demotes {
			if err := lockTenant(tx, tenantID); err != nil {
				return err
			}
		}
		var err error
		row, err = editUser(tx, tenantID, "", "name", name, e, now)
		return err
	})
	if err != nil {
		return models.User{}, err
	}
	return row.model(), nil
}

func roleEdit(role models.Role) userEdit {
	return userEdit{set: map[string]any{"role": string(role)}, demotes: role != models.RoleAdmin,
		unchanged: func(r userRow) bool { return r.Role == string(role) }}
}

// voidPendingApprovals voids userID's approvals of the tenant's proposals
// that still await confirmation. It runs after the user row was updated in
// the same transaction: a concurrent RecordDecision locks that row first, so
// either its approval is in place to be voided here, or it waits and then
// finds the user disabled.
func voidPendingApprovals(tx *gorm.DB, tenantID, userID string, now time.Time) error {
	pending := tx.Model(&decisionRow{}).Select("proposal_id").
		Where("tenant_id = ? AND user_id = ? AND kind = ? AND voided_at IS NULL", tenantID, userID, string(models.DecisionApprove))
	awaiting := tx.Model(&proposalRow{}).Select("id").
		Where("tenant_id = ? AND status = ?", tenantID, string(models.StatusAwaitingConfirmation))
	err := tx.Model(&proposalRow{}).
		Where("tenant_id = ? AND status = ? AND id IN (?)", tenantID, string(models.StatusAwaitingConfirmation), pending).
		Updates(map[string]any{"revision": gorm.Expr("revision + 1"), "updated_at": ms(now)}).Error
	if err != nil {
		return err
	}
	return tx.Model(&decisionRow{}).
		Where("tenant_id = ? AND user_id = ? AND kind = ? AND voided_at IS NULL AND proposal_id IN (?)",
			tenantID, userID, string(models.DecisionApprove), awaiting).
		Update("voided_at", ms(now)).Error
}

// AdminSetPassword replaces the password hash of a user of the actor's
// tenant, records the actor as the last to reset it, and ends the user's
// sessions, in one transaction. EForbidden unless actor is an active admin;
// ENotFound for users of other tenants.
func (s *Store) AdminSetPassword(ctx context.Context, actor models.User, userID, passwordHash string, now time.Time) (models.User, error) {
	return s.adminUpdateUser(ctx, actor, userID, userEdit{set: map[string]any{"password_hash": passwordHash,
		"password_reset_by": actor.ID, "password_reset_at": ms(now)}, endSessions: true}, now)
}

// userEdit is one change of a user row.
type userEdit struct {
	set         map[string]any
	endSessions bool
	// demotes: the change may leave the user no active administrator, so
	// it is refused when that would leave the tenant none.
	demotes bool
	// unchanged, when set, reports a row the change would leave as it is:
	// then nothing is written or logged.
	unchanged func(userRow) bool
	// after, when set, runs in the transaction after the change, given
	// the user's id.
	after func(tx *gorm.DB, userID string) error
}

func (s *Store) adminUpdateUser(ctx context.Context, actor models.User, userID string, e userEdit, now time.Time) (models.User, error) {
	var row userRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if e.demotes {
			// Before requireAdmin: an actor demoted by a change that held
			// the lock is seen demoted.
			if err := lockTenant(tx, actor.TenantID); err != nil {
				return err
			}
		}
		if err := requireAdmin(tx, actor); err != nil {
			return err
		}
		var err error
		row, err = editUser(tx, actor.TenantID, actor.ID, "id", userID, e, now)
		return err
	})
	if err != nil {
		return models.User{}, err
	}
	return row.model(), nil
}

// editUser applies e to the tenant's user whose column by ("id" or "name")
// is key, inside tx, and logs it as actorID's ("" for the system).
// ENotFound for no such user; EForbidden when e.demotes and the user is
// the tenant's last active administrator.
func editUser(tx *gorm.DB, tenantID, actorID, by, key string, e userEdit, now time.Time) (userRow, error) {
	var before, row userRow
	// The row's lock (a no-op update) first: the row read next is the one
	// the change replaces, for the log.
	res := tx.Model(&userRow{}).Where("tenant_id = ? AND "+by+" = ?", tenantID, key).Update("role", gorm.Expr("role"))
	if res.Error != nil {
		return row, res.Error
	}
	if res.RowsAffected == 0 {
		return row, models.Errorf(models.ENotFound, "no such user")
	}
	if err := tx.Where("tenant_id = ? AND "+by+" = ?", tenantID, key).Take(&before).Error; err != nil {
		return row, err
	}
	if e.unchanged != nil && e.unchanged(before) {
		return before, nil
	}
	q := tx.Model(&userRow{}).Where("tenant_id = ? AND id = ?", tenantID, before.ID)
	if e.demotes {
		q = keepsAnAdmin(q, tenantID, before.ID)
	}
	res = q.Updates(e.set)
	if res.Error != nil {
		return row, res.Error
	}
	if res.RowsAffected == 0 {
		return row, models.Errorf(models.EForbidden,
			"%s is the organization's last active administrator: make another user an administrator first, so that someone can still manage it", before.Name)
	}
	if e.endSessions {
		if err := revokeUserSessions(tx, tenantID, before.ID, now); err != nil {
			return row, err
		}
	}
	if e.after != nil {
		if err := e.after(tx, before.ID); err != nil {
			return row, err
		}
	}
	if err := tx.Where("tenant_id = ? AND id = ?", tenantID, before.ID).Take(&row).Error; err != nil {
		return row, err
	}
	data := userChange(before.ID, e.set)
	if _, ok := e.set["role"]; ok {
		data["previous_role"] = before.Role
	}
	return row, appendAudit(tx, tenantID, now, adminEvent(models.AuditUserChanged, actorID, data))
}

// keepsAnAdmin narrows q, an update of the tenant's user userID, to when
// the tenant still has an active administrator without that user: the
// user is none now, or another one is. The condition is part of the
// UPDATE, never a read before it. On PostgreSQL each statement reads the
// rows as they were when it started, so two such updates of two
// administrators running at once would each count the other; the caller
// holds lockTenant, which makes them take turns, and the second, starting
// after the first committed, sees it. (SQLite has one writer.)
func keepsAnAdmin(q *gorm.DB, tenantID, userID string) *gorm.DB {
	admin, active := string(models.RoleAdmin), false
	return q.Where("(NOT (role = ? AND disabled = ?) OR EXISTS (SELECT 1 FROM users AS other"+
		" WHERE other.tenant_id = ? AND other.id <> ? AND other.role = ? AND other.disabled = ?))",
		admin, active, tenantID, userID, admin, active)
}

// lockTenant takes the tenant row's lock (a no-op update) until the end of
// tx. Every change that may take away an active administrator takes it
// before it reads or writes any user, and nothing else does.
func lockTenant(tx *gorm.DB, tenantID string) error {
	return tx.Model(&tenantRow{}).Where("id = ?", tenantID).Update("name", gorm.Expr("name")).Error
}

// AdminListAgents returns the agents of the actor's tenant, by name, revoked
// ones included. EForbidden unless actor is an active admin.
func (s *Store) AdminListAgents(ctx context.Context, actor models.User) ([]models.Agent, error) {
	var rows []agentRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := requireAdmin(tx, actor); err != nil {
			return err
		}
		return tx.Where("tenant_id = ?", actor.TenantID).Order("name, id").Find(&rows).Error
	})
	if err != nil {
		return nil, err
	}
	out := make([]models.Agent, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// AdminCreateAgent creates an agent in the actor's tenant whose API key
// hashes to keyHash; ownerUserID may be empty. EForbidden unless actor is an
// active admin; ENotFound for an owner outside the tenant; EAlreadyExists
// when the name is taken.
func (s *Store) AdminCreateAgent(ctx context.Context, actor models.User, name, ownerUserID, keyHash string) (models.Agent, error) {
	row := agentRow{ID: models.NewID("agt"), TenantID: actor.TenantID, Name: name, KeyHash: keyHash,
		CreatedBy: actor.ID, CreatedAt: ms(s.clock.Now())}
	if ownerUserID != "" {
		row.OwnerUserID = &ownerUserID
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := requireAdmin(tx, actor); err != nil {
			return err
		}
		if ownerUserID != "" {
			var n int64
			if err := tx.Model(&userRow{}).Where("tenant_id = ? AND id = ?", actor.TenantID, ownerUserID).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return models.Errorf(models.ENotFound, "the owner is not a user of this organization")
			}
		}
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "an agent named %q already exists", name)
		}
		return appendAudit(tx, actor.TenantID, fromMS(row.CreatedAt), adminEvent(models.AuditAgentCreated, actor.ID, agentData(row)))
	})
	if err != nil {
		return models.Agent{}, err
	}
	return row.model(), nil
}

// AdminRevokeAgent revokes an agent of the actor's tenant and returns it;
// revoking a revoked agent changes nothing. EForbidden unless actor is an
// active admin; ENotFound for agents of other tenants.
func (s *Store) AdminRevokeAgent(ctx context.Context, actor models.User, agentID string, now time.Time) (models.Agent, error) {
	var row agentRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := requireAdmin(tx, actor); err != nil {
			return err
		}
		res := tx.Model(&agentRow{}).
			Where("tenant_id = ? AND id = ? AND revoked_at IS NULL", actor.TenantID, agentID).
			Update("revoked_at", ms(now))
		if res.Error != nil {
			return res.Error
		}
		err := tx.Where("tenant_id = ? AND id = ?", actor.TenantID, agentID).Take(&row).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return models.Errorf(models.ENotFound, "no such agent")
		}
		if err != nil || res.RowsAffected == 0 {
			return err
		}
		return appendAudit(tx, actor.TenantID, now, adminEvent(models.AuditAgentRevoked, actor.ID, map[string]any{"agent_id": agentID}))
	})
	if err != nil {
		return models.Agent{}, err
	}
	return row.model(), nil
}

// PruneConsole deletes what can no longer matter: sessions that expired,
// were revoked or were last seen before before, sign-in attempt windows
// that started before it, and WebAuthn ceremonies that expired before it. It returns how many rows it deleted.
// EUnavailable on database errors.
func (s *Store) PruneConsole(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		b := ms(before)
		res := tx.Where("expires_at < ? OR revoked_at < ? OR last_seen_at < ?", b, b, b).Delete(&consoleSessionRow{})
		if res.Error != nil {
			return res.Error
		}
		n += res.RowsAffected
		res = tx.Where("window_start < ?", b).Delete(&loginAttemptRow{})
		if res.Error != nil {
			return res.Error
		}
		n += res.RowsAffected
		// A WebAuthn ceremony that expired is refused whether or not its
		// row is still there: a finish that no longer finds its
		// ceremony fails like one that finds it expired.
		res = tx.Where("expires_at < ?", b).Delete(&ceremonyRow{})
		if res.Error != nil {
			return res.Error
		}
		n += res.RowsAffected
		return nil
	})
	return n, err
}
