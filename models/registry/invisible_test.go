package registry

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

func refundWith(t *testing.T, option string) *Tool {
	t.Helper()
	yaml := strings.Replace(string(DemoYAML()), "  - name: refund_order\n", "  - name: refund_order\n    reject_invisible: "+option+"\n", 1)
	r, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("refund_order")
	return tool
}

// reject_invisible refuses hidden code points in the named arguments with
// schema_violation at the JSON pointer; other arguments and tools without
// the option accept them (and the console reveals them).
func TestRejectInvisible(t *testing.T) {
	args := func(reason string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"order_id": "ord_1001", "amount_minor": 100, "currency": "CNY", "reason": reason})
		return b
	}
	for _, reason := range []string{"Refund \u202E00.991", "lost\u200Bparcel", "cafe\u0301", "x\uFE0F"} {
		for _, option := range []string{"[reason]", `["*"]`} {
			_, err := refundWith(t, option).Prepare(args(reason))
			var e *models.Error
			if !models.IsCode(err, models.ESchemaViolation) || !errors.As(err, &e) || len(e.Fields) != 1 || e.Fields[0].Pointer != "/reason" {
				t.Errorf("%s %q: err = %v, want schema_violation at /reason", option, reason, err)
				continue
			}
			if !strings.Contains(e.Fields[0].Message, "⟨U+") {
				t.Errorf("message %q does not name the code point", e.Fields[0].Message)
			}
		}
		if _, err := refundWith(t, "[currency]").Prepare(args(reason)); err != nil {
			t.Errorf("option on another field refused %q: %v", reason, err)
		}
		demo, _ := Demo().Tool("refund_order")
		if _, err := demo.Prepare(args(reason)); err != nil {
			t.Errorf("without the option %q was refused: %v", reason, err)
		}
	}
	if _, err := refundWith(t, "[reason]").Prepare(args("Parcel lost in transit, 退款 café")); err != nil {
		t.Errorf("clean text refused: %v", err)
	}
	yaml := strings.Replace(string(DemoYAML()), "  - name: refund_order\n", "  - name: refund_order\n    reject_invisible: [nope]\n", 1)
	if _, err := Parse([]byte(yaml)); err == nil || !strings.Contains(err.Error(), `reject_invisible: "nope" is not a property`) {
		t.Errorf("unknown field in reject_invisible: %v", err)
	}
}

func TestPrepareRefusesLoneSurrogate(t *testing.T) {
	demo, _ := Demo().Tool("refund_order")
	_, err := demo.Prepare(json.RawMessage(`{"order_id":"ord_1001","amount_minor":100,"currency":"CNY","reason":"a\ud800"}`))
	if !models.IsCode(err, models.EInvalidRequest) || !strings.Contains(err.Error(), "surrogate") {
		t.Errorf("err = %v, want invalid_request about a lone surrogate", err)
	}
}
