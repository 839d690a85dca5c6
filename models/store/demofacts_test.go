package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

func TestDemoLedgerFactsFollowTheLedger(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := st.DemoLedger()
		args := json.RawMessage(`{"amount_minor":5000,"currency":"CNY","order_id":"ord_1003","reason":"x"}`)
		facts := func() []models.Fact {
			t.Helper()
			f, err := l.Facts(ctx, models.FactsRequest{Tool: "refund_order", Arguments: args, Tenant: d.Tenant.ID})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		want := []models.Fact{{Label: "Paid", Value: "¥199.00 CNY"}, {Label: "Already refunded", Value: "¥0.00 CNY"},
			{Label: "Refundable", Value: "¥199.00 CNY"}}
		if got := facts(); !equalFacts(got, want) {
			t.Errorf("before the refund: %v, want %v", got, want)
		}
		if _, err := l.Execute(ctx, models.ExecuteRequest{Tool: "refund_order", Arguments: args, Tenant: d.Tenant.ID,
			IdempotencyKey: "k-facts", ExpectedStateVersion: "1"}); err != nil {
			t.Fatal(err)
		}
		want = []models.Fact{{Label: "Paid", Value: "¥199.00 CNY"}, {Label: "Already refunded", Value: "¥50.00 CNY"},
			{Label: "Refundable", Value: "¥149.00 CNY"}}
		if got := facts(); !equalFacts(got, want) {
			t.Errorf("after refunding ¥50.00: %v, want %v", got, want)
		}

		// Another tenant's order is not there for this tenant.
		f, err := l.Facts(ctx, models.FactsRequest{Tool: "refund_order", Arguments: args, Tenant: "ten_other"})
		if err != nil || len(f) != 1 || f[0].Value != "ord_1003 does not exist" {
			t.Errorf("another tenant's facts: %v (%v)", f, err)
		}
		logs := json.RawMessage(`{"log_ids":["log_0001","log_9999"],"reason":"x"}`)
		f, err = l.Facts(ctx, models.FactsRequest{Tool: "delete_logs", Arguments: logs, Tenant: d.Tenant.ID})
		if err != nil || len(f) != 2 || f[0].Value != "1 of 2" {
			t.Errorf("log facts: %v (%v)", f, err)
		}
	})
}

func equalFacts(a, b []models.Fact) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
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
