//go:build linux || darwin || freebsd || netbsd || openbsd

package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// TestHoldDatabaseOpen is the helper process of
// TestRestoreRefusesADatabaseInUse: it holds a database open as a server
// does.
func TestHoldDatabaseOpen(t *testing.T) {
	testenv.ServeHold(t, func(db string) (io.Closer, error) {
		st, err := store.Open(db, store.Options{})
		if err != nil {
			return nil, err
		}
		_, err = st.Migrate(context.Background())
		return st, err
	})
}

// Restoring over a database another process has open would leave that
// process writing to the replaced file, whose writes are then lost: it is
// refused, --force or not, and allowed once the process has closed it.
func TestRestoreRefusesADatabaseInUse(t *testing.T) {
	dir := t.TempDir()
	src := tempDB(t)
	mustExec(t, nil, "", "tenant", "create", "acme", "--db", src)
	backup := filepath.Join(dir, "b.db")
	mustExec(t, nil, "", "backup", "--db", src, "--to", backup)
	live := "sqlite://" + filepath.Join(dir, "live.db")
	mustExec(t, nil, "", "tenant", "create", "live", "--db", live)

	release := testenv.HoldOpen(t, "TestHoldDatabaseOpen", live)
	r := invoke(t, nil, "", "restore", "--from", backup, "--db", live, "--force")
	if !models.IsCode(r.err, models.EInvalidState) || !strings.Contains(r.err.Error(), "has "+filepath.Join(dir, "live.db")+" open") {
		t.Fatalf("restore over a database in use: %v", r.err)
	}
	release()
	if out := mustExec(t, nil, "", "restore", "--from", backup, "--db", live, "--force").stdout; !strings.Contains(out, "restored") {
		t.Fatalf("restore once it is closed: %q", out)
	}
}
