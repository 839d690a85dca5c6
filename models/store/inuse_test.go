//go:build linux || darwin || freebsd || netbsd || openbsd

package store_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models/store"
)

// TestHoldDatabaseOpen is the helper process of TestSQLiteInUse.
func TestHoldDatabaseOpen(t *testing.T) {
	testenv.ServeHold(t, func(path string) (io.Closer, error) {
		st, err := store.Open("sqlite://"+path, store.Options{})
		if err != nil {
			return nil, err
		}
		_, err = st.Migrate(context.Background())
		return st, err
	})
}

// Another process holding a database open is seen (a restore must not
// replace a file a server uses); once it closes the database, or when it
// was never opened, it is not.
func TestSQLiteInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	if used, err := store.SQLiteInUse(path); err != nil || used {
		t.Fatalf("a database that does not exist: in use %v, %v", used, err)
	}
	release := testenv.HoldOpen(t, "TestHoldDatabaseOpen", path)
	if used, err := store.SQLiteInUse(path); err != nil || !used {
		t.Errorf("held open by another process: in use %v, %v", used, err)
	}
	release()
	if used, err := store.SQLiteInUse(path); err != nil || used {
		t.Errorf("after the other process closed it: in use %v, %v", used, err)
	}
}
