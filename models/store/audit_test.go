package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// checkChain asserts that entries are the whole chain 1..n, linked and
// hashed correctly.
func checkChain(t *testing.T, tenantID string, entries []models.AuditEntry, n int) {
	t.Helper()
	if len(entries) != n {
		t.Fatalf("chain has %d entries, want %d", len(entries), n)
	}
	prev := ""
	for i, e := range entries {
		b, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case e.Seq != int64(i+1) || b.Seq != e.Seq:
			t.Fatalf("entry %d has seq %d (body %d): gap or fork", i+1, e.Seq, b.Seq)
		case b.Prev != prev || e.Prev != prev:
			t.Fatalf("entry %d links to %s, want %s", e.Seq, b.Prev, prev)
		case models.AuditHash([]byte(e.Body)) != e.Hash:
			t.Fatalf("entry %d: stored hash does not match its body", e.Seq)
		case b.Tenant != tenantID:
			t.Fatalf("entry %d belongs to tenant %s", e.Seq, b.Tenant)
		}
		// The body, assembled by the database on PostgreSQL, is exactly
		// the canonical JSON of the entry.
		if canon, err := models.Canonical([]byte(e.Body)); err != nil || string(canon) != e.Body {
			t.Fatalf("entry %d body is not canonical JSON: %s", e.Seq, e.Body)
		}
		prev = e.Hash
	}
}

// sharedStores opens n stores over one fresh database of kind (as n
// servers would have), migrated, closed at the test's end.
func sharedStores(t *testing.T, kind string, n int, opts store.Options) []*store.Store {
	t.Helper()
	url := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
	if kind == "postgres" {
		url = pgtest.DSN(t)
	}
	stores := make([]*store.Store, n)
	for i := range stores {
		st, err := store.Open(url, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if _, err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		stores[i] = st
	}
	return stores
}

// TestAuditChainUnderConcurrency: 100 goroutines append to one tenant's
// chain through 3 store instances (3 connection pools, as 3 servers would
// have) over the same database: every append lands, with no fork and no gap,
// and the appenders take turns instead of racing for the head and trying
// again after each loss: on SQLite every append inserts at its first try,
// on PostgreSQL at its second at the latest (the first, when it had to wait
// its turn, read the head from before it waited). Racing, the losers'
// statements outnumbered the appends by ten to one.
func TestAuditChainUnderConcurrency(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var inserts atomic.Int64
			stores := sharedStores(t, kind, 3, store.Options{OnStatement: func(q string) {
				if strings.Contains(q, "INSERT INTO audit_entries") {
					inserts.Add(1)
				}
			}})
			d := seed(t, stores[0])
			tenant := d.Tenant.ID
			base, err := stores[0].Head(ctx, tenant)
			if err != nil {
				t.Fatal(err)
			}
			inserts.Store(0)
			const workers, each = 100, 3
			var wg sync.WaitGroup
			errs := make(chan error, workers*each)
			start := make(chan struct{})
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					<-start
					st := stores[w%len(stores)]
					for i := 0; i < each; i++ {
						errs <- st.Audit(ctx, tenant, time.Now(), models.AuditEvent{Kind: models.AuditSignIn,
							Actor: fmt.Sprintf("usr_%d", w), Data: map[string]any{"i": i}})
					}
				}(w)
			}
			close(start)
			wg.Wait()
			most := int64(workers * each)
			if kind == "postgres" {
				most *= 2
			}
			if n := inserts.Load(); n < workers*each || n > most {
				t.Errorf("%d appends ran %d INSERTs, want %d to %d: appenders raced for the head", workers*each, n, workers*each, most)
			}
			t.Logf("%d appends ran %d INSERTs", workers*each, inserts.Load())
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			entries, err := stores[1].AuditEntries(ctx, tenant, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			checkChain(t, tenant, entries, int(base.Seq)+workers*each)
			seen := map[string]int{}
			for _, e := range entries[base.Seq:] {
				b, _ := e.Decode()
				seen[b.Actor]++
			}
			for w := 0; w < workers; w++ {
				if got := seen[fmt.Sprintf("usr_%d", w)]; got != each {
					t.Fatalf("worker %d has %d entries, want %d", w, got, each)
				}
			}
		})
	}
}

