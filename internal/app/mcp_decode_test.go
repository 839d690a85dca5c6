package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/handlers/mcpserver"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// A tool call's arguments are read by the rules the API reads its bodies
// by: names spelled exactly, no key twice, integral numbers for integers.
func TestMCPArgumentsAreDecodedAsStrictlyAsTheAPI(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	p := a.refund("ord_1001", 500)
	for _, tc := range []struct {
		name, args string
		code       models.Code
		pointer    string
		mention    string
	}{
		{"names in another case", `{"PROPOSAL_ID":"` + p.ProposalID + `","Wait_Seconds":0}`,
			models.ESchemaViolation, "/PROPOSAL_ID", `must be spelled "proposal_id"`},
		{"a name in another case", `{"proposal_id":"` + p.ProposalID + `","Wait_Seconds":0}`,
			models.ESchemaViolation, "/Wait_Seconds", `must be spelled "wait_seconds"`},
		{"a key twice", `{"proposal_id":"prop_x","proposal_id":"` + p.ProposalID + `","wait_seconds":0}`,
			models.EInvalidRequest, "/proposal_id", `duplicate key "proposal_id"`},
		{"a fraction", `{"proposal_id":"` + p.ProposalID + `","wait_seconds":0.5}`,
			models.ESchemaViolation, "/wait_seconds", "must be a whole number, not 0.5"},
		{"beyond every integer", `{"proposal_id":"` + p.ProposalID + `","wait_seconds":1e300}`,
			models.ESchemaViolation, "/wait_seconds", "out of range"},
	} {
		res := a.call("get_proposal", json.RawMessage(tc.args), nil)
		e, err := toolErrorOf(res)
		if !res.IsError || err != nil {
			t.Errorf("%s: want a tool error, got %s (%v)", tc.name, text(res), err)
			continue
		}
		if e.Error.Code != tc.code || len(e.Error.Fields) != 1 || e.Error.Fields[0].Pointer != tc.pointer ||
			!strings.Contains(e.Error.Message, tc.mention) {
			t.Errorf("%s: %+v, want %s at %s mentioning %q", tc.name, e.Error, tc.code, tc.pointer, tc.mention)
		}
	}
	// A whole number is one however it is written, as amount_minor 1990.0
	// is for request_refund_order.
	for _, wait := range []string{"0", "0.0", "0e0", "-0", "0.00e+5"} {
		var out mcpserver.ProposalResult
		res := a.call("get_proposal", json.RawMessage(`{"proposal_id":"`+p.ProposalID+`","wait_seconds":`+wait+`}`), &out)
		if res.IsError || out.ProposalID != p.ProposalID {
			t.Errorf("wait_seconds %s: %s", wait, text(res))
		}
	}
	var out mcpserver.ProposalResult
	if res := a.call("get_proposal", json.RawMessage(`{"proposal_id":"`+p.ProposalID+`","wait_seconds":1E0}`), &out); res.IsError {
		t.Errorf("wait_seconds 1E0: %s", text(res))
	}
}

