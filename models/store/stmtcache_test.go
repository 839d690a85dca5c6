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
// starts over without losing a statement in use.
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
		t.Fatalf("after the cache started over: %v %v", got, err)
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
		kept := writerCache(t, st)
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

// writerCache returns the statements the writer connection keeps.
func writerCache(t *testing.T, st *Store) map[string]*cachedStmt {
	t.Helper()
	conn, err := st.sqlDB.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var kept map[string]*cachedStmt
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*cachingConn)
		if !ok {
			return fmt.Errorf("the writer's connection is a %T", dc)
		}
		kept = c.stmts
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return kept
}
