package store_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// statement is one statement a store's connection ran, with its arguments,
// as the driver received it.
type statement struct {
	sql  string
	args []any
}

// recording is a migrated store, its clock fixed at now, that keeps the
// statements its connections run, so that a test can check the plans of
// what the store really sends.
type recording struct {
	*store.Store
	mu    sync.Mutex
	stmts []statement
}

func openRecording(t *testing.T, url string, now time.Time) *recording {
	t.Helper()
	r := &recording{}
	st, err := store.OpenRecording(url, store.Options{Clock: models.NewFixedClock(now)}, func(q string, args []any) {
		r.mu.Lock()
		r.stmts = append(r.stmts, statement{q, args})
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.Store = st
	return r
}

// ran calls fn and returns the statements run meanwhile; name says which
// call failed.
func (r *recording) ran(t *testing.T, name string, fn func() error) []statement {
	t.Helper()
	r.mu.Lock()
	r.stmts = nil
	r.mu.Unlock()
	if err := fn(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stmts)
}
