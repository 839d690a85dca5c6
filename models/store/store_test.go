package store_test

import (
	"context"
	"path/filepath"
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

func TestProposalsCarryTheAgentsOwner(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		bob, err := st.CreateUser(ctx, d.Tenant.ID, "bob", models.RoleReviewer, "x")
		if err != nil {
			t.Fatal(err)
		}
		owned, err := st.CreateAgent(ctx, d.Tenant.ID, "bobs-bot", bob.ID, "sha256:owned")
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		p := &models.Proposal{ID: "prop_owned", TenantID: d.Tenant.ID, AgentID: owned.ID,
			Tool: "refund_order", Arguments: []byte(`{}`), ArgsDigest: "sha256:00", Resource: "ord_1001",
			Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Hour},
			PolicyVersion: "1", RequestKey: "k-owned", Status: models.StatusAwaitingConfirmation,
			Revision: 1, CreatedAt: at, ExpiresAt: at.Add(time.Hour), UpdatedAt: at}
		if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
			t.Fatal(err)
		}
		got, err := st.GetProposal(ctx, d.Tenant.ID, p.ID)
		if err != nil || got.AgentOwnerID != bob.ID || got.AgentOwnerName != "bob" {
			t.Fatalf("get: owner %q %q (%v)", got.AgentOwnerID, got.AgentOwnerName, err)
		}
		if !got.OwnedBy(bob.ID) || got.OwnedBy(d.Reviewer.ID) {
			t.Error("OwnedBy does not name the owner alone")
		}
		list, _, err := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID,
			Statuses: []models.Status{models.StatusAwaitingConfirmation, models.StatusDeclined}})
		if err != nil || len(list) != 1 || list[0].AgentOwnerName != "bob" {
			t.Fatalf("list: %v (%v)", list, err)
		}
	})
}

// The writer keeps temporary storage (statement journals above all) in
// memory: a create journals more than SQLite's 64 KiB spill threshold, and
// a file per transaction cost a fifth of a create's CPU.
func TestSQLiteWriterKeepsTemporaryStorageInMemory(t *testing.T) {
	st, err := store.Open("sqlite://"+filepath.Join(t.TempDir(), "c.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mode int
	if err := st.Gorm().Raw("PRAGMA temp_store").Scan(&mode).Error; err != nil {
		t.Fatal(err)
	}
	if mode != 2 {
		t.Fatalf("the writer's temp_store is %d, want 2 (memory)", mode)
	}
}
