package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"reflect"
	"strings"
)

// The SQLite driver (modernc.org/sqlite) compiles a statement's SQL into a
// program once per prepared statement and reuses that program at every
// execution, but database/sql only keeps a statement prepared for as long
// as a *sql.Stmt lives, and GORM's prepared-statement mode re-prepares every
// statement first seen inside a transaction (a statement prepared on a
// *sql.Tx cannot outlive it), which is where almost every write runs.
// Compiling SQL was the largest single cost of a write. stmtCache closes
// that gap below database/sql: each SQLite connection keeps the statements
// it ran, by their SQL, and runs a statement again from its compiled
// program. database/sql never uses a driver connection from two goroutines
// at once, so the cache needs no lock.

// maxCachedStmts bounds the statements one connection keeps (statements
// whose SQL varies, such as IN lists of different lengths, must not grow it
// without bound). When it is full, the statement least recently run gives
// way: what a connection runs all the time (the hot path of a write) stays
// compiled, whatever else ran once (migrations, an administrator's command,
// an unusual page size).
const maxCachedStmts = 256

// stmtCache wraps a driver so that its connections keep their statements
// prepared.
type stmtCache struct{ d driver.Driver }

func (c stmtCache) Open(name string) (driver.Conn, error) {
	conn, err := c.d.Open(name)
	if err != nil {
		return nil, err
	}
	for _, ok := range []bool{implements[driver.ConnPrepareContext](conn), implements[driver.ExecerContext](conn),
		implements[driver.QueryerContext](conn), implements[driver.ConnBeginTx](conn)} {
		if !ok {
			conn.Close()
			return nil, errors.New("store: the SQLite driver lacks a context method the statement cache needs")
		}
	}
	return &cachingConn{Conn: conn, stmts: map[string]*cachedStmt{}}, nil
}

func implements[T any](v any) bool {
	_, ok := v.(T)
	return ok
}

type cachingConn struct {
	driver.Conn
	stmts map[string]*cachedStmt
	// newest and oldest end the kept statements' list, in the order they
	// were last run.
	newest, oldest *cachedStmt
}

type cachedStmt struct {
	s     driver.Stmt
	query string
	// open is set while rows of the statement are being read: the same SQL
	// run again meanwhile (a nested query) goes around the cache.
	open bool
	// newer and older link the statement into its connection's list.
	newer, older *cachedStmt
}

// stmt returns the connection's compiled statement for query, preparing it
// on first use; nil when that statement is in use or is not kept.
func (c *cachingConn) stmt(ctx context.Context, query string) (*cachedStmt, error) {
	if foreignSavepoint(query) {
		return nil, nil
	}
	if s, ok := c.stmts[query]; ok {
		if s.open {
			return nil, nil
		}
		c.unlink(s)
		c.push(s)
		return s, nil
	}
	for len(c.stmts) >= maxCachedStmts {
		if !c.evict() {
			break
		}
	}
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cs := &cachedStmt{s: s, query: query}
	c.stmts[query] = cs
	c.push(cs)
	return cs, nil
}

// push makes s the newest kept statement.
func (c *cachingConn) push(s *cachedStmt) {
	s.newer, s.older = nil, c.newest
	if c.newest != nil {
		c.newest.newer = s
	} else {
		c.oldest = s
	}
	c.newest = s
}

// unlink takes s out of the list.
func (c *cachingConn) unlink(s *cachedStmt) {
	if s.newer != nil {
		s.newer.older = s.older
	} else {
		c.newest = s.older
	}
	if s.older != nil {
		s.older.newer = s.newer
	} else {
		c.oldest = s.newer
	}
	s.newer, s.older = nil, nil
}

// evict closes the statement least recently run, passing over those whose
// rows are being read (their rows still need them), and reports whether
// there was one to close: when every kept statement is being read, the
// cache holds more until they are free again.
func (c *cachingConn) evict() bool {
	for s := c.oldest; s != nil; s = s.newer {
		if !s.open {
			c.unlink(s)
			delete(c.stmts, s.query)
			s.s.Close()
			return true
		}
	}
	return false
}

// foreignSavepoint reports whether query sets, releases or rolls back to a
// savepoint the store did not name. Those are not kept: they compile to a
// few instructions, and their names vary without bound (GORM names a nested
// transaction's savepoint after a pointer): each would be run once, and
// keeping it would only cost a statement kept for a purpose. The store's own
// savepoints, those of a group's members, have at most groupMax names, and
// are kept.
func foreignSavepoint(query string) bool {
	for _, p := range [...]string{"SAVEPOINT ", "RELEASE ", "ROLLBACK TO "} {
		if len(query) >= len(p) && strings.EqualFold(query[:len(p)], p) {
			return !strings.HasPrefix(query[len(p):], memberSavepoint)
		}
	}
	return false
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	}
	return s.s.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	}
	rows, err := s.s.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	s.open = true
	return &cachedRows{Rows: rows, s: s}, nil
}

func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *cachingConn) Close() error {
	for _, s := range c.stmts {
		s.s.Close()
	}
	c.stmts, c.newest, c.oldest = nil, nil, nil
	return c.Conn.Close()
}

func (c *cachingConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *cachingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *cachingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// cachedRows are the rows of a kept statement; closing them resets the
// statement (the driver does) and frees it for the next use.
type cachedRows struct {
	driver.Rows
	s *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.s.open = false
	return err
}

func (r *cachedRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *cachedRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *cachedRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *cachedRows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *cachedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
