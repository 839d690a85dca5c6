package demoledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/store"
)

func TestDemoLedgerFactsFollowTheLedger(t *testing.T) {
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := demoledger.New(st)
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
