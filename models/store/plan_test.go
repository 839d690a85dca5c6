package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// TestListPlansUseIndexes checks, on both databases, that every list the API
// and the console make reads proposals through an index in list order: no
// full scan of proposals and, within each status, no sort of all matching
// rows. That is what keeps a page's cost flat as history grows (measured by
// `countersign bench`).
func TestListPlansUseIndexes(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		settled := []models.Status{models.StatusDeclined, models.StatusCancelled, models.StatusExpired,
			models.StatusRevoked, models.StatusSucceeded, models.StatusFailedTerminal, models.StatusUnknown}
		pending := []models.Status{models.StatusAwaitingConfirmation}
		cases := []struct {
			name  string
			f     store.ListFilter
			index string // every read of proposals goes through this index
		}{
			{"tenant, newest first", store.ListFilter{TenantID: "t1"}, "proposals_tenant_created"},
			{"agent, newest first", store.ListFilter{TenantID: "t1", AgentID: "a1"}, "proposals_tenant_agent_created"},
			{"pending (console, API)", store.ListFilter{TenantID: "t1", Statuses: pending}, "proposals_tenant_status_created"},
			{"agent's pending", store.ListFilter{TenantID: "t1", AgentID: "a1", Statuses: pending}, "proposals_tenant_agent_status_created"},
			{"history (console)", store.ListFilter{TenantID: "t1", Statuses: settled}, "proposals_tenant_status_created"},
			{"history, next page", store.ListFilter{TenantID: "t1", Statuses: settled, Cursor: "MTc4ODIyNzIwMDAwMHxwcm9wXzAx"}, "proposals_tenant_status_created"},
			{"agent's settled", store.ListFilter{TenantID: "t1", AgentID: "a1", Statuses: settled[:3]}, "proposals_tenant_agent_status_created"},
			{"pending by time left (console)", store.ListFilter{TenantID: "t1", Statuses: pending, Order: store.ListExpiring}, "proposals_tenant_awaiting_expires"},
			{"pending by time left, next page", store.ListFilter{TenantID: "t1", Statuses: pending, Order: store.ListExpiring, Cursor: "eDE3ODgyMjcyMDAwMDB8cHJvcF8wMQ"}, "proposals_tenant_awaiting_expires"},
			{"history by target (console)", store.ListFilter{TenantID: "t1", Statuses: settled, Resource: "ord_1001"}, "proposals_tenant_resource_status_created"},
			{"history by target and reviewer", store.ListFilter{TenantID: "t1", Statuses: settled, Resource: "ord_1001", ReviewerID: "u1"}, "proposals_tenant_resource_status_created"},
			{"history by agent (console)", store.ListFilter{TenantID: "t1", AgentID: "a1", Statuses: settled}, "proposals_tenant_agent_status_created"},
			{"history by agent, up to a date", store.ListFilter{TenantID: "t1", AgentID: "a1", Statuses: settled,
				CreatedBefore: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)}, "proposals_tenant_agent_status_created"},
			{"history of one status (console)", store.ListFilter{TenantID: "t1", Statuses: settled[4:5]}, "proposals_tenant_status_created"},
			{"history up to a date", store.ListFilter{TenantID: "t1", Statuses: settled,
				CreatedBefore: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)}, "proposals_tenant_status_created"},
		}
		for _, tc := range cases {
			plan, err := st.ExplainList(ctx, tc.f)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			text := strings.Join(plan, "\n")
			reads := 0
			for _, line := range plan {
				l := strings.ToLower(line)
				// SQLite: "SEARCH p USING INDEX x (…)" / "SCAN p";
				// PostgreSQL: "… Scan … on proposals p".
				if strings.HasPrefix(l, "search p ") || strings.HasPrefix(l, "scan p") || strings.Contains(l, " on proposals") {
					reads++
					if !strings.Contains(l, "index "+tc.index+" ") && !strings.Contains(l, "using "+tc.index+" ") {
						t.Errorf("%s: proposals read without %s:\n%s", tc.name, tc.index, text)
					}
				}
			}
			if want := max(len(tc.f.Statuses), 1); reads != want {
				t.Errorf("%s: %d reads of proposals, want %d (one per status):\n%s", tc.name, reads, want, text)
			}
			// Within a status, rows come in index order; only the merge of
			// the per-status branches (a page each at most) may sort.
			for i, line := range plan {
				sortsBranch := strings.Contains(line, "TEMP B-TREE") && (i == 0 || !strings.HasPrefix(plan[i-1], "SCAN b"))
				if sortsBranch || strings.HasPrefix(strings.TrimLeft(line, "-> "), "Sort  (") {
					t.Errorf("%s: rows sorted instead of read in index order:\n%s", tc.name, text)
				}
			}
			t.Logf("%s:\n%s", tc.name, text)
		}
	})
}

