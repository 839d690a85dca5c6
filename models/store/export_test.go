package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// ExplainList returns the database's plan for ListProposals(f), one line
// per plan node. On PostgreSQL sequential scans are disabled for the
// transaction, so that the plan shows which index the planner can use
// rather than what it prefers for a table of a few rows.
func (s *Store) ExplainList(ctx context.Context, f ListFilter) ([]string, error) {
	var plan []string
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		stmt := tx.ToSQL(func(tx *gorm.DB) *gorm.DB {
			q, err := listQuery(tx, f, 51)
			if err != nil {
				_ = tx.AddError(err)
				return tx
			}
			var rows []map[string]any
			return q.Scan(&rows)
		})
		var err error
		plan, err = explain(tx, s.dialect, stmt)
		return err
	})
	return plan, err
}

// Explain returns the database's plan for the statement sql with its
// arguments, as OpenRecording reports them, one line per plan node, with
// sequential scans disabled on PostgreSQL as in ExplainList.
func (s *Store) Explain(ctx context.Context, sql string, args ...any) ([]string, error) {
	var plan []string
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		plan, err = explain(tx, s.dialect, sql, args...)
		return err
	})
	return plan, err
}

// OpenRecording is Open with every statement the store's connections run
// reported to fn with its arguments.
func OpenRecording(url string, opts Options, fn func(sql string, args []any)) (*Store, error) {
	opts.onStatementArgs = func(q string, nvs []driver.NamedValue) {
		args := make([]any, len(nvs))
		for i, nv := range nvs {
			args[i] = nv.Value
		}
		fn(q, args)
	}
	return Open(url, opts)
}

func explain(tx *gorm.DB, dialect Dialect, stmt string, args ...any) ([]string, error) {
	var plan []string
	prefix := "EXPLAIN QUERY PLAN "
	if dialect == Postgres {
		prefix = "EXPLAIN "
		if err := tx.Exec("SET LOCAL enable_seqscan = off").Error; err != nil {
			return nil, err
		}
	}
	rows, err := tx.Statement.ConnPool.QueryContext(tx.Statement.Context, prefix+stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("explain %s: %w", stmt, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		// SQLite: id, parent, notused, detail; PostgreSQL: one text column.
		plan = append(plan, strings.TrimSpace(fmt.Sprint(vals[len(vals)-1])))
	}
	return plan, rows.Err()
}

// HoldRead starts a read transaction on the reader pool, reads from it, and
// keeps it open until release is called: a slow list in progress.
func (s *Store) HoldRead(ctx context.Context) (release func(), err error) {
	tx := s.read.WithContext(ctx).Begin()
	if tx.Error != nil {
		return nil, tx.Error
	}
	var n int64
	if err := tx.Table("proposals").Count(&n).Error; err != nil {
		tx.Rollback()
		return nil, err
	}
	return func() { tx.Rollback() }, nil
}

// ReaderExec runs a statement on the reader pool.
func (s *Store) ReaderExec(ctx context.Context, stmt string) error {
	return s.read.WithContext(ctx).Exec(stmt).Error
}

// MigrateTo applies migrations up to and including version, so that a test
// can write data in an older schema and then upgrade it.
func (s *Store) MigrateTo(ctx context.Context, version int64) error {
	p, err := s.migrations()
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, version)
	return err
}

// Exec runs raw SQL, for tests that write rows of an older schema.
func (s *Store) Exec(ctx context.Context, sql string, args ...any) error {
	return s.db.WithContext(ctx).Exec(sql, args...).Error
}

// URLForTest is the URL the store was opened with.
func (s *Store) URLForTest() string { return s.url }

// ExecRawForTest runs one statement outside the store's methods, as any
// other database client could: tests use it to show what the database
// itself refuses.
func (s *Store) ExecRawForTest(ctx context.Context, q string) error {
	_, err := s.sqlDB.ExecContext(ctx, q)
	return err
}

// AuditTxForTest appends evs (evs[i] at times[i]) to the tenant's chain in
// one transaction, then tells appended and waits for hold (when not nil)
// before it commits.
func (s *Store) AuditTxForTest(ctx context.Context, tenantID string, times []time.Time, evs []models.AuditEvent,
	appended chan<- struct{}, hold <-chan struct{}) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		timed := make([]timedEvent, len(evs))
		for i, ev := range evs {
			timed[i] = timedEvent{at: times[i], ev: ev}
		}
		if err := appendTimed(tx, tenantID, timed...); err != nil {
			return err
		}
		if appended != nil {
			close(appended)
		}
		if hold != nil {
			<-hold
		}
		return nil
	})
}

// ChainWaitersForTest is how many PostgreSQL sessions wait for a tenant's
// turn at its audit chain (appendAudit).
func (s *Store) ChainWaitersForTest(ctx context.Context) (int, error) {
	var n int
	err := s.db.WithContext(ctx).Raw("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = ? AND NOT granted",
		chainLockSpace).Scan(&n).Error
	return n, err
}