// request_mandate and POST /api/v1/mandates read the same terms the same
// way, and refuse what they refuse with the same code and pointer (under
// /terms over HTTP): invalid_request, as the README says of unknown terms.
func TestMandateTermsAreRefusedAlikeOverMCPAndHTTP(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	expires := c.clock.Now().Add(time.Hour).Format(time.RFC3339)
	rest := `"tiers":["low"],"resource_pattern":"","resources":null,"money":null,"enums":null,"patterns":null,` +
		`"max_uses":3,"reason":"sale refunds"`
	for _, tc := range []struct {
		name, terms, pointer, mention string
	}{
		{"a name in another case", `{"TOOL":"refund_order","expires_at":"` + expires + `",` + rest + `}`,
			"/TOOL", `must be spelled "tool"`},
		{"a nested name in another case", `{"tool":"refund_order","expires_at":"` + expires + `",` + strings.Replace(rest, `"money":null`,
			`"money":{"FIELD":"amount_minor","currency":"CNY","per_call_cap":100,"budget":1000}`, 1) + `}`,
			"/money/FIELD", `must be spelled "field"`},
		{"a key twice", `{"tool":"refund_order","tool":"delete_logs","expires_at":"` + expires + `",` + rest + `}`,
			"/tool", `duplicate key "tool"`},
		{"an unknown term", `{"tool":"refund_order","bogus":1,"expires_at":"` + expires + `",` + rest + `}`,
			"/bogus", `unknown field "bogus"`},
		{"a date without a time", `{"tool":"refund_order","expires_at":"2026-12-20",` + rest + `}`,
			"/expires_at", "RFC 3339"},
		{"a fraction of a use", `{"tool":"refund_order","expires_at":"` + expires + `",` + strings.Replace(rest, `"max_uses":3`, `"max_uses":2.5`, 1) + `}`,
			"/max_uses", "whole number"},
		{"the server's policy version", `{"tool":"refund_order","policy_version":"v0","expires_at":"` + expires + `",` + rest + `}`,
			"/policy_version", "set by the server"},
		{"an empty policy version", `{"tool":"refund_order","policy_version":"","expires_at":"` + expires + `",` + rest + `}`,
			"/policy_version", "set by the server"},
		{"a null policy version", `{"tool":"refund_order","policy_version":null,"expires_at":"` + expires + `",` + rest + `}`,
			"/policy_version", "set by the server"},
	} {
		res := a.call(mcpserver.MandateToolName, json.RawMessage(tc.terms), nil)
		e, err := toolErrorOf(res)
		if !res.IsError || err != nil {
			t.Errorf("MCP, %s: want a tool error, got %s (%v)", tc.name, text(res), err)
		} else if e.Error.Code != models.EInvalidRequest || len(e.Error.Fields) != 1 || e.Error.Fields[0].Pointer != tc.pointer ||
			!strings.Contains(e.Error.Message, tc.mention) {
			t.Errorf("MCP, %s: %+v, want invalid_request at %s mentioning %q", tc.name, e.Error, tc.pointer, tc.mention)
		}
		var body mcpserver.ToolError
		st := mandateCall(t, c, "POST", "/api/v1/mandates", json.RawMessage(`{"terms":`+tc.terms+`}`), &body)
		if st != http.StatusBadRequest || body.Error.Code != models.EInvalidRequest || len(body.Error.Fields) != 1 ||
			body.Error.Fields[0].Pointer != "/terms"+tc.pointer || !strings.Contains(body.Error.Message, tc.mention) {
			t.Errorf("HTTP, %s: %d %+v, want 400 invalid_request at /terms%s mentioning %q", tc.name, st, body.Error, tc.pointer, tc.mention)
		}
	}
	if page, err := c.app.Protocol.List(context.Background(), c.agentTenant(), writes.ListQuery{}); err != nil || len(page.Items) != 0 {
		t.Errorf("refused mandate requests were stored: %d (%v)", len(page.Items), err)
	}
	// Both take a whole number written with a fraction of zero, and name
	// the asking agent in agents, which request_mandate's schema lists.
	agent, err := c.app.Protocol.AuthenticateAgent(context.Background(), c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	ok := `{"tool":"refund_order","agents":["` + agent.ID + `"],"expires_at":"` + expires + `",` +
		strings.Replace(rest, `"max_uses":3`, `"max_uses":3.0`, 1) + `}`
	var m mcpserver.ProposalResult
	if res := a.call(mcpserver.MandateToolName, json.RawMessage(ok), &m); res.IsError || m.Kind != models.KindMandate {
		t.Errorf("MCP, integral max_uses and own agent: %s", text(res))
	}
	if st := mandateCall(t, c, "POST", "/api/v1/mandates", json.RawMessage(`{"terms":`+ok+`,"request_key":"k-http"}`), nil); st != http.StatusCreated {
		t.Errorf("HTTP, integral max_uses and own agent: %d", st)
	}
	tools, err := a.session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name != mcpserver.MandateToolName {
			continue
		}
		var schema struct {
			Properties map[string]any `json:"properties"`
		}
		b, _ := json.Marshal(tl.InputSchema)
		json.Unmarshal(b, &schema)
		if _, ok := schema.Properties["agents"]; !ok {
			t.Errorf("request_mandate accepts agents, but its input schema does not list it: %s", b)
		}
		if _, ok := schema.Properties["policy_version"]; ok {
			t.Errorf("request_mandate lists policy_version, which it refuses: %s", b)
		}
	}
}
