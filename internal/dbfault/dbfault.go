// Package dbfault wraps a database/sql driver so that tests can make a
// transaction's COMMIT fail the way a dropped database connection does:
// either after the database applied it (the client never hears back) or
// before it reached the database (nothing is applied). It works for any
// driver, so the same fault runs on SQLite and PostgreSQL; pass
// Injector.Wrap as store.Options.WrapDriver.
//
// A fault is armed for the next transaction with a write statement that
// starts with a given prefix (e.g. "update tokens", "insert into
// proposals"; compared in lower case, identifiers unquoted, single spaces),
// so that read transactions and other use cases in between are not hit.
package dbfault

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
)

// Mode says when an armed commit fails.
type Mode int

// Modes.
const (
	// AfterCommit commits, then reports the connection as lost.
	AfterCommit Mode = iota + 1
	// BeforeCommit rolls back, then reports the connection as lost.
	BeforeCommit
)

// ErrConnectionLost is what a faulted commit returns.
var ErrConnectionLost = errors.New("dbfault: connection lost during commit")

// Injector holds the armed faults. Its zero value injects nothing.
type Injector struct {
	mu    sync.Mutex
	armed []fault
	fired int
}

type fault struct {
	mode   Mode
	prefix string
}

// Arm makes the commit of the next transaction with a write statement
// starting with prefix fail in mode. Faults armed several times fire in
// order, one per transaction.
func (in *Injector) Arm(mode Mode, prefix string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.armed = append(in.armed, fault{mode: mode, prefix: strings.Join(strings.Fields(strings.ToLower(prefix)), " ")})
}

// Fired reports how many faults were injected so far.
func (in *Injector) Fired() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.fired
}

// Pending reports how many armed faults have not fired yet.
func (in *Injector) Pending() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.armed)
}

// take removes and returns the first armed fault whose prefix one of the
// transaction's write statements starts with.
func (in *Injector) take(writes []string) (Mode, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, f := range in.armed {
		for _, w := range writes {
			if strings.HasPrefix(w, f.prefix) {
				in.armed = append(in.armed[:i], in.armed[i+1:]...)
				in.fired++
				return f.mode, true
			}
		}
	}
	return 0, false
}

// Wrap returns d with its connections' commits under the injector's
// control.
func (in *Injector) Wrap(d driver.Driver) driver.Driver { return &drv{d: d, in: in} }

type drv struct {
	d  driver.Driver
	in *Injector
}

func (d *drv) Open(name string) (driver.Conn, error) {
	c, err := d.d.Open(name)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, in: d.in}, nil
}

// conn forwards everything to the driver's connection and records the
// write statements of the open transaction.
type conn struct {
	c      driver.Conn
	in     *Injector
	inTx   bool
	writes []string
}

func (c *conn) note(query string) {
	if !c.inTx {
		return
	}
	if q := normalizeSQL(query); isWrite(q) {
		c.writes = append(c.writes, q)
	}
}

func (c *conn) Prepare(query string) (driver.Stmt, error) {
	c.note(query)
	return c.c.Prepare(query)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.note(query)
	if p, ok := c.c.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.c.Prepare(query)
}

func (c *conn) Close() error { return c.c.Close() }

func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		t   driver.Tx
		err error
	)
	if b, ok := c.c.(driver.ConnBeginTx); ok {
		t, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 a driver without BeginTx has only Begin
		t, err = c.c.Begin()
	}
	if err != nil {
		return nil, err
	}
	c.inTx, c.writes = true, nil
	return &tx{t: t, c: c}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.c.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.note(query)
	return e.ExecContext(ctx, query, args)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.c.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.note(query) // INSERT … RETURNING runs as a query
	return q.QueryContext(ctx, query, args)
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.c.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.c.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) IsValid() bool {
	if v, ok := c.c.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.c.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type tx struct {
	t driver.Tx
	c *conn
}

func (t *tx) Commit() error {
	writes := t.c.writes
	t.c.inTx, t.c.writes = false, nil
	mode, ok := t.c.in.take(writes)
	if !ok {
		return t.t.Commit()
	}
	switch mode {
	case AfterCommit:
		if err := t.t.Commit(); err != nil {
			return err
		}
	default:
		if err := t.t.Rollback(); err != nil {
			return errors.Join(ErrConnectionLost, err)
		}
	}
	return ErrConnectionLost
}

func (t *tx) Rollback() error {
	t.c.inTx, t.c.writes = false, nil
	return t.t.Rollback()
}
