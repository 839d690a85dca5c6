package mcpserver

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
)

// resultValidator compiles resultSchema, the output schema of every tool.
func resultValidator(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(resultSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://countersign.invalid/mcp/result.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// viewOf renders p as a tool result and checks it against the output schema.
func viewOf(t *testing.T, p *models.Proposal) ProposalResult {
	t.Helper()
	h := New(nil, Config{Registry: registry.Demo(), BaseURL: "http://countersign.test"})
	v := h.view(p)
	b, _ := json.Marshal(v)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := resultValidator(t).Validate(doc); err != nil {
		t.Errorf("result outside the output schema: %v\n%s", err, b)
	}
	return v
}

func testProposal(status models.Status) *models.Proposal {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	return &models.Proposal{ID: "prop_1", Tool: "refund_order", Status: status, ArgsDigest: "sha256:x",
		RequestKey: "k", CreatedAt: now, ExpiresAt: now.Add(time.Hour), Revision: 2,
		Tier: models.Tier{Name: "low", Confirmation: models.ConfirmClick}, Arguments: json.RawMessage(`{}`)}
}

// A rejected proposal carries the business system's reasons, as the HTTP
// API's problems do.
func TestRejectedResultSaysWhy(t *testing.T) {
	p := testProposal(models.StatusRejected)
	p.Problems = []models.FieldProblem{{Pointer: "/amount_minor", Message: "more than the refundable balance"}}
	v := viewOf(t, p)
	if len(v.Problems) != 1 || v.Problems[0] != p.Problems[0] {
		t.Errorf("problems %+v, want %+v", v.Problems, p.Problems)
	}
	if !strings.Contains(v.Next, "problems") {
		t.Errorf("next %q does not point at the problems", v.Next)
	}
}

// A write refused because its target changed after the approval tells the
// agent that nothing was written and that it may propose again; another
// terminal failure does not invite a retry.
func TestStateChangedSaysProposeAgain(t *testing.T) {
	p := testProposal(models.StatusFailedTerminal)
	p.Execution = &models.Execution{ID: "exe_1", Status: models.StatusFailedTerminal, ErrorCode: string(models.EStateChanged)}
	v := viewOf(t, p)
	if !strings.Contains(v.Next, "Nothing was written") || !strings.Contains(v.Next, "changed") || !strings.Contains(v.Next, "Propose it again") {
		t.Errorf("state_changed: next %q", v.Next)
	}
	p.Execution.ErrorCode = string(models.EBusinessRule)
	if v := viewOf(t, p); strings.Contains(v.Next, "again") {
		t.Errorf("business_rule: next %q invites a retry", v.Next)
	}
}
