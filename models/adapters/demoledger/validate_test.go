package demoledger_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/store"
)

// ValidateDescribe answers from one read what Validate and then Describe
// answer from two: the same result, the description only for an allowed
// write, and the same refusal of a tool the ledger does not handle.
func TestDemoLedgerValidateDescribeAgreesWithValidateThenDescribe(t *testing.T) {
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := demoledger.New(st)
		cases := []struct {
			name, tool, tenant, args string
			ok                       bool
		}{
			{"refund", "refund_order", d.Tenant.ID, `{"amount_minor":5000,"currency":"CNY","order_id":"ord_1003","reason":"x"}`, true},
			{"refund over the balance", "refund_order", d.Tenant.ID, `{"amount_minor":9999999,"currency":"CNY","order_id":"ord_1003","reason":"x"}`, false},
			{"refund in another currency", "refund_order", d.Tenant.ID, `{"amount_minor":1,"currency":"USD","order_id":"ord_1003","reason":"x"}`, false},
			{"order of another tenant", "refund_order", "ten_other", `{"amount_minor":1,"currency":"CNY","order_id":"ord_1003","reason":"x"}`, false},
			{"e-mail", "send_customer_email", d.Tenant.ID, `{"customer_id":"cus_001","template":"apology","subject":"S","body":"B","send_at":null}`, true},
			{"e-mail to nobody", "send_customer_email", d.Tenant.ID, `{"customer_id":"cus_999","template":"apology","subject":"S","body":"B","send_at":null}`, false},
			{"deletion", "delete_logs", d.Tenant.ID, `{"log_ids":["log_0002","log_0001"],"reason":"x"}`, true},
			{"deletion of missing entries", "delete_logs", d.Tenant.ID, `{"log_ids":["log_0001","log_9999"],"reason":"x"}`, false},
		}
		for _, c := range cases {
			req := models.ValidateRequest{Tool: c.tool, Arguments: json.RawMessage(c.args), Tenant: c.tenant, Principal: "agt_x"}
			wantVR, err := l.Validate(ctx, req)
			if err != nil {
				t.Fatalf("%s: validate: %v", c.name, err)
			}
			wantD, err := l.Describe(ctx, models.DescribeRequest{Tool: c.tool, Arguments: req.Arguments, Tenant: c.tenant})
			if err != nil {
				t.Fatalf("%s: describe: %v", c.name, err)
			}
			vr, desc, err := l.ValidateDescribe(ctx, req)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if vr.OK != c.ok || !reflect.DeepEqual(vr, wantVR) {
				t.Errorf("%s: validation %+v, want %+v (ok %v)", c.name, vr, wantVR, c.ok)
			}
			switch {
			case !c.ok && desc != nil:
				t.Errorf("%s: a refused write described: %+v", c.name, desc)
			case c.ok && (desc == nil || !reflect.DeepEqual(*desc, wantD)):
				t.Errorf("%s: description %+v, want %+v", c.name, desc, wantD)
			}
		}
		req := models.ValidateRequest{Tool: "no_such_tool", Arguments: json.RawMessage(`{}`), Tenant: d.Tenant.ID}
		_, wantErr := l.Validate(ctx, req)
		if _, desc, err := l.ValidateDescribe(ctx, req); models.ErrorCode(err) != models.EBusinessRule || models.ErrorCode(wantErr) != models.EBusinessRule || desc != nil {
			t.Errorf("an unknown tool: %v (%v), want %v", err, desc, wantErr)
		}
		bad := models.ValidateRequest{Tool: "refund_order", Arguments: json.RawMessage(`{"amount_minor":"x"}`), Tenant: d.Tenant.ID}
		if _, _, err := l.ValidateDescribe(ctx, bad); models.ErrorCode(err) != models.EInvalidRequest {
			t.Errorf("arguments that do not decode: %v, want %s", err, models.EInvalidRequest)
		}
	})
}

// Validation and description read the committed state on the store's
// read pool: a write transaction left open (on SQLite it holds the one
// writer connection) neither holds them up nor shows them its uncommitted
// change.
func TestDemoLedgerValidatesBesideAnOpenWrite(t *testing.T) {
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		l := demoledger.New(st)
		tx := st.Gorm().WithContext(ctx).Begin()
		if tx.Error != nil {
			t.Fatal(tx.Error)
		}
		defer tx.Rollback()
		if err := tx.Exec("UPDATE demo_orders SET refunded_minor = payable_minor, version = version + 1 WHERE tenant_id = ? AND id = ?",
			d.Tenant.ID, "ord_1003").Error; err != nil {
			t.Fatal(err)
		}
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		vr, desc, err := l.ValidateDescribe(wait, models.ValidateRequest{Tool: "refund_order", Tenant: d.Tenant.ID,
			Arguments: json.RawMessage(`{"amount_minor":5000,"currency":"CNY","order_id":"ord_1003","reason":"x"}`)})
		if err != nil {
			t.Fatalf("validation beside an open write: %v", err)
		}
		if !vr.OK || vr.StateVersion != "1" || desc == nil || string(desc.Changes[0].Before) != "0" {
			t.Fatalf("validation saw the uncommitted refund: %+v %+v", vr, desc)
		}
	})
}
