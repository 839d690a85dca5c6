package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strconv"
	"strings"
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
// On PostgreSQL the appenders also take turns: the append takes the
// tenant's advisory lock, held to the commit or rollback (and taken again
// at no cost). Without it, the transactions that read the same head all
// waited for the one that inserted first and then raced again for the
// next head, so that under contention most of their statements were lost
// races (11 to 16 INSERTs per entry with 100 appenders). The lock is taken
// in the append statement itself, so an append that finds the chain free
// costs one statement. One that had to wait read the head as it was
// before it waited (a statement sees the database as of its start) and
// inserts nothing; the next try, under the lock, sees the head as
// committed and inserts. So an append takes at most two statements among appenders that
// take turns, and the lock only orders: ON CONFLICT still decides.
// (Tenants whose hashes collide share a turn, which costs only waiting.)
// The lock is held for the end of the transaction only, the appends and
// the commit. SQLite needs none: it has one writer.
//
// One statement appends up to appendChunk events: INSERT … SELECT reads the
// head, and the database computes each entry's hash over the body it
// assembles from the entry's canonical template and the entry before it,
// so the bytes are those Go would produce — on PostgreSQL with its sha256,
// on SQLite with countersign_audit_hash, a function of this package
// registered with the SQLite driver (models.AuditHash).
func appendAudit(tx *gorm.DB, tenantID string, at time.Time, evs ...models.AuditEvent) error {
	timed := make([]timedEvent, len(evs))
	for i, ev := range evs {
		timed[i] = timedEvent{at: at, ev: ev}
	}
	return appendTimed(tx, tenantID, timed...)
}

// timedEvent is an audit event with the time it records and, when made
// before the transaction (so that the one writer is not held for it), its
// body's template.
type timedEvent struct {
	at  time.Time
	ev  models.AuditEvent
	tpl *models.AuditTemplate
}

// prepared is the tenant's event ev at the time at, its template made.
func prepared(tenantID string, at time.Time, ev models.AuditEvent) (timedEvent, error) {
	tpl, err := ev.Template(tenantID, ms(at))
	return timedEvent{at, ev, &tpl}, err
}

