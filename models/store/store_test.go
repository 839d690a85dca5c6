package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// Every test opens its own database, so they run in parallel, more at once
// than there are cores: most of their time is spent waiting on it.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(8)
	pgtest.Main(m)
}

func eachDB(t *testing.T, fn func(t *testing.T, st *store.Store)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
			if kind == "postgres" {
				url = pgtest.DSN(t)
			}
			st, err := store.Open(url, store.Options{Clock: models.NewFixedClock(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			if _, err := st.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			fn(t, st)
		})
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		applied, err := st.Migrate(context.Background())
		if err != nil || len(applied) != 0 {
			t.Fatalf("second migrate applied %v (%v)", applied, err)
		}
	})
}

func TestOpenRejectsUnknownURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "mysql://x", "sqlite://", "/tmp/x.db"} {
		if _, err := store.Open(u, store.Options{}); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("Open(%q) = %v, want invalid_request", u, err)
		}
	}
}

func seed(t *testing.T, st *store.Store) store.DemoResult {
	d, err := st.SeedDemo(context.Background(), store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: "h1",
		AdminName: "admin", AdminPasswordHash: "h2", AgentName: "bot", AgentKeyHash: "sha256:k1"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSeedDemoRefreshesCredentialsOnly(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		first := seed(t, st)
		l := st.DemoLedger()
		if err := l.BumpOrder(ctx, first.Tenant.ID, "ord_1001"); err != nil {
			t.Fatal(err)
		}
		second, err := st.SeedDemo(ctx, store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: "h3",
			AdminName: "admin", AdminPasswordHash: "h4", AgentName: "bot", AgentKeyHash: "sha256:k2"})
		if err != nil {
			t.Fatal(err)
		}
		if second.Tenant.ID != first.Tenant.ID || second.Reviewer.ID != first.Reviewer.ID || second.Agent.ID != first.Agent.ID {
			t.Fatal("reseeding created new principals")
		}
		if _, err := st.AgentByKeyHash(ctx, "sha256:k1"); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("old demo key still works: %v", err)
		}
		if _, err := st.AgentByKeyHash(ctx, "sha256:k2"); err != nil {
			t.Errorf("new demo key: %v", err)
		}
		o, _ := l.DemoOrder(ctx, first.Tenant.ID, "ord_1001")
		if o.Version != 2 {
			t.Errorf("reseeding reset business data: version %d", o.Version)
		}
	})
}

func TestDemoLedgerIsIdempotentPerKey(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := st.DemoLedger()
		args := json.RawMessage(`{"amount_minor":5000,"currency":"CNY","order_id":"ord_1002","reason":"x"}`)
		req := models.ExecuteRequest{Tool: "refund_order", Arguments: args, Tenant: d.Tenant.ID, IdempotencyKey: "k-1", ExpectedStateVersion: "1"}
		var wg sync.WaitGroup
		refs := make([]string, 20)
		for i := range refs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := l.Execute(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				refs[i] = res.ProviderRef
			}()
		}
		wg.Wait()
		for _, r := range refs {
			if r != refs[0] {
				t.Fatalf("same key answered different outcomes: %v", refs)
			}
		}
		o, _ := l.DemoOrder(ctx, d.Tenant.ID, "ord_1002")
		if o.RefundedMinor != 5000 || o.Version != 2 {
			t.Fatalf("order after 20 executes with one key: refunded %d version %d", o.RefundedMinor, o.Version)
		}
		// Another key with the stale version: a conflict, and nothing recorded for it.
		req.IdempotencyKey = "k-2"
		if _, err := l.Execute(ctx, req); !errors.Is(err, models.ErrStateConflict) {
			t.Fatalf("stale version: %v", err)
		}
		if _, err := l.Status(ctx, d.Tenant.ID, "k-2"); !errors.Is(err, models.ErrNeverArrived) {
			t.Fatalf("a conflicting execute left a record: %v", err)
		}
		// The current version but more than is refundable: a terminal refusal, recorded.
		req.ExpectedStateVersion = "2"
		req.Arguments = json.RawMessage(`{"amount_minor":15000,"currency":"CNY","order_id":"ord_1002","reason":"x"}`)
		res, err := l.Execute(ctx, req)
		if err != nil || res.Status != models.StatusFailedTerminal {
			t.Fatalf("over the balance: %+v %v", res, err)
		}
		st2, err := l.Status(ctx, d.Tenant.ID, "k-2")
		if err != nil || st2.Status != models.StatusFailedTerminal {
			t.Fatalf("status of k-2: %+v %v", st2, err)
		}
	})
}

func TestCursorPagination(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		if _, _, err := st.ListProposals(ctx, store.ListFilter{TenantID: "x", Cursor: "%%%"}); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("bad cursor: %v", err)
		}
	})
}