// TestAuditEntriesAreAppendOnly: the database refuses to change or remove
// an entry or a checkpoint, whatever the client.
func TestAuditEntriesAreAppendOnly(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		if err := st.Audit(ctx, d.Tenant.ID, time.Now(), models.AuditEvent{Kind: models.AuditSignIn, Actor: d.Reviewer.ID}); err != nil {
			t.Fatal(err)
		}
		if err := st.AddCheckpoint(ctx, models.Checkpoint{TenantID: d.Tenant.ID, Seq: 1, Hash: "h", KeyID: "k", JWS: "j"}); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"UPDATE audit_entries SET body = 'x'",
			"DELETE FROM audit_entries",
			"UPDATE audit_checkpoints SET hash = 'x'",
			"DELETE FROM audit_checkpoints",
		} {
			if err := st.ExecRawForTest(ctx, q); err == nil {
				t.Errorf("%s was allowed", q)
			}
		}
		entries, err := st.AuditEntries(ctx, d.Tenant.ID, 0, 100)
		if err != nil || len(entries) == 0 {
			t.Fatalf("entries gone: %v %v", entries, err)
		}
	})
}

// TestStateChangesAreAudited: the proposal lifecycle leaves its entries in
// the same transactions, linked to the proposal.
func TestStateChangesAreAudited(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		now := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		p := newProposal(d, now)
		if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if _, err := st.ExpireDue(ctx, "", "", now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		entries, err := st.ProposalAudit(ctx, d.Tenant.ID, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, e := range entries {
			kinds = append(kinds, e.Kind)
		}
		want := []string{models.AuditProposalCreated, models.AuditProposalExpired}
		if fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Fatalf("kinds %v, want %v", kinds, want)
		}
		var data map[string]any
		b, _ := entries[0].Decode()
		if err := json.Unmarshal(b.Data, &data); err != nil || data["args_digest"] != p.ArgsDigest {
			t.Fatalf("created entry data %s", b.Data)
		}
	})
}

func newProposal(d store.DemoResult, now time.Time) *models.Proposal {
	args := json.RawMessage(`{"order_id":"ord_1001"}`)
	digest, _ := models.Digest(args)
	return &models.Proposal{ID: models.NewID("prop"), TenantID: d.Tenant.ID, AgentID: d.Agent.ID, Tool: "refund_order",
		Arguments: args, ArgsDigest: digest, Preview: []models.PreviewField{}, Resource: "ord_1001",
		Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Minute},
		PolicyVersion: "p1", RequestKey: "rk-" + models.NewID("r"), Status: models.StatusAwaitingConfirmation, Revision: 1,
		CreatedAt: now, ExpiresAt: now.Add(time.Minute), UpdatedAt: now}
}

// TestAdminActionsAndSignInsAreAudited: users, agents, sign-ins and
// administrators' changes land in the right tenant's chain; a password
// hash never does.
func TestAdminActionsAndSignInsAreAudited(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		a, err := st.AdminCreateAgent(ctx, f.admin, "helper", "", "sha256:helper")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdminRevokeAgent(ctx, f.admin, a.ID, consoleNow); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdminRevokeAgent(ctx, f.admin, a.ID, consoleNow); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdminSetPassword(ctx, f.admin, f.reviewer.ID, "h-secret-new", consoleNow); err != nil {
			t.Fatal(err)
		}
		entries, err := st.AuditEntries(ctx, f.tenant.ID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		checkChain(t, f.tenant.ID, entries, len(entries))
		var kinds []string
		for _, e := range entries {
			kinds = append(kinds, e.Kind)
			if strings.Contains(e.Body, "h-secret-new") || strings.Contains(e.Body, "h-alice") {
				t.Fatalf("a password hash entered the log: %s", e.Body)
			}
		}
		want := []string{models.AuditUserCreated, models.AuditUserCreated, models.AuditSignIn, models.AuditSignIn,
			models.AuditAgentCreated, models.AuditAgentRevoked, models.AuditUserChanged}
		if fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Fatalf("kinds %v, want %v (a second revoke records nothing)", kinds, want)
		}
		other, err := st.AuditEntries(ctx, f.other.ID, 0, 100)
		if err != nil || len(other) != 2 {
			t.Fatalf("the other tenant's chain has %d entries (%v), want its user and agent", len(other), err)
		}
	})
}