// appendTimed is appendAudit for the events of one change that happened at
// different times (a token's redemption and the outcome of its write).
func appendTimed(tx *gorm.DB, tenantID string, evs ...timedEvent) error {
	if len(evs) == 0 {
		return nil
	}
	pg := tx.Dialector.Name() == "postgres"
	for len(evs) > 0 {
		n := min(len(evs), appendChunk)
		args := make([]any, 0, 1+6*n)
		args = append(args, tenantID)
		for _, t := range evs[:n] {
			tpl := t.tpl
			if tpl == nil {
				made, err := t.ev.Template(tenantID, ms(t.at))
				if err != nil {
					return err
				}
				tpl = &made
			}
			args = append(args, tpl.Prefix, tpl.Middle, tpl.Suffix, t.ev.Kind, t.ev.ProposalID, ms(t.at))
		}
		if err := appendRun(tx, pg, appendSQLs[pg][n], n, args); err != nil {
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// appendChunk is the most events one statement appends.
const appendChunk = 8

// appendRun runs one append of n entries. It inserts all of them or, when
// another transaction took the head meanwhile, none (ON CONFLICT DO
// NOTHING), and then tries again on the new head. Some but not all would
// mean that the chain moved under the statement: the transaction is
// refused rather than committed with a broken link.
func appendRun(tx *gorm.DB, pg bool, q string, n int, args []any) error {
	ctx, c := raw(tx)
	for range maxAppendTries {
		var got int64
		var err error
		if pg {
			err = c.QueryRowContext(ctx, q, args...).Scan(&got)
		} else {
			got, err = execCount(ctx, c, q, args...)
		}
		if err != nil {
			return err
		}
		switch {
		case got == int64(n):
			return nil
		case got != 0:
			return models.Errorf(models.EInternal, "the audit chain moved while %d entries were appended", n)
		}
	}
	return models.Errorf(models.EUnavailable, "the audit log is too busy; try again")
}

// chainLockSpace is the first key of the PostgreSQL advisory locks that
// order appends to a tenant's chain (the second is the tenant's hash); no
// other lock of countersign's uses it.
const chainLockSpace = 0x63730001

// appendSQL is the statement that appends n entries to a tenant's chain.
// h is the head ((0, "") for an empty chain; on PostgreSQL read with the
// tenant's turn taken, see appendAudit); b1 is the first entry's number,
// link and body, e1 the same with its hash, b2 the second entry linked to
// e1, and so on. $1 is the tenant; entry i (from 0) has its template's
// prefix, middle and suffix, its kind, its proposal and its time at
// $(2+6i) … $(7+6i).
//
// All the entries are inserted or none. On SQLite the one writer sees the
// latest head, so one INSERT of them all finds no conflict or (never, in
// practice) conflicts on the first (WHERE true keeps ON CONFLICT from being
// read as a join's ON). On PostgreSQL a statement that waited its turn read
// the head from before it waited: its first entry conflicts with the one
// stored meanwhile, and when that was a single entry the second would not.
// So each entry is inserted by a statement of its own in the WITH (i1, i2,
// …), linked to the one before it only when that one was inserted, and the
// statement answers how many were.
func appendSQL(pg bool, n int) string {
	hash := func(body string) string { return "countersign_audit_hash(" + body + ")" }
	turn := ""
	if pg {
		hash = func(body string) string {
			return "'sha256:' || encode(sha256(convert_to(" + body + ", 'UTF8')), 'hex')"
		}
		turn = " CROSS JOIN (SELECT pg_advisory_xact_lock(" + strconv.Itoa(chainLockSpace) + ", hashtext($1))) AS l"
	}
	const insert = "INSERT INTO audit_entries (tenant_id, seq, prev_hash, hash, kind, proposal_id, body, created_at)"
	var b strings.Builder
	b.WriteString(`WITH h AS (SELECT seq, hash FROM (
    SELECT seq, hash FROM (SELECT seq, hash FROM audit_entries WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1) AS t
    UNION ALL SELECT 0, '') AS c` + turn + ` ORDER BY seq DESC LIMIT 1)`)
	prev := "h"
	sel := make([]string, n)
	for i := range n {
		p := func(k int) string { return "$" + strconv.Itoa(2+6*i+k) }
		bi, ei, ii := "b"+strconv.Itoa(i+1), "e"+strconv.Itoa(i+1), "i"+strconv.Itoa(i+1)
		fmt.Fprintf(&b, `,
  %[1]s AS (SELECT %[3]s.seq + 1 AS seq, %[3]s.hash AS prev,
    CAST(%[4]s AS TEXT) || %[3]s.hash || CAST(%[5]s AS TEXT) || CAST(%[3]s.seq + 1 AS TEXT) || CAST(%[6]s AS TEXT) AS body FROM %[3]s),
  %[2]s AS (SELECT seq, prev, body, %[7]s AS hash FROM %[1]s)`, bi, ei, prev, p(0), p(1), p(2), hash("body"))
		sel[i] = fmt.Sprintf("SELECT CAST($1 AS TEXT), seq, prev, hash, CAST(%s AS TEXT), CAST(%s AS TEXT), body, CAST(%s AS BIGINT) FROM %s",
			p(3), p(4), p(5), ei)
		prev = ei
		if pg {
			fmt.Fprintf(&b, `,
  %s AS (%s %s ON CONFLICT DO NOTHING RETURNING seq, hash)`, ii, insert, sel[i])
			sel[i] = "SELECT 1 FROM " + ii
			prev = ii
		}
	}
	if pg {
		return b.String() + "\nSELECT count(*) FROM (" + strings.Join(sel, " UNION ALL ") + ") AS inserted"
	}
	return b.String() + "\n" + insert + "\n" + strings.Join(sel, "\nUNION ALL ") + " WHERE true\nON CONFLICT DO NOTHING"
}

// appendSQLs are appendSQL's statements, by dialect (PostgreSQL or not)
// and number of entries, built once.
var appendSQLs = func() map[bool][]string {
	m := map[bool][]string{}
	for _, pg := range []bool{false, true} {
		m[pg] = make([]string, appendChunk+1)
		for n := 1; n <= appendChunk; n++ {
			m[pg][n] = appendSQL(pg, n)
		}
	}
	return m
}()

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
	// Signed and SignedAt are, from UncheckpointedHeads, the position of
	// the chain's newest checkpoint and when it was signed (0 and the
	// zero time when it has none).
	Signed   int64
	SignedAt time.Time
}

// UncheckpointedHeads returns, for every tenant whose chain moved since its
// last checkpoint, the current head: grown, as the chain does, or shorter
// than the checkpoint or with another hash at its position, which only an
// edit of the database makes (Seq 0 when no entry is left); the
// checkpointer refuses to sign over the latter. It
// starts from the tenants and finds each head through the chain's key: its
// cost does not grow with the chains' length (this runs every minute, and
// a scan of every entry would hold up the writes behind it).
func (s *Store) UncheckpointedHeads(ctx context.Context) ([]AuditHead, error) {
	var rows []struct {
		TenantID string
		Seq      *int64
		Hash     *string
		Signed   *int64
		SignedAt *string
		SignedMS *int64
	}
	err := s.read.WithContext(ctx).Raw(`SELECT t.id AS tenant_id,
  (SELECT e.seq FROM audit_entries e WHERE e.tenant_id = t.id ORDER BY e.seq DESC LIMIT 1) AS seq,
  (SELECT e.hash FROM audit_entries e WHERE e.tenant_id = t.id ORDER BY e.seq DESC LIMIT 1) AS hash,
  (SELECT c.seq FROM audit_checkpoints c WHERE c.tenant_id = t.id ORDER BY c.seq DESC LIMIT 1) AS signed,
  (SELECT c.hash FROM audit_checkpoints c WHERE c.tenant_id = t.id ORDER BY c.seq DESC LIMIT 1) AS signed_at,
  (SELECT c.created_at FROM audit_checkpoints c WHERE c.tenant_id = t.id ORDER BY c.seq DESC LIMIT 1) AS signed_ms
FROM tenants t ORDER BY t.id`).Scan(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	var out []AuditHead
	for _, r := range rows {
		h := AuditHead{TenantID: r.TenantID}
		if r.Signed != nil && r.SignedMS != nil {
			h.Signed, h.SignedAt = *r.Signed, fromMS(*r.SignedMS)
		}
		switch {
		case r.Seq != nil && r.Hash != nil && (r.Signed == nil || *r.Seq != *r.Signed ||
			(r.SignedAt != nil && *r.SignedAt != *r.Hash)):
			h.Seq, h.Hash = *r.Seq, *r.Hash
			out = append(out, h)
		case r.Seq == nil && r.Signed != nil:
			// Every entry gone, checkpoints left: the checkpointer says so.
			out = append(out, h)
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
