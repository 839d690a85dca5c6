package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// TestListByTimeLeftAndFilters pages through pending proposals in expiry
// order and checks the history filters against the obvious answer.
func TestListByTimeLeftAndFilters(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		t0 := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		for i := range 12 {
			at := t0.Add(time.Duration(i) * time.Minute)
			// Later proposals expire sooner; pairs share an expiry so the id decides.
			exp := t0.Add(time.Hour - time.Duration(i/2)*time.Minute)
			p := &models.Proposal{ID: fmt.Sprintf("prop_%02d", i), TenantID: d.Tenant.ID, AgentID: d.Agent.ID,
				Tool: "refund_order", Arguments: []byte(`{}`), ArgsDigest: "sha256:00", Resource: fmt.Sprintf("ord_10%02d", i%3),
				Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: time.Hour},
				PolicyVersion: "1", RequestKey: fmt.Sprintf("k%d", i), Status: models.StatusAwaitingConfirmation,
				Revision: 1, CreatedAt: at, ExpiresAt: exp, UpdatedAt: at}
			if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
				t.Fatalf("create: %v", err)
			}
		}
		var got []string
		cursor := ""
		for {
			page, next, err := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID, Order: store.ListExpiring,
				Statuses: []models.Status{models.StatusAwaitingConfirmation}, Cursor: cursor, Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				got = append(got, p.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		want := []string{"prop_10", "prop_11", "prop_08", "prop_09", "prop_06", "prop_07", "prop_04", "prop_05", "prop_02", "prop_03", "prop_00", "prop_01"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("by time left: %v, want %v", got, want)
		}
		// A newest-first cursor is refused in the other order.
		_, next, _ := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID, Limit: 2})
		if _, _, err := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID, Order: store.ListExpiring, Cursor: next}); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("a cursor of the other order: %v", err)
		}

		// Several statuses (one branch each, merged): newest first across
		// pages, and a cursor of the other order refused.
		var merged []string
		cursor = ""
		several := []models.Status{models.StatusDeclined, models.StatusAwaitingConfirmation, models.StatusExpired}
		for {
			page, next, err := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID, Statuses: several, Cursor: cursor, Limit: 5})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				merged = append(merged, p.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		want = []string{"prop_11", "prop_10", "prop_09", "prop_08", "prop_07", "prop_06", "prop_05", "prop_04", "prop_03", "prop_02", "prop_01", "prop_00"}
		if fmt.Sprint(merged) != fmt.Sprint(want) {
			t.Errorf("several statuses, newest first: %v, want %v", merged, want)
		}
		_, expiring, _ := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID, Order: store.ListExpiring, Limit: 2})
		if _, _, err := st.ListProposals(ctx, store.ListFilter{TenantID: d.Tenant.ID, Statuses: several, Cursor: expiring}); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("several statuses, a cursor of the other order: %v", err)
		}

		// Filters: target, reviewer (with decisions loaded), created before.
		alice := d.Reviewer
		if _, err := st.RecordDecision(ctx, models.Decision{ID: "dec_1", ProposalID: "prop_04", UserID: alice.ID,
			Kind: models.DecisionDecline, Reason: "no", DigestSeen: "sha256:00", AMR: []string{"pwd"}}, d.Tenant.ID, t0, nil); err != nil {
			t.Fatal(err)
		}
		list := func(f store.ListFilter) string {
			f.TenantID = d.Tenant.ID
			ps, _, err := st.ListProposals(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, p := range ps {
				ids = append(ids, fmt.Sprintf("%s/%d", p.ID, len(p.Decisions)))
			}
			return fmt.Sprint(ids)
		}
		if got, want := list(store.ListFilter{Resource: "ord_1001"}), "[prop_10/0 prop_07/0 prop_04/0 prop_01/0]"; got != want {
			t.Errorf("by target: %s, want %s", got, want)
		}
		if got, want := list(store.ListFilter{ReviewerID: alice.ID, WithDecisions: true}), "[prop_04/1]"; got != want {
			t.Errorf("by reviewer: %s, want %s", got, want)
		}
		if got, want := list(store.ListFilter{CreatedBefore: t0.Add(2 * time.Minute)}), "[prop_01/0 prop_00/0]"; got != want {
			t.Errorf("created before: %s, want %s", got, want)
		}
	})
}