// TestOneSweepAppendsToEachTenantsChain: an expiry sweep over two tenants
// appends each tenant's entries to its own chain, whole, one per proposal
// (12 of them: more than one statement appends at once); two sweeps at once
// through two stores, as two servers run them, expire each proposal once.
func TestOneSweepAppendsToEachTenantsChain(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			stores := sharedStores(t, kind, 2, store.Options{})
			st := stores[0]
			d := seed(t, st)
			other, err := st.CreateTenant(ctx, "other")
			if err != nil {
				t.Fatal(err)
			}
			agent, err := st.CreateAgent(ctx, other.ID, "bot", "", "sha256:k-other")
			if err != nil {
				t.Fatal(err)
			}
			d2 := d
			d2.Tenant, d2.Agent = other, agent
			now := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
			want := map[string][]string{}
			for i := range 23 {
				dd := d
				if i%2 == 1 {
					dd = d2
				}
				p := newProposal(dd, now.Add(time.Duration(i)*time.Millisecond))
				if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
					t.Fatal(ok, err)
				}
				want[dd.Tenant.ID] = append(want[dd.Tenant.ID], p.ID)
			}
			heads := map[string]int64{}
			for tenant := range want {
				h, err := st.Head(ctx, tenant)
				if err != nil {
					t.Fatal(err)
				}
				heads[tenant] = h.Seq
			}
			var wg sync.WaitGroup
			expired := make([]int, len(stores))
			errs := make([]error, len(stores))
			for i, s := range stores {
				wg.Go(func() { expired[i], errs[i] = s.ExpireDue(ctx, "", "", now.Add(time.Hour)) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if expired[0]+expired[1] != 23 {
				t.Fatalf("the sweeps expired %v proposals, want 23 in all", expired)
			}
			for tenant, ids := range want {
				entries, err := st.AuditEntries(ctx, tenant, 0, 1000)
				if err != nil {
					t.Fatal(err)
				}
				checkChain(t, tenant, entries, int(heads[tenant])+len(ids))
				var got []string
				for _, e := range entries[heads[tenant]:] {
					if e.Kind != models.AuditProposalExpired {
						t.Fatalf("entry %d is %s", e.Seq, e.Kind)
					}
					got = append(got, e.ProposalID)
				}
				slices.Sort(got)
				sorted := slices.Sorted(slices.Values(ids))
				if !slices.Equal(got, sorted) {
					t.Fatalf("tenant %s: expiries of %v, want %v", tenant, got, sorted)
				}
			}
		})
	}
}

// TestAppendAfterWaitingForTheChain: on PostgreSQL, a transaction appending
// two entries waits for another that appended one; when that one commits,
// both entries land after it, linked. (The first try, which read the head
// from before it waited, must insert neither: inserting the second entry
// alone would have linked it to a first that was never stored.)
func TestAppendAfterWaitingForTheChain(t *testing.T) {
	t.Parallel()
	st := sharedStores(t, "postgres", 1, store.Options{})[0]
	ctx := context.Background()
	tenant := seed(t, st).Tenant.ID
	base, err := st.Head(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := func(actor string) models.AuditEvent {
		return models.AuditEvent{Kind: models.AuditSignIn, Actor: actor}
	}
	appended, hold := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- st.AuditTxForTest(ctx, tenant, []time.Time{now}, []models.AuditEvent{ev("usr_first")}, appended, hold)
	}()
	<-appended
	second := make(chan error, 1)
	go func() {
		second <- st.AuditTxForTest(ctx, tenant, []time.Time{now, now.Add(time.Millisecond)},
			[]models.AuditEvent{ev("usr_second_a"), ev("usr_second_b")}, nil, nil)
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := st.ChainWaitersForTest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second append never waited for the first")
		}
	}
	close(hold)
	if err := errors.Join(<-first, <-second); err != nil {
		t.Fatal(err)
	}
	entries, err := st.AuditEntries(ctx, tenant, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	checkChain(t, tenant, entries, int(base.Seq)+3)
	var actors []string
	for _, e := range entries[base.Seq:] {
		b, _ := e.Decode()
		actors = append(actors, b.Actor)
	}
	if want := []string{"usr_first", "usr_second_a", "usr_second_b"}; !slices.Equal(actors, want) {
		t.Fatalf("entries by %v, want %v", actors, want)
	}
}