// TestListMergesStatuses checks the per-status merge against the obvious
// answer: every page, across statuses and agents, in created_at, id order.
func TestListMergesStatuses(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		statuses := []models.Status{models.StatusAwaitingConfirmation, models.StatusDeclined,
			models.StatusExpired, models.StatusSucceeded, models.StatusCancelled}
		t0 := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		var all []*models.Proposal
		for i := range 40 {
			// Several proposals share a creation time, so the id decides.
			at := t0.Add(time.Duration(i/3) * time.Second)
			p := &models.Proposal{ID: fmt.Sprintf("prop_%02d", (i*7)%40), TenantID: d.Tenant.ID, AgentID: d.Agent.ID,
				Tool: "refund_order", Arguments: []byte(`{}`), ArgsDigest: "sha256:00", Resource: "ord_1001",
				Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Hour},
				PolicyVersion: "1", RequestKey: fmt.Sprintf("k%d", i), Status: statuses[i%len(statuses)],
				Revision: 1, CreatedAt: at, ExpiresAt: at.Add(time.Hour), UpdatedAt: at}
			if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
				t.Fatalf("create %s: %v", p.ID, err)
			}
			all = append(all, p)
		}
		want := func(sts []models.Status) []string {
			var ids []string
			ps := slices.Clone(all)
			slices.SortFunc(ps, func(a, b *models.Proposal) int {
				if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
					return c
				}
				return strings.Compare(b.ID, a.ID)
			})
			for _, p := range ps {
				if len(sts) == 0 || slices.Contains(sts, p.Status) {
					ids = append(ids, p.ID)
				}
			}
			return ids
		}
		for _, sts := range [][]models.Status{nil, statuses[:1], statuses[1:4], statuses, {models.StatusRevoked}} {
			var got []string
			cursor := ""
			for range 50 {
				items, next, err := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID, Statuses: sts, Limit: 4, Cursor: cursor})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range items {
					got = append(got, p.ID)
				}
				if cursor = next; cursor == "" {
					break
				}
			}
			if w := want(sts); !slices.Equal(got, w) {
				t.Errorf("statuses %v:\n got %v\nwant %v", sts, got, w)
			}
		}
	})
}

// TestReadsDoNotStallWrites: a read in progress (a long list) must not hold
// up a write. On SQLite the reads have their own query-only pool; with the
// single shared connection this write would wait for the read to end.
func TestReadsDoNotStallWrites(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		d := seed(t, st)
		release, err := st.HoldRead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		at := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		p := &models.Proposal{ID: "prop_w", TenantID: d.Tenant.ID, AgentID: d.Agent.ID,
			Tool: "refund_order", Arguments: []byte(`{}`), ArgsDigest: "sha256:00", Resource: "ord_1001",
			Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Hour},
			PolicyVersion: "1", RequestKey: "k-w", Status: models.StatusAwaitingConfirmation,
			Revision: 1, CreatedAt: at, ExpiresAt: at.Add(time.Hour), UpdatedAt: at}
		if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
			t.Fatalf("a write during a read: %v", err)
		}
		// New reads see the committed write.
		if got, err := st.GetProposal(ctx, d.Tenant.ID, "prop_w"); err != nil || got.RequestKey != "k-w" {
			t.Fatalf("read after the write: %+v %v", got, err)
		}
		if st.Dialect() == store.SQLite {
			if err := st.ReaderExec(ctx, "DELETE FROM proposals"); err == nil {
				t.Error("the reader pool accepted a write")
			}
		}
	})
}

