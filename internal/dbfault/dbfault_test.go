package dbfault_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"testing"

	_ "github.com/libtnb/sqlite" // registers the "sqlite" driver (modernc.org/sqlite)

	"github.com/countersign/countersign/internal/dbfault"
)

type connector struct {
	d   driver.Driver
	dsn string
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.d }

func open(t *testing.T, in *dbfault.Injector) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "f.db")
	probe, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	d := probe.Driver()
	probe.Close()
	db := sql.OpenDB(connector{d: in.Wrap(d), dsn: dsn})
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	return db
}

func insert(db *sql.DB, id int) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO items (id, v) VALUES (?, 'x')`, id); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM items`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFaultsHitOnlyTheArmedWrite(t *testing.T) {
	in := &dbfault.Injector{}
	db := open(t, in)
	in.Arm(dbfault.AfterCommit, "insert into items")
	// A read-only transaction in between is not hit.
	tx, _ := db.Begin()
	tx.QueryRow(`SELECT 1`).Scan(new(int))
	if err := tx.Commit(); err != nil {
		t.Fatalf("read-only commit: %v", err)
	}
	if err := insert(db, 1); !errors.Is(err, dbfault.ErrConnectionLost) {
		t.Fatalf("after commit: err = %v", err)
	}
	if got := count(t, db); got != 1 {
		t.Fatalf("rows after a commit reported lost = %d, want 1 (it committed)", got)
	}
	in.Arm(dbfault.BeforeCommit, "insert into items")
	if err := insert(db, 2); !errors.Is(err, dbfault.ErrConnectionLost) {
		t.Fatalf("before commit: err = %v", err)
	}
	if got := count(t, db); got != 1 {
		t.Fatalf("rows after a commit lost before it = %d, want 1 (rolled back)", got)
	}
	if err := insert(db, 3); err != nil {
		t.Fatalf("unarmed: %v", err)
	}
	if in.Fired() != 2 || in.Pending() != 0 {
		t.Fatalf("fired %d pending %d", in.Fired(), in.Pending())
	}
}
