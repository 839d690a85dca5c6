package registry_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models/registry"
)

func TestSummaryFromTheDisplayRules(t *testing.T) {
	reg := registry.Demo()
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	cases := []struct {
		tool, args, line, approve string
	}{
		{"refund_order", `{"order_id":"ord_2001","amount_minor":50000,"currency":"CNY","reason":"x"}`,
			"Refund ¥500.00 CNY to order ord_2001 · original payment method", "Approve refund of ¥500.00 to ord_2001"},
		{"delete_logs", `{"log_ids":["log_0001","log_0002","log_0003"],"reason":"x"}`,
			"Permanently delete 3 log entries", "Approve deleting 3 log entries"},
		{"send_customer_email", `{"customer_id":"cus_001","template":"apology","subject":"s","body":"b","send_at":"2026-09-01T06:20:00Z"}`,
			"Send the “Apology” e-mail to customer cus_001 · 2026-09-01 14:20:00 CST (UTC+08:00)", "Approve sending the “Apology” e-mail to cus_001"},
	}
	for _, c := range cases {
		tool, ok := reg.Tool(c.tool)
		if !ok {
			t.Fatalf("no tool %s", c.tool)
		}
		s, err := tool.Summary(json.RawMessage(c.args), "", shanghai)
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		if s.Line != c.line || s.Approve != c.approve {
			t.Errorf("%s: summary %q / %q, want %q / %q", c.tool, s.Line, s.Approve, c.line, c.approve)
		}
	}
}

func TestSummaryPlaceholdersAreChecked(t *testing.T) {
	base := `tools:
  - name: touch
    title: T
    description: d
    side_effect: reversible
    policy_version: "1"
    adapter: {kind: demo_ledger}
    resource: id
    schema:
      type: object
      properties:
        id: {type: string}
      required: [id]
      additionalProperties: false
    display:
      id: {label: Id, kind: resource}
    summary:
      line: "%s"
    risk:
      - tier: low
        confirmation: click
        ttl: 60s
`
	for line, want := range map[string]string{
		"Touch {nope}":    "names no argument",
		"Touch {len(id)}": "needs an argument displayed as a list",
		"Touch {id":       "unbalanced brace",
	} {
		_, err := registry.Parse([]byte(strings.Replace(base, "%s", line, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("line %q: err %v, want %q", line, err, want)
		}
	}
	reg, err := registry.Parse([]byte(strings.Replace(base, "%s", "Touch {id}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := reg.Tool("touch")
	if s, err := tool.Summary(json.RawMessage(`{"id":"r_1"}`), "", nil); err != nil || s.Line != "Touch r_1" || s.Approve != "Approve" {
		t.Errorf("summary %+v (%v)", s, err)
	}
}
