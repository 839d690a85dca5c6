package registry

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
)

func shanghai(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Skipf("no time zone database: %v", err)
	}
	return loc
}

func TestPreviewRefundOrder(t *testing.T) {
	tool := demoTool(t, "refund_order")
	p, err := tool.Prepare([]byte(`{"reason":" arrived damaged ","currency":"cny","amount_minor":500000,"order_id":"ord_1001"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tool.Preview(p.Arguments, "Hangzhou Yunqi Rd 88", shanghai(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []models.PreviewField{
		{Name: "order_id", Label: "Order", Value: []byte(`"ord_1001"`), Display: "ord_1001 · Hangzhou Yunqi Rd 88"},
		{Name: "amount_minor", Label: "Amount", Value: []byte(`500000`), Display: "¥5,000.00"},
		{Name: "currency", Label: "Currency", Value: []byte(`"CNY"`), Display: "CNY"},
		{Name: "reason", Label: "Reason", Value: []byte(`"arrived damaged"`), Display: "arrived damaged"},
	}
	if len(got) != len(want) {
		t.Fatalf("preview = %+v, want %d fields", got, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Label != w.Label || string(g.Value) != string(w.Value) || g.Display != w.Display {
			t.Errorf("field %d = {%s %s %s %q}, want {%s %s %s %q}",
				i, g.Name, g.Label, g.Value, g.Display, w.Name, w.Label, w.Value, w.Display)
		}
	}

	// Without a label from the business system the id stands alone.
	got, err = tool.Preview(p.Arguments, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := got[0].Display, "ord_1001"; got != want {
		t.Errorf("display = %q, want %q", got, want)
	}
}

func TestPreviewSendCustomerEmail(t *testing.T) {
	tool := demoTool(t, "send_customer_email")
	cases := []struct {
		sendAt   string
		loc      *time.Location
		wantRaw  string
		wantShow string
	}{
		{`"2026-09-01T14:20:00+08:00"`, shanghai(t), `"2026-09-01T06:20:00Z"`, "2026-09-01 14:20:00 CST (UTC+08:00)"},
		{`"2026-09-01T14:20:00+08:00"`, nil, `"2026-09-01T06:20:00Z"`, "2026-09-01 06:20:00 UTC (UTC+00:00)"},
		{`null`, shanghai(t), `null`, "As soon as confirmed"},
	}
	for _, c := range cases {
		p, err := tool.Prepare([]byte(`{"customer_id":"cus_001","template":"shipping_delay","subject":"  Your order  ","body":"Sorry <3","send_at":` + c.sendAt + `}`))
		if err != nil {
			t.Fatal(err)
		}
		fields, err := tool.Preview(p.Arguments, "Ada Lovelace", c.loc)
		if err != nil {
			t.Fatal(err)
		}
		var names, displays []string
		for _, f := range fields {
			names = append(names, f.Name)
			displays = append(displays, f.Display)
		}
		if got, want := names, []string{"customer_id", "template", "subject", "body", "send_at"}; !slices.Equal(got, want) {
			t.Errorf("names = %v, want %v", got, want)
		}
		wantDisplays := []string{"cus_001 · Ada Lovelace", "Shipping delay", "Your order", "Sorry <3", c.wantShow}
		if got, want := displays, wantDisplays; !slices.Equal(got, want) {
			t.Errorf("displays = %q, want %q", got, want)
		}
		if got, want := string(fields[4].Value), c.wantRaw; got != want {
			t.Errorf("send_at value = %s, want %s", got, want)
		}
	}
}

func TestPreviewList(t *testing.T) {
	tool := demoTool(t, "delete_logs")
	cases := []struct {
		ids  string
		want string
	}{
		{`["log_0001"]`, "1 item: log_0001"},
		{`["log_0003","log_0001","log_0002"]`, "3 items: log_0001, log_0002, log_0003"},
		{logIDs(12), "12 items: log_0000, log_0001, log_0002, log_0003, log_0004, log_0005, log_0006, log_0007, log_0008, log_0009, … and 2 more"},
	}
	for _, c := range cases {
		p, err := tool.Prepare([]byte(`{"log_ids":` + c.ids + `,"reason":"rotation"}`))
		if err != nil {
			t.Fatal(err)
		}
		fields, err := tool.Preview(p.Arguments, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := fields[0].Display, c.want; got != want {
			t.Errorf("display = %q, want %q", got, want)
		}
		if got, want := string(fields[0].Value), `["`; !strings.HasPrefix(got, want) {
			t.Errorf("value = %s, want the raw array", got)
		}
	}
}

func TestPreviewDisplayKinds(t *testing.T) {
	r, err := LoadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("issue_refund")
	p, err := tool.Prepare([]byte(`{"order_id":" ORD_1001 ","amount_minor":1500,"currency":"kwd","method":"store_credit",
		"notify_customer":false,"scheduled_for":null,"reason":"too   many\n spaces","options":{"restock_items":true,"reference":null}}`))
	if err != nil {
		t.Fatal(err)
	}
	fields, err := tool.Preview(p.Arguments, "Kuwait City", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fields {
		got[f.Name] = f.Display
	}
	want := map[string]string{
		"order_id":        "ord_1001 · Kuwait City",
		"amount_minor":    "KWD 1.500",
		"currency":        "KWD",
		"method":          "Store credit",
		"notify_customer": "No",
		"scheduled_for":   "As soon as confirmed",
		"reason":          "too many spaces",
		"options":         `{"reference":null,"restock_items":true}`,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s display = %q, want %q", k, got[k], w)
		}
	}
}

func TestPreviewErrors(t *testing.T) {
	tool := demoTool(t, "refund_order")
	cases := []struct {
		name string
		args string
		code models.Code
	}{
		{"not an object", `[]`, models.EInvalidRequest},
		{"missing argument", `{"order_id":"ord_1001","amount_minor":1,"currency":"CNY"}`, models.EInvalidRequest},
		{"undeclared argument", `{"order_id":"ord_1001","amount_minor":1,"currency":"CNY","reason":"r","x":1}`, models.EInvalidRequest},
		{"unknown currency", `{"order_id":"ord_1001","amount_minor":1,"currency":"XYZ","reason":"r"}`, models.ESchemaViolation},
		{"fractional amount", `{"order_id":"ord_1001","amount_minor":1.5,"currency":"CNY","reason":"r"}`, models.ESchemaViolation},
	}
	for _, c := range cases {
		_, err := tool.Preview([]byte(c.args), "", nil)
		if got, want := models.ErrorCode(err), c.code; got != want {
			t.Errorf("%s: code = %s, want %s (%v)", c.name, got, want, err)
		}
	}
}
