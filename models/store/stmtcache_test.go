package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"testing"

	"gorm.io/gorm"
)

// The statement cache must answer exactly as the driver does: a statement
// run again while its own rows are still being read (a nested query of the
// same SQL) goes around the cache, and a connection whose cache is full
// makes room without losing a statement in use.
func TestStatementCacheKeepsAnswersRight(t *testing.T) {
	_, db := cacheStore(t)
	for i := 1; i <= 5; i++ {
		if err := db.Exec("INSERT INTO t (n, v) VALUES (?, ?)", i, fmt.Sprint("v", i)).Error; err != nil {
			t.Fatal(err)
		}
	}
	const q = "SELECT n, v FROM t WHERE n >= ? ORDER BY n"
	// The one writer connection: the outer rows hold it, the inner query
	// runs on it too (inside a transaction), with the same SQL.
	err := db.Transaction(func(tx *gorm.DB) error {
		outer, err := tx.Raw(q, 1).Rows()
		if err != nil {
			return err
		}
		defer outer.Close()
		seen := 0
		for outer.Next() {
			var n int
			var v string
			if err := outer.Scan(&n, &v); err != nil {
				return err
			}
			seen++
			if n != seen || v != fmt.Sprint("v", n) {
				return fmt.Errorf("outer row %d: %d %q", seen, n, v)
			}
			var inner []struct {
				N int
				V string
			}
			if err := tx.Raw(q, n).Scan(&inner).Error; err != nil {
				return err
			}
			if len(inner) != 5-n+1 || inner[0].N != n {
				return fmt.Errorf("inner query from %d: %v", n, inner)
			}
		}
		if seen != 5 {
			return fmt.Errorf("outer query saw %d rows", seen)
		}
		return outer.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	// More distinct statements than one connection keeps: each still
	// answers its own question.
	for i := range maxCachedStmts + 50 {
		var got []struct{ N int }
		sql := fmt.Sprintf("SELECT n FROM t WHERE n <= ? /* %d */ ORDER BY n", i)
		if err := db.Raw(sql, 1+i%5).Scan(&got).Error; err != nil {
			t.Fatal(err)
		}
		if len(got) != 1+i%5 {
			t.Fatalf("statement %d answered %v", i, got)
		}
	}
	var got []struct {
		N int
		V string
	}
	if err := db.Raw(q, 4).Scan(&got).Error; err != nil || len(got) != 2 || got[0].N != 4 || got[1].V != "v5" {
		t.Fatalf("after the cache made room: %v %v", got, err)
	}
}

// Savepoints the store did not name are not kept: GORM names a nested
// transaction's savepoint after a pointer, so that each write through one
// (a business system's nested transaction) had a statement of its own, and
// a few hundred of them filled the cache and started it over, every
// statement of the hot path then compiled again. After more nested
// transactions than the cache holds, it keeps just the statement they ran,
// prepared once.
func TestSavepointsDoNotFillTheStatementCache(t *testing.T) {
	st, db := cacheStore(t)
	const insert = "INSERT INTO t (n) VALUES (?)"
	var first driver.Stmt
	for i := range maxCachedStmts + 50 {
		err := db.Transaction(func(tx *gorm.DB) error {
			return tx.Transaction(func(tx *gorm.DB) error { return tx.Exec(insert, i).Error })
		})
		if err != nil {
			t.Fatal(err)
		}
		kept := writerCache(t, st).stmts
		s, ok := kept[insert]
		if !ok {
			t.Fatalf("after %d nested transactions the cache lost the INSERT (it keeps %d statements)", i+1, len(kept))
		}
		if first == nil {
			first = s.s
		} else if s.s != first {
			t.Fatalf("after %d nested transactions the INSERT was compiled again", i+1)
		}
		for q := range kept {
			if foreignSavepoint(q) {
				t.Fatalf("the cache keeps %q", q)
			}
		}
	}
	var n int64
	if err := db.Raw("SELECT count(*) FROM t").Scan(&n).Error; err != nil || n != maxCachedStmts+50 {
		t.Fatalf("%d rows, %v", n, err)
	}
	// A group's members' savepoints, of at most groupMax names, are kept.
	for q, foreign := range map[string]bool{
		"SAVEPOINT sp824634": true, "RELEASE SAVEPOINT sp824634": true, "ROLLBACK TO SAVEPOINT sp824634": true,
		"savepoint sp1": true, "SAVEPOINT " + memberSavepoint + "31": false, "RELEASE " + memberSavepoint + "0": false,
		"ROLLBACK TO " + memberSavepoint + "7": false, "SELECT 1": false, "RELEASE": false,
	} {
		if got := foreignSavepoint(q); got != foreign {
			t.Errorf("foreignSavepoint(%q) = %v", q, got)
		}
	}
}

// cacheStore opens a SQLite store with a table t (n INTEGER PRIMARY KEY,
// v TEXT) and returns it with its writer.
func cacheStore(t *testing.T) (*Store, *gorm.DB) {
	t.Helper()
	st, err := Open("sqlite://"+filepath.Join(t.TempDir(), "c.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	db := st.db.WithContext(context.Background())
	if err := db.Exec("CREATE TABLE t (n INTEGER PRIMARY KEY, v TEXT)").Error; err != nil {
		t.Fatal(err)
	}
	return st, db
}

// writerCache returns the writer connection's cache, to be read while
// nothing runs on the store.
func writerCache(t *testing.T, st *Store) *cachingConn {
	t.Helper()
	conn, err := st.sqlDB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var kept *cachingConn
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*cachingConn)
		if !ok {
			return fmt.Errorf("the writer's connection is a %T", dc)
		}
		kept = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return kept
}

// order lists the kept statements from the newest to the oldest, checking
// that the list and the map hold the same statements.
func (c *cachingConn) order(t *testing.T) []string {
	t.Helper()
	var out []string
	var newer *cachedStmt
	for s := c.newest; s != nil; s = s.older {
		if s.newer != newer || c.stmts[s.query] != s {
			t.Fatalf("the list is broken at %q", s.query)
		}
		out, newer = append(out, s.query), s
	}
	if c.oldest != newer || len(out) != len(c.stmts) {
		t.Fatalf("the list holds %d statements, the map %d", len(out), len(c.stmts))
	}
	return out
}

// A full cache gives way to the statement least recently run: one that runs
// all the time stays compiled however many others run once (migrations, an
// administrator's command, an unusual page size), and never more than
// maxCachedStmts are kept.
func TestStatementCacheKeepsWhatRunsOften(t *testing.T) {
	st, db := cacheStore(t)
	const hot = "SELECT v FROM t WHERE n = ?"
	if err := db.Exec("INSERT INTO t (n, v) VALUES (1, 'one')").Error; err != nil {
		t.Fatal(err)
	}
	runHot := func() {
		t.Helper()
		var v string
		if err := db.Raw(hot, 1).Scan(&v).Error; err != nil || v != "one" {
			t.Fatalf("hot statement: %q %v", v, err)
		}
	}
	runHot()
	first := writerCache(t, st).stmts[hot]
	if first == nil {
		t.Fatal("the hot statement is not kept")
	}
	once := func(i int) string { return fmt.Sprintf("SELECT count(*) FROM t WHERE n > %d", i) }
	for i := range 3 * maxCachedStmts {
		var n int64
		if err := db.Raw(once(i)).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		c := writerCache(t, st)
		if len(c.stmts) > maxCachedStmts {
			t.Fatalf("after %d statements the cache keeps %d", i+1, len(c.stmts))
		}
		if s := c.stmts[hot]; s != first {
			t.Fatalf("after %d statements run once, the hot statement was compiled again", i+1)
		}
		if newest := c.order(t)[0]; newest != once(i) {
			t.Fatalf("the newest statement is %q, not the one just run", newest)
		}
		if i%50 == 0 {
			runHot()
		}
	}
	c := writerCache(t, st)
	if _, ok := c.stmts[once(0)]; ok {
		t.Fatal("the statement run first and never again is still kept")
	}
	if _, ok := c.stmts[once(3*maxCachedStmts-1)]; !ok {
		t.Fatal("the statement run last is not kept")
	}
}

// A statement whose rows are being read is never closed to make room, even
// when it is the oldest: the cache passes over it, and its rows read to the
// end.
func TestStatementCacheKeepsRowsBeingRead(t *testing.T) {
	st, db := cacheStore(t)
	for i := 1; i <= 3; i++ {
		if err := db.Exec("INSERT INTO t (n, v) VALUES (?, ?)", i, fmt.Sprint("v", i)).Error; err != nil {
			t.Fatal(err)
		}
	}
	const reading = "SELECT n, v FROM t ORDER BY n"
	err := db.Transaction(func(tx *gorm.DB) error {
		rows, err := tx.Raw(reading).Rows()
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			return fmt.Errorf("no first row: %v", rows.Err())
		}
		// Fill the cache twice over, the open statement its oldest.
		for i := range 2 * maxCachedStmts {
			var n int64
			if err := tx.Raw(fmt.Sprintf("SELECT count(*) FROM t WHERE n > %d", i)).Scan(&n).Error; err != nil {
				return err
			}
		}
		seen := 1
		for rows.Next() {
			var n int
			var v string
			if err := rows.Scan(&n, &v); err != nil {
				return err
			}
			seen++
			if n != seen || v != fmt.Sprint("v", n) {
				return fmt.Errorf("row %d: %d %q", seen, n, v)
			}
		}
		if seen != 3 {
			return fmt.Errorf("%d rows", seen)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	c := writerCache(t, st)
	if len(c.stmts) > maxCachedStmts {
		t.Fatalf("the cache keeps %d", len(c.stmts))
	}
	if s, ok := c.stmts[reading]; !ok || s.open {
		t.Fatalf("the statement read while the cache made room: kept %v", ok)
	}
	c.order(t)
}
