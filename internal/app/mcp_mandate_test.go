package app_test

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/handlers/mcpserver"
	"github.com/countersign/countersign/models"
)

// Over MCP an agent asks for a mandate with request_mandate; once a person
// grants it in the console, a fitting refund comes back confirmed by the
// mandate and executes, and one over the cap waits with the reason.
func TestMCPRequestMandate(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	var m mcpserver.ProposalResult
	res := a.call(mcpserver.MandateToolName, map[string]any{"tool": "refund_order", "tiers": []string{"low"},
		"resource_pattern": "ord_1[0-9]{3}", "resources": nil, "enums": nil, "patterns": nil, "max_uses": 0,
		"money":      map[string]any{"field": "amount_minor", "currency": "CNY", "per_call_cap": 1000, "budget": 3000},
		"expires_at": c.clock.Now().Add(time.Hour).Format(time.RFC3339), "reason": "sale refunds"}, &m)
	if res.IsError || m.Kind != models.KindMandate || m.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("request_mandate: %s", text(res))
	}
	if code := toolErrorCode(t, a.call(mcpserver.MandateToolName, map[string]any{"tool": "refund_order", "bogus": 1}, nil)); code != models.ESchemaViolation {
		t.Errorf("unknown term: %s", code)
	}
	c.approve(m.ProposalID)
	if got := a.get(m.ProposalID, 0); got.Status != models.StatusConfirmed || got.MandateID == "" || !strings.Contains(got.Next, "granted") {
		t.Fatalf("after the grant: %+v", got)
	}
	fit := a.refund("ord_1001", 900)
	if fit.Status != models.StatusConfirmed || fit.MandateID == "" {
		t.Fatalf("fitting refund: %+v", fit)
	}
	var ex mcpserver.ProposalResult
	if res := a.call("execute_confirmed", map[string]any{"proposal_id": fit.ProposalID}, &ex); res.IsError || ex.Execution == nil ||
		ex.Execution.Receipt.MandateID != fit.MandateID {
		t.Fatalf("execute: %s", text(res))
	}
	over := a.refund("ord_1002", 1500)
	if over.Status != models.StatusAwaitingConfirmation || over.MandateNote != models.MandateOverCap || !strings.Contains(over.Next, "over per-call cap") {
		t.Fatalf("refund over the cap: %+v", over)
	}
}
