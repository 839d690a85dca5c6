package store

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// The statements of the hot paths (redeeming a token, recording an outcome,
// creating a proposal, the audit chain and the outbox) run as plain SQL on
// the transaction's connection: GORM's statement building, reflection and
// allocations were a sixth of an execute's CPU. One SQL text serves both
// databases: placeholders are numbered ($1, $2, …), which PostgreSQL takes
// natively and the SQLite driver binds by the same numbers (a number used
// twice is one argument). Rows are scanned by hand.

// sqlConn runs statements: a transaction's connection (*sql.Tx) or a pool.
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// raw returns the connection and context of a GORM handle (inside s.tx, its
// transaction), for plain SQL in the same transaction.
func raw(tx *gorm.DB) (context.Context, sqlConn) {
	ctx := tx.Statement.Context
	if ctx == nil {
		ctx = context.Background()
	}
	return ctx, tx.Statement.ConnPool
}

// execCount runs a statement and returns the number of rows it changed.
func execCount(ctx context.Context, c sqlConn, query string, args ...any) (int64, error) {
	res, err := c.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// numbered rewrites the ? placeholders of a condition to $from, $from+1, …
// (the conditions callers pass hold no ? in literals).
func numbered(cond string, from int) string {
	if !strings.Contains(cond, "?") {
		return cond
	}
	var b strings.Builder
	b.Grow(len(cond) + 8)
	for i := 0; i < len(cond); i++ {
		if cond[i] == '?' {
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(from))
			from++
			continue
		}
		b.WriteByte(cond[i])
	}
	return b.String()
}

// placeholders returns "$from, $from+1, …" for n values.
func placeholders(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(from + i))
	}
	return b.String()
}