// TestAuditPlansUseIndexes checks, on both databases, that the audit views
// (the tenant's chain a page at a time, one proposal's trail, the newest
// signed checkpoint shown with each) read through an index in chain order:
// no full scan, no sort, no row read only to be filtered out. The plans are
// those of the statements the store really runs, as the driver receives them.
func TestAuditPlansUseIndexes(t *testing.T) {
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := openRecording(t, url, time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC))
		d := seed(t, st.Store)
		pk := func(table string) string {
			if st.Dialect() == store.Postgres {
				return table + "_pkey"
			}
			return "sqlite_autoindex_" + table + "_1"
		}
		cases := []struct {
			name   string
			call   func() error
			table  string
			index  string
			sqlite string // the SQLite search must use these columns of the index
		}{
			{"chain, a page after a position", func() error {
				_, err := st.AuditEntries(ctx, d.Tenant.ID, 1000, 50)
				return err
			}, "audit_entries", pk("audit_entries"), "(tenant_id=? AND seq>?)"},
			{"one proposal's trail", func() error {
				_, err := st.ProposalAudit(ctx, d.Tenant.ID, "prop_01")
				return err
			}, "audit_entries", "audit_entries_proposal", "(tenant_id=? AND proposal_id=?)"},
			{"newest checkpoint", func() error {
				_, _, err := st.LatestCheckpoint(ctx, d.Tenant.ID)
				return err
			}, "audit_checkpoints", pk("audit_checkpoints"), "(tenant_id=?)"},
		}
		// The checkpointer's look for grown chains, every minute: a
		// search per tenant, never a pass over the entries.
		ran := st.ran(t, "uncheckpointed heads", func() error {
			_, err := st.UncheckpointedHeads(ctx)
			return err
		})
		for _, q := range ran {
			plan, err := st.Explain(ctx, q.sql, q.args...)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			for _, line := range plan {
				l := strings.TrimLeft(line, "-> ")
				if strings.HasPrefix(l, "SCAN ") && !strings.HasPrefix(l, "SCAN t") || strings.HasPrefix(l, "Seq Scan on audit") ||
					strings.HasPrefix(l, "Filter:") && strings.Contains(l, "SubPlan") || strings.Contains(l, "TEMP B-TREE") {
					t.Errorf("uncheckpointed heads: the entries are walked instead of searched:\n%s", text)
				}
			}
			t.Logf("uncheckpointed heads: %s %v\n%s", q.sql, q.args, text)
		}
		for _, tc := range cases {
			ran := st.ran(t, tc.name, tc.call)
			if len(ran) != 1 {
				t.Fatalf("%s: %d statements, want one: %q", tc.name, len(ran), ran)
			}
			plan, err := st.Explain(ctx, ran[0].sql, ran[0].args...)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			text := strings.Join(plan, "\n")
			reads := 0
			for _, line := range plan {
				l := strings.TrimLeft(line, "-> ")
				switch {
				case strings.HasPrefix(l, "SEARCH "+tc.table+" ") || strings.HasPrefix(l, "SCAN "+tc.table):
					reads++
					if !strings.Contains(l, "INDEX "+tc.index+" "+tc.sqlite) {
						t.Errorf("%s: %s read without searching %s %s:\n%s", tc.name, tc.table, tc.index, tc.sqlite, text)
					}
				case strings.Contains(l, " on "+tc.table+" "):
					reads++
					if !strings.Contains(l, "using "+tc.index+" ") {
						t.Errorf("%s: %s read without %s:\n%s", tc.name, tc.table, tc.index, text)
					}
				case strings.HasPrefix(l, "Filter:"), strings.Contains(l, "TEMP B-TREE"), strings.HasPrefix(l, "Sort  ("):
					t.Errorf("%s: rows filtered or sorted instead of found in index order:\n%s", tc.name, text)
				}
			}
			if reads != 1 {
				t.Errorf("%s: %d reads of %s, want 1:\n%s", tc.name, reads, tc.table, text)
			}
			t.Logf("%s: %s %v\n%s", tc.name, ran[0].sql, ran[0].args, text)
		}
	})
}
