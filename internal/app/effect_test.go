package app_test

import (
	"net/http"
	"testing"
)

// An agent reads the effect preview of its proposal in GET
// /api/v1/proposals/{id} (validated against the OpenAPI document) and in
// MCP get_proposal: the same description and digest the reviewer approves.
func TestAgentsSeeTheEffectPreview(t *testing.T) {
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	p := a.refund("ord_1001", 5000)
	stored := c.reloadProposal(p.ProposalID)
	if stored.Effect == nil || stored.EffectDigest == "" {
		t.Fatalf("the demo refund has no effect preview: %+v", stored.Effect)
	}

	got := a.get(p.ProposalID, 0)
	if got.Effect == nil || got.EffectDigest != stored.EffectDigest || len(got.Effect.Changes) != 2 ||
		got.Effect.Changes[1].Field != "refundable_minor" || string(got.Effect.Changes[1].After) != "14900" {
		t.Fatalf("MCP get_proposal effect %+v %q, want %q", got.Effect, got.EffectDigest, stored.EffectDigest)
	}

	var api struct {
		Effect struct {
			Facts   []struct{ Label, Value string } `json:"facts"`
			Changes []struct {
				Field         string `json:"field"`
				Before        int64  `json:"before"`
				After         int64  `json:"after"`
				BeforeDisplay string `json:"before_display"`
				AfterDisplay  string `json:"after_display"`
			} `json:"changes"`
		} `json:"effect"`
		EffectDigest string `json:"effect_digest"`
	}
	if code := mandateCall(t, c, http.MethodGet, "/api/v1/proposals/"+p.ProposalID, nil, &api); code != http.StatusOK {
		t.Fatalf("GET proposal: %d", code)
	}
	ch := api.Effect.Changes
	if api.EffectDigest != stored.EffectDigest || len(ch) != 2 || ch[1].Before != 19900 || ch[1].After != 14900 ||
		ch[1].AfterDisplay != "¥149.00 CNY" {
		t.Fatalf("API effect %+v %q", api.Effect, api.EffectDigest)
	}
}
