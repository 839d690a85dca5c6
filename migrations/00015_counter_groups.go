package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/pressly/goose/v3"
)

// Migration 00015 is written in Go because it must widen the CHECK
// constraint on proposals.status (a new state, superseded) and the two
// databases cannot do that with the same SQL: PostgreSQL drops and adds the
// constraint; SQLite cannot alter a constraint at all and rebuilds the
// table. Everything else it adds is plain SQL shared by both.

// Go returns the migrations written in Go, for the dialect "postgres" or
// "sqlite3", to be given to goose beside FS.
func Go(dialect string) []*goose.Migration {
	up := counterGroupsSQLite
	if dialect == "postgres" {
		up = counterGroupsPostgres
	}
	return []*goose.Migration{goose.NewGoMigration(15, &goose.GoFunc{RunTx: up}, nil)}
}

// statusCheck lists every proposal state the database accepts.
const statusCheck = `status IN ('proposed', 'rejected', 'awaiting_confirmation',
                             'declined', 'cancelled', 'expired', 'confirmed', 'revoked', 'executing',
                             'succeeded', 'failed_retryable', 'failed_terminal', 'unknown', 'superseded')`

// counterGroupsTables are the new tables, the same on both databases.
var counterGroupsTables = []string{
	// A reviewer's edit of a proposal: the original ended superseded and
	// the revised version replaced it. One edit per original.
	`CREATE TABLE counter_proposals (
    revised_id        TEXT PRIMARY KEY REFERENCES proposals(id),
    original_id       TEXT NOT NULL UNIQUE REFERENCES proposals(id),
    tenant_id         TEXT NOT NULL REFERENCES tenants(id),
    editor_id         TEXT NOT NULL REFERENCES users(id),
    reason            TEXT NOT NULL,
    changes           TEXT NOT NULL,
    version           INTEGER NOT NULL CHECK (version >= 2),
    root_request_key  TEXT NOT NULL,
    created_at        BIGINT NOT NULL
)`,
	// Reviewer groups, managed by administrators, and their members.
	`CREATE TABLE reviewer_groups (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL REFERENCES tenants(id),
    name        TEXT NOT NULL,
    created_by  TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
)`,
	`CREATE TABLE reviewer_group_members (
    group_id   TEXT NOT NULL REFERENCES reviewer_groups(id),
    user_id    TEXT NOT NULL REFERENCES users(id),
    tenant_id  TEXT NOT NULL REFERENCES tenants(id),
    added_by   TEXT NOT NULL DEFAULT '',
    added_at   BIGINT NOT NULL,
    PRIMARY KEY (group_id, user_id)
)`,
	`CREATE INDEX reviewer_group_members_user ON reviewer_group_members (tenant_id, user_id)`,
	// The approver-group factors a proposal's tier required when it was
	// proposed ("count of group"), all of which must be met; none means the
	// tier's plain quorum decides.
	`CREATE TABLE proposal_factors (
    proposal_id  TEXT NOT NULL REFERENCES proposals(id),
    position     INTEGER NOT NULL,
    group_name   TEXT NOT NULL,
    count        INTEGER NOT NULL CHECK (count >= 1),
    PRIMARY KEY (proposal_id, position)
)`,
}

func counterGroupsPostgres(ctx context.Context, tx *sql.Tx) error {
	// The status constraint's name depends on the table it was created
	// with (00004 rebuilt proposals), so look it up.
	rows, err := tx.QueryContext(ctx, `SELECT conname FROM pg_constraint
		WHERE conrelid = 'proposals'::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%awaiting_confirmation%'`)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(names) != 1 {
		return fmt.Errorf("00015: expected one status constraint on proposals, found %v", names)
	}
	stmts := []string{
		fmt.Sprintf(`ALTER TABLE proposals DROP CONSTRAINT %q`, names[0]),
		`ALTER TABLE proposals ADD CONSTRAINT proposals_status_check CHECK (` + statusCheck + `)`,
	}
	return execAll(ctx, tx, append(stmts, counterGroupsTables...))
}

// counterGroupsSQLite rebuilds proposals with the wider constraint, keeping
// its definition otherwise exactly as stored (columns that earlier
// migrations added included), then re-creates its indexes. Tables that
// reference proposals keep pointing at it by name; their foreign keys are
// checked once, at commit, when every row is back.
func counterGroupsSQLite(ctx context.Context, tx *sql.Tx) error {
	var def string
	if err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'proposals'`).Scan(&def); err != nil {
		return err
	}
	const old = `'failed_terminal', 'unknown'))`
	if strings.Count(def, old) != 1 {
		return fmt.Errorf("00015: the status constraint of proposals is not as created by 00004")
	}
	def = strings.Replace(def, old, `'failed_terminal', 'unknown', 'superseded'))`, 1)
	rows, err := tx.QueryContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'proposals' AND sql IS NOT NULL`)
	if err != nil {
		return err
	}
	var indexes []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return err
		}
		indexes = append(indexes, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	stmts := []string{
		// Foreign keys referencing proposals are checked at commit, not
		// while the table is briefly empty.
		`PRAGMA defer_foreign_keys = ON`,
		`CREATE TABLE proposals_v15_copy AS SELECT * FROM proposals`,
		`DROP TABLE proposals`,
		def,
		`INSERT INTO proposals SELECT * FROM proposals_v15_copy`,
		`DROP TABLE proposals_v15_copy`,
	}
	stmts = append(stmts, indexes...)
	return execAll(ctx, tx, append(stmts, counterGroupsTables...))
}

func execAll(ctx context.Context, tx *sql.Tx, stmts []string) error {
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("00015: %w: %s", err, s)
		}
	}
	return nil
}
