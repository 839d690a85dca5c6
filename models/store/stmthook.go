package store

import (
	"context"
	"database/sql/driver"
)

// statementHook sees every statement a connection runs, with its
// arguments, as the driver receives it.
type statementHook func(query string, args []driver.NamedValue)

// unobserved marks the context of the store's own background statements
// (SQLite's watch for other processes' writes): they are not part of any
// use case, so the statement hook does not see them.
type unobserved struct{}

func observed(ctx context.Context) bool { return ctx.Value(unobserved{}) == nil }

// hookDriver reports every statement its connections run to a hook. It sits
// below database/sql, so it sees what GORM and plain SQL send alike, and
// costs one call per statement: nothing is formatted (GORM's logger would
// render each statement with its values inlined, a measurable share of a
// write's CPU).
type hookDriver struct {
	d    driver.Driver
	hook statementHook
}

func (h hookDriver) Open(name string) (driver.Conn, error) {
	c, err := h.d.Open(name)
	if err != nil {
		return nil, err
	}
	return &hookConn{c: c, hook: h.hook}, nil
}

// hookConn forwards everything to the driver's connection.
type hookConn struct {
	c    driver.Conn
	hook statementHook
}

func (c *hookConn) Prepare(query string) (driver.Stmt, error) { return c.c.Prepare(query) }

func (c *hookConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.c.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.c.Prepare(query)
}

func (c *hookConn) Close() error { return c.c.Close() }

func (c *hookConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx reports the transaction's BEGIN, and its COMMIT or ROLLBACK when
// it ends, as statements: each is a round trip on PostgreSQL and a lock
// and a journal write on SQLite, so a change that splits a use case into
// more transactions shows up in the count like one that adds statements.
func (c *hookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := c.c.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 a driver without BeginTx has only Begin
		tx, err = c.c.Begin()
	}
	if err != nil || !observed(ctx) {
		return tx, err
	}
	c.hook("BEGIN", nil)
	return hookTx{tx: tx, hook: c.hook}, nil
}

// hookTx reports the end of a transaction.
type hookTx struct {
	tx   driver.Tx
	hook statementHook
}

func (t hookTx) Commit() error {
	t.hook("COMMIT", nil)
	return t.tx.Commit()
}

func (t hookTx) Rollback() error {
	t.hook("ROLLBACK", nil)
	return t.tx.Rollback()
}

func (c *hookConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.c.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	if observed(ctx) {
		c.hook(query, args)
	}
	return e.ExecContext(ctx, query, args)
}

func (c *hookConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.c.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	if observed(ctx) {
		c.hook(query, args)
	}
	return q.QueryContext(ctx, query, args)
}

func (c *hookConn) Ping(ctx context.Context) error {
	if p, ok := c.c.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *hookConn) ResetSession(ctx context.Context) error {
	if r, ok := c.c.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *hookConn) IsValid() bool {
	if v, ok := c.c.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *hookConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.c.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
