package store

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"
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
		prefix := "EXPLAIN QUERY PLAN "
		if s.dialect == Postgres {
			prefix = "EXPLAIN "
			if err := tx.Exec("SET LOCAL enable_seqscan = off").Error; err != nil {
				return err
			}
		}
		rows, err := tx.Raw(prefix + stmt).Rows()
		if err != nil {
			return fmt.Errorf("explain %s: %w", stmt, err)
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
				return err
			}
			// SQLite: id, parent, notused, detail; PostgreSQL: one text column.
			plan = append(plan, strings.TrimSpace(fmt.Sprint(vals[len(vals)-1])))
		}
		return rows.Err()
	})
	return plan, err
}
