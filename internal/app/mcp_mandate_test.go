package app_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/handlers/mcpserver"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
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
	if code := toolErrorCode(t, a.call(mcpserver.MandateToolName, map[string]any{"tool": "refund_order", "bogus": 1}, nil)); code != models.EInvalidRequest {
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

// mandateTerms are request_mandate's arguments for refunds of up to 10 CNY.
func (c *console) mandateTerms() map[string]any {
	return map[string]any{"tool": "refund_order", "tiers": []string{"low"},
		"resource_pattern": "ord_1[0-9]{3}", "resources": nil, "enums": nil, "patterns": nil, "max_uses": 0,
		"money":      map[string]any{"field": "amount_minor", "currency": "CNY", "per_call_cap": 1000, "budget": 3000},
		"expires_at": c.clock.Now().Add(time.Hour).Format(time.RFC3339), "reason": "sale refunds"}
}

// On 2026-07-28 with URL elicitation, request_mandate answers input-required
// once; the client's retry reports that mandate request and makes no other.
func TestMCPRequestMandateOnTheNewRevision(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{})
	var m mcpserver.ProposalResult
	res := a.call(mcpserver.MandateToolName, c.mandateTerms(), &m)
	if res.IsError || m.Kind != models.KindMandate || m.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("request_mandate: %s", text(res))
	}
	if el := a.elicitations(); len(el) != 1 || el[0].Mode != "url" || el[0].URL != m.ConsoleURL {
		t.Fatalf("input requests %+v, want the console URL %s", el, m.ConsoleURL)
	}
	page, err := c.app.Protocol.List(context.Background(), c.agentTenant(), writes.ListQuery{})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("the retry made more mandate requests: %d (%v)", len(page.Items), err)
	}
}

// A retry's request state is reported only by the tool kind that made it:
// request_mandate never reports a write, request_<tool> never a mandate
// request of that tool.
func TestMCPRequestStateKeepsToItsKind(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noMultiTrip: true})
	first := func(name string, args map[string]any) string {
		t.Helper()
		res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || !res.NeedsInput() || res.RequestState == "" {
			t.Fatalf("%s: want an input-required result, got %v %s", name, err, text(res))
		}
		return res.RequestState
	}
	refund := map[string]any{"order_id": "ord_1003", "amount_minor": 100, "currency": "CNY", "reason": "damaged"}
	write, mandate := first("request_refund_order", refund), first(mcpserver.MandateToolName, c.mandateTerms())
	for _, tc := range []struct {
		name  string
		args  map[string]any
		state string
	}{
		{mcpserver.MandateToolName, c.mandateTerms(), write},
		{"request_refund_order", refund, mandate},
	} {
		res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.name, Arguments: tc.args,
			RequestState: tc.state})
		if err != nil {
			t.Fatal(err)
		}
		if code := toolErrorCode(t, res); code != models.ENotFound {
			t.Errorf("%s with the request state of %s: %s", tc.name, tc.state, code)
		}
	}
	var again mcpserver.ProposalResult
	res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.MandateToolName,
		Arguments: c.mandateTerms(), RequestState: mandate})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if json.Unmarshal(b, &again); again.ProposalID != mandate || again.Kind != models.KindMandate {
		t.Errorf("the retry of request_mandate answered %s", text(res))
	}
}
