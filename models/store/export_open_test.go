package store

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// OpenIndexPredicates maps each partial index of open rows to the
// predicate that its queries carry (open.go).
var OpenIndexPredicates = map[string]string{
	"proposals_awaiting_expires":        awaitingProposal,
	"proposals_agent_awaiting":          awaitingProposal,
	"proposals_tenant_awaiting_expires": awaitingProposal,
	"tokens_issued_expires":             issuedToken,
	"executions_open_lease":             openExecution,
}

// The predicates of the partial indexes of open rows.
const (
	AwaitingProposal = awaitingProposal
	IssuedToken      = issuedToken
	OpenExecution    = openExecution
)

// MigrateDownTo rolls the schema back to version.
func (s *Store) MigrateDownTo(ctx context.Context, version int64) error {
	p, err := s.migrations()
	if err != nil {
		return err
	}
	_, err = p.DownTo(ctx, version)
	return err
}

// ValueForTest reads one value of one row: SELECT col FROM table WHERE where.
func (s *Store) ValueForTest(ctx context.Context, table, col, where string, args ...any) (string, error) {
	var v string
	err := s.db.WithContext(ctx).Table(table).Select(col).Where(where, args...).Row().Scan(&v)
	return v, err
}

// ExplainGeneric is Explain for the plan a prepared statement may be run
// with whatever its arguments: on PostgreSQL the generic plan (forced), on
// SQLite the plan with the arguments not bound (NULL), as a cached
// statement is prepared before any bind.
func (s *Store) ExplainGeneric(ctx context.Context, sql string, args ...any) ([]string, error) {
	if s.dialect == SQLite {
		return s.Explain(ctx, sql, make([]any, len(args))...)
	}
	var plan []string
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		conn := tx.Statement.ConnPool
		for _, q := range []string{"SET LOCAL plan_cache_mode = force_generic_plan", "PREPARE explained_generic AS " + sql} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		defer conn.ExecContext(ctx, "DEALLOCATE explained_generic")
		// The generic plan does not depend on the values.
		stmt := "EXECUTE explained_generic"
		if len(args) > 0 {
			stmt += "(" + strings.TrimSuffix(strings.Repeat("NULL, ", len(args)), ", ") + ")"
		}
		var err error
		plan, err = explain(tx, s.dialect, stmt)
		return err
	})
	return plan, err
}
