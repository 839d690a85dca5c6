package demoledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func eachDB(t *testing.T, fn func(t *testing.T, st *store.Store)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
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

// seed creates the demo tenant and the ledger's business data in it.
func seed(t *testing.T, st *store.Store) store.DemoResult {
	d, err := st.SeedDemo(context.Background(), store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: "h1",
		AdminName: "admin", AdminPasswordHash: "h2", AgentName: "bot", AgentKeyHash: "sha256:k1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := demoledger.New(st).Seed(context.Background(), d.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSeedLeavesBusinessDataAsItIs(t *testing.T) {
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := demoledger.New(st)
		if err := l.BumpOrder(ctx, d.Tenant.ID, "ord_1001"); err != nil {
			t.Fatal(err)
		}
		if err := l.Seed(ctx, d.Tenant.ID); err != nil {
			t.Fatal(err)
		}
		o, err := l.Order(ctx, d.Tenant.ID, "ord_1001")
		if err != nil || o.Version != 2 {
			t.Errorf("reseeding reset business data: version %d (%v)", o.Version, err)
		}
		if _, err := l.Order(ctx, d.Tenant.ID, "ord_9999"); !models.IsCode(err, models.ENotFound) {
			t.Errorf("unknown order: %v", err)
		}
	})
}

func TestDemoLedgerIsIdempotentPerKey(t *testing.T) {
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := demoledger.New(st)
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
		o, _ := l.Order(ctx, d.Tenant.ID, "ord_1002")
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

// An email is queued only while its customer is at the version validated:
// a moved version is a state conflict that queues nothing; on PostgreSQL a
// change of the customer waits for the transaction queueing an email
// (shared lock), while other emails to the same customer do not.
func TestEmailHoldsItsCustomersVersion(t *testing.T) {
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := demoledger.New(st)
		email := func(key, version string) models.ExecuteRequest {
			return models.ExecuteRequest{Tool: "send_customer_email", Tenant: d.Tenant.ID, IdempotencyKey: key, ExpectedStateVersion: version,
				Arguments: json.RawMessage(`{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Hello","send_at":null}`)}
		}
		var version int64
		if err := st.Gorm().Raw("SELECT version FROM demo_customers WHERE tenant_id = ? AND id = 'cus_001'", d.Tenant.ID).Scan(&version).Error; err != nil {
			t.Fatal(err)
		}
		current := strconv.FormatInt(version, 10)
		if _, err := l.Execute(ctx, email("e-stale", strconv.FormatInt(version-1, 10))); !errors.Is(err, models.ErrStateConflict) {
			t.Fatalf("stale version: %v, want a state conflict", err)
		}
		if n, err := l.ExecutionsFor(ctx, d.Tenant.ID, "e-stale"); err != nil || n != 0 {
			t.Fatalf("a conflicting email was recorded: %d %v", n, err)
		}
		if res, err := l.Execute(ctx, email("e-1", current)); err != nil || res.Status != models.StatusSucceeded {
			t.Fatalf("email: %+v %v", res, err)
		}
		if st.Dialect() != store.Postgres {
			return
		}
		// Two transactions queue emails to the customer at once; a change
		// of the customer has to wait for both.
		txA := st.Gorm().Begin()
		defer txA.Rollback()
		txB := st.Gorm().Begin()
		defer txB.Rollback()
		if _, err := l.ExecuteIn(txA, email("e-a", current)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.ExecuteIn(txB, email("e-b", current)); err != nil {
			t.Fatalf("a second email to the customer waited for the first: %v", err)
		}
		change := st.Gorm().Begin()
		defer change.Rollback()
		if err := change.Exec("SET LOCAL lock_timeout = '200ms'").Error; err != nil {
			t.Fatal(err)
		}
		if err := change.Exec("UPDATE demo_customers SET version = version + 1 WHERE tenant_id = ? AND id = 'cus_001'", d.Tenant.ID).Error; err == nil {
			t.Fatal("the customer changed while emails to it were being queued")
		}
	})
}
