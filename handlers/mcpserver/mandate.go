package mcpserver

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/handlers/jsonstrict"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// MandateToolName is the MCP tool that asks for a standing mandate, unless
// the registry has a tool named "mandate" (whose request_ tool it would
// be); then it is StandingMandateToolName.
const (
	MandateToolName         = "request_mandate"
	StandingMandateToolName = "request_standing_mandate"
)

var mandateSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "tool": {"type": "string", "description": "The registry tool the mandate covers."},
    "agents": {"type": ["array", "null"], "items": {"type": "string"},
      "description": "The ids of the agents covered: only your own may be named; null for yourself."},
    "tiers": {"type": ["array", "null"], "items": {"type": "string"},
      "description": "The strictest risk tier covered first (less strict ones come with it); null for every tier."},
    "resource_pattern": {"type": "string", "description": "RE2 pattern the whole resource id must match, or \"\"."},
    "resources": {"type": ["array", "null"], "items": {"type": "string"}, "description": "Explicit resource ids allowed, or null."},
    "money": {"type": ["object", "null"], "properties": {
        "field": {"type": "string"}, "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "per_call_cap": {"type": "integer", "minimum": 0}, "budget": {"type": "integer", "minimum": 0}},
      "required": ["field", "currency", "per_call_cap", "budget"], "additionalProperties": false,
      "description": "A money argument in minor units: its one currency, a cap per call and a total budget (0: none)."},
    "enums": {"type": ["object", "null"], "additionalProperties": {"type": "array", "items": {"type": "string"}}},
    "patterns": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
    "max_uses": {"type": "integer", "minimum": 0, "description": "How many writes at most (0: no count; then a budget)."},
    "expires_at": {"type": "string", "format": "date-time"},
    "reason": {"type": "string", "description": "Why the mandate is needed; reviewers read it."}
  },
  "required": ["tool", "agents", "tiers", "resource_pattern", "resources", "money", "enums", "patterns", "max_uses", "expires_at", "reason"],
  "additionalProperties": false
}`)

func (h *Handler) addMandateTool() {
	name := MandateToolName
	if _, taken := h.reg.Tool("mandate"); taken {
		name = StandingMandateToolName
	}
	no := false
	h.server.AddTool(&mcp.Tool{
		Name:  name,
		Title: "Ask for a standing mandate",
		Description: "Asks a person to grant you a standing mandate: a bounded class of writes of one tool (resources, " +
			"argument values, a cap per call, a total budget and/or a use count, an expiry) that are then confirmed " +
			"without a person, each still bound to its own arguments and receipted. The result is a proposal of kind " +
			"mandate with its console_url; a person grants it with the rules of the strictest risk tier it covers. " +
			"Writes that do not fit it still wait for a person, with mandate_note saying why.",
		InputSchema:  mandateSchema,
		OutputSchema: resultSchema,
		Annotations: &mcp.ToolAnnotations{Title: "Ask for a standing mandate", DestructiveHint: &no,
			OpenWorldHint: &no},
	}, h.requestMandate)
}

func (h *Handler) requestMandate(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	agent, ok := agentOf(req)
	if !ok {
		return nil, errors.New("unauthenticated request")
	}
	if req.Params.RequestState != "" {
		// A 2026-07-28 client returning from the console link: report
		// the mandate request the first round created, never a new one.
		return h.afterInput(ctx, req, agent, models.KindMandate, "")
	}
	terms, err := mandateTerms(req)
	if err != nil {
		return h.toolError(ctx, err)
	}
	in := writes.MandateInput{Terms: terms}
	if in.RequestKey, in.Context, err = metaKeys(req); err != nil {
		return h.toolError(ctx, err)
	}
	p, _, err := h.p.RequestMandate(ctx, agent, in)
	if err != nil {
		return h.toolError(ctx, err)
	}
	if res := h.awaitPerson(ctx, req, p); res != nil {
		return res, nil
	}
	return h.proposalResult(p), nil
}

// mandateTerms decodes request_mandate's arguments, the terms, as POST
// /api/v1/mandates decodes its "terms" (jsonstrict), and answers as it
// does: invalid_request for terms that cannot be read, unknown ones
// included, each with its pointer, and the members the server sets
// (models.RefuseServerSetTerms).
func mandateTerms(req *mcp.CallToolRequest) (models.MandateTerms, error) {
	var terms models.MandateTerms
	if err := jsonstrict.Decode(arguments(req), &terms, "arguments object"); err != nil {
		return terms, err
	}
	return terms, models.RefuseServerSetTerms(arguments(req))
}
