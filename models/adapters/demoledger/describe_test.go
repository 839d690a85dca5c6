package demoledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/store"
)

func TestDemoLedgerDescribesRefundsBeforeAndAfter(t *testing.T) {
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := demoledger.New(st)
		args := json.RawMessage(`{"amount_minor":5000,"currency":"CNY","order_id":"ord_1003","reason":"x"}`)
		describe := func() (models.Description, string) {
			t.Helper()
			desc, err := l.Describe(ctx, models.DescribeRequest{Tool: "refund_order", Arguments: args, Tenant: d.Tenant.ID})
			if err != nil {
				t.Fatal(err)
			}
			if err := desc.Check(); err != nil {
				t.Fatal(err)
			}
			digest, err := models.DescriptionDigest(desc)
			if err != nil {
				t.Fatal(err)
			}
			return desc, digest
		}
		type row struct{ field, before, after, beforeText, afterText string }
		changes := func(desc models.Description) []row {
			var out []row
			for _, c := range desc.Changes {
				out = append(out, row{c.Field, string(c.Before), string(c.After), c.BeforeDisplay, c.AfterDisplay})
			}
			return out
		}
		first, firstDigest := describe()
		want := []row{{"refunded_minor", "0", "5000", "¥0.00 CNY", "¥50.00 CNY"},
			{"refundable_minor", "19900", "14900", "¥199.00 CNY", "¥149.00 CNY"}}
		if got := changes(first); !slices.Equal(got, want) {
			t.Errorf("before any refund: %v, want %v", got, want)
		}
		if again, d := describe(); d != firstDigest || !slices.Equal(changes(again), want) {
			t.Errorf("describing twice gives %s then %s", firstDigest, d)
		}
		if _, err := l.Execute(ctx, models.ExecuteRequest{Tool: "refund_order", Arguments: args, Tenant: d.Tenant.ID,
			IdempotencyKey: "k-facts", ExpectedStateVersion: "1"}); err != nil {
			t.Fatal(err)
		}
		second, secondDigest := describe()
		want = []row{{"refunded_minor", "5000", "10000", "¥50.00 CNY", "¥100.00 CNY"},
			{"refundable_minor", "14900", "9900", "¥149.00 CNY", "¥99.00 CNY"}}
		if got := changes(second); !slices.Equal(got, want) {
			t.Errorf("after refunding ¥50.00: %v, want %v", got, want)
		}
		if secondDigest == firstDigest {
			t.Error("the digest did not change with the described state")
		}

		// Another tenant's order is not there for this tenant.
		f, err := l.Describe(ctx, models.DescribeRequest{Tool: "refund_order", Arguments: args, Tenant: "ten_other"})
		if err != nil || len(f.Facts) != 1 || f.Facts[0].Value != "ord_1003 does not exist" || len(f.Changes) != 0 {
			t.Errorf("another tenant's description: %v (%v)", f, err)
		}
		logs := json.RawMessage(`{"log_ids":["log_0001","log_9999"],"reason":"x"}`)
		f, err = l.Describe(ctx, models.DescribeRequest{Tool: "delete_logs", Arguments: logs, Tenant: d.Tenant.ID})
		if err != nil || len(f.Changes) != 1 || f.Changes[0].BeforeDisplay != "1 of 2" || f.Changes[0].AfterDisplay != "0 of 2" {
			t.Errorf("log description: %v (%v)", f, err)
		}
		if _, err := l.Describe(ctx, models.DescribeRequest{Tool: "no_such_tool", Arguments: logs, Tenant: d.Tenant.ID}); !errors.Is(err, models.ErrNoDescription) {
			t.Errorf("an unknown tool: %v, want ErrNoDescription", err)
		}
	})
}
