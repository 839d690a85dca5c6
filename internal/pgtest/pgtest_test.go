package pgtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/countersign/countersign/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("ping %s: %v", dsn, err)
	}
	return db
}

func TestDSN(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	if !strings.HasPrefix(dsn, "postgres://postgres@127.0.0.1:") {
		t.Errorf("DSN = %q, want a TCP DSN on 127.0.0.1", dsn)
	}
	db := open(t, dsn)

	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("new database has %d tables, want 0", n)
	}

	if _, err := db.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO items VALUES ($1, $2)`, "a", 42); err != nil {
		t.Fatal(err)
	}
	var got int
	if err := db.QueryRowContext(ctx, `SELECT n FROM items WHERE id = $1`, "a").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := 42; got != want {
		t.Errorf("n = %d, want %d", got, want)
	}

	var enc string
	if err := db.QueryRowContext(ctx, `SHOW server_encoding`).Scan(&enc); err != nil {
		t.Fatal(err)
	}
	if enc != "UTF8" {
		t.Errorf("server_encoding = %q, want UTF8", enc)
	}
}

func TestDSNIsolated(t *testing.T) {
	ctx := context.Background()
	dsn1, dsn2 := pgtest.DSN(t), pgtest.DSN(t)
	if dsn1 == dsn2 {
		t.Fatalf("two DSN calls gave the same database %q", dsn1)
	}
	db1, db2 := open(t, dsn1), open(t, dsn2)

	if _, err := db1.ExecContext(ctx, `CREATE TABLE only_in_one (id INTEGER)`); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := db2.QueryRowContext(ctx, `SELECT to_regclass('only_in_one') IS NOT NULL`).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Error("a table created in the first database is visible in the second")
	}
	// The same name is free in the second database.
	if _, err := db2.ExecContext(ctx, `CREATE TABLE only_in_one (id INTEGER)`); err != nil {
		t.Errorf("create the same table in the second database: %v", err)
	}
}

// TestDSNDropped checks that a test's database is gone once the test ends,
// even if the test left a connection open.
func TestDSNDropped(t *testing.T) {
	var (
		dsn, name string
		leaked    *sql.DB
	)
	t.Run("inner", func(t *testing.T) {
		dsn = pgtest.DSN(t)
		// Deliberately not closed before the inner test ends.
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		leaked = db
		if err := db.QueryRow(`SELECT current_database()`).Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	if leaked != nil {
		defer leaked.Close()
	}
	if name == "" {
		t.Skip("inner test did not get a database")
	}
	admin := open(t, strings.Replace(dsn, "/"+name+"?", "/postgres?", 1))
	var n int
	if err := admin.QueryRow(`SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

// TestDSNParallel makes many databases at once; run with -race.
func TestDSNParallel(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db := open(t, pgtest.DSN(t))
			if _, err := db.Exec(`CREATE TABLE t (id INTEGER)`); err != nil {
				t.Fatal(err)
			}
		})
	}
}
