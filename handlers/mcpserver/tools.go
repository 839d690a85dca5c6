package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/handlers/jsonstrict"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// RequestToolName is the MCP name of a registry tool: request_<tool>, which
// says what a call does — it asks for a write, it does not make it.
func RequestToolName(tool string) string { return "request_" + tool }

// Annotations maps a tool's declared side effect to MCP's hints. A
// request_* call itself only stores a proposal, but the hints describe the
// write it asks for, since that is what a client should warn its user
// about:
//
//   - none: readOnlyHint (nothing outside countersign changes), idempotent.
//   - reversible: a write that can be undone: not destructive.
//   - irreversible: destructiveHint.
//   - external: destructiveHint and openWorldHint (it reaches people or
//     systems outside, such as an email, and cannot be called back).
//
// idempotentHint is false for every write: two calls make two proposals
// (and, approved, two writes) unless a request key ties them together.
func Annotations(t *registry.Tool) *mcp.ToolAnnotations {
	no, yes := false, true
	a := &mcp.ToolAnnotations{Title: t.Title, DestructiveHint: &no, OpenWorldHint: &no}
	switch t.SideEffect {
	case models.SideEffectNone:
		a.ReadOnlyHint = true
		a.IdempotentHint = true
	case models.SideEffectIrreversible:
		a.DestructiveHint = &yes
	case models.SideEffectExternal:
		a.DestructiveHint = &yes
		a.OpenWorldHint = &yes
	}
	return a
}

// Meta keys a client may set on a request_* call.
const (
	// MetaRequestKey makes the call idempotent: a retry with the same key
	// and arguments returns the same proposal.
	MetaRequestKey = "countersign/request_key"
	// MetaContext is free text shown to the reviewer.
	MetaContext = "countersign/context"
)

// metaKeys returns the call's request key and context, "" when absent or
// null. Another JSON type is refused, as the API refuses a request_key
// that is not a string: dropped, a key would make a retry a second
// proposal.
func metaKeys(req *mcp.CallToolRequest) (requestKey, context string, err error) {
	if requestKey, err = metaString(req.Params.Meta, MetaRequestKey); err != nil {
		return "", "", err
	}
	if context, err = metaString(req.Params.Meta, MetaContext); err != nil {
		return "", "", err
	}
	return requestKey, context, nil
}

func metaString(meta mcp.Meta, key string) (string, error) {
	switch v := meta[key].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", &models.Error{Code: models.EInvalidRequest,
			Message: fmt.Sprintf("_meta %q must be a string, not %s", key, jsonType(v)),
			Fields:  []models.FieldProblem{{Pointer: "/_meta/" + strings.ReplaceAll(key, "/", "~1"), Message: "must be a string"}}}
	}
}

// jsonType names the JSON type of a value decoded into any.
func jsonType(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "another type"
}

var proposalIDSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "proposal_id": {"type": "string", "description": "The proposal id a request_* tool returned."}
  },
  "required": ["proposal_id"],
  "additionalProperties": false
}`)

var getProposalSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "proposal_id": {"type": "string", "description": "The proposal id a request_* tool returned."},
    "wait_seconds": {"type": ["integer", "null"], "minimum": 0, "maximum": 60,
      "description": "Wait up to this many seconds for the proposal to change while it awaits a person (default 30, null for the default, 0 to answer at once)."}
  },
  "required": ["proposal_id", "wait_seconds"],
  "additionalProperties": false
}`)

func (h *Handler) addTools() {
	for _, t := range h.reg.Tools() {
		h.server.AddTool(&mcp.Tool{
			Name:         RequestToolName(t.Name),
			Title:        t.Title,
			Description:  t.AgentDescription() + "\n\nThe result carries the proposal id and console_url, the page where a person decides; then call get_proposal and, once confirmed, execute_confirmed.",
			InputSchema:  t.InputSchema(),
			OutputSchema: resultSchema,
			Annotations:  Annotations(t),
		}, h.requestTool(t))
	}
	no, yes := false, true
	h.server.AddTool(&mcp.Tool{
		Name:  "get_proposal",
		Title: "Read a proposal",
		Description: "Returns a proposal's status, preview, risk tier, expiry and console_url. While it awaits a " +
			"person it waits up to wait_seconds for a change. Statuses: awaiting_confirmation (a person has not " +
			"decided yet), confirmed (call execute_confirmed), declined (the reason says why; do not retry it " +
			"unchanged), expired, cancelled, executing, succeeded, failed_terminal, unknown.",
		InputSchema:  getProposalSchema,
		OutputSchema: resultSchema,
		Annotations: &mcp.ToolAnnotations{Title: "Read a proposal", ReadOnlyHint: true, IdempotentHint: true,
			DestructiveHint: &no, OpenWorldHint: &no},
	}, h.getProposal)
	h.server.AddTool(&mcp.Tool{
		Name:  "execute_confirmed",
		Title: "Execute a confirmed proposal",
		Description: "Carries out exactly the write a person confirmed, once, and returns its receipt. The server " +
			"redeems the one-time confirmation token itself. Before confirmation it executes nothing and says " +
			"why; a second call answers already_consumed.",
		InputSchema:  proposalIDSchema,
		OutputSchema: resultSchema,
		Annotations: &mcp.ToolAnnotations{Title: "Execute a confirmed proposal", DestructiveHint: &yes,
			IdempotentHint: true, OpenWorldHint: &yes},
	}, h.executeConfirmed)
	h.server.AddTool(&mcp.Tool{
		Name:         "cancel_proposal",
		Title:        "Withdraw a proposal",
		Description:  "Withdraws one of your proposals while it still awaits a person. Nothing is written.",
		InputSchema:  proposalIDSchema,
		OutputSchema: resultSchema,
		Annotations: &mcp.ToolAnnotations{Title: "Withdraw a proposal", DestructiveHint: &no, IdempotentHint: true,
			OpenWorldHint: &no},
	}, h.cancelProposal)
}

// requestTool creates a proposal from the call's arguments, exactly as
// POST /api/v1/proposals does.
func (h *Handler) requestTool(t *registry.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		agent, ok := agentOf(req)
		if !ok {
			return nil, errors.New("unauthenticated request")
		}
		if req.Params.RequestState != "" {
			// A 2026-07-28 client returning from the console link: report
			// the proposal the first round created, never a new one.
			return h.afterInput(ctx, req, agent, "", t.Name)
		}
		in := writes.ProposeInput{Tool: t.Name, Arguments: arguments(req)}
		var err error
		if in.RequestKey, in.Context, err = metaKeys(req); err != nil {
			return h.toolError(ctx, err)
		}
		p, _, err := h.p.Propose(ctx, agent, in)
		if err != nil {
			return h.toolError(ctx, err)
		}
		if res := h.awaitPerson(ctx, req, p); res != nil {
			return res, nil
		}
		return h.proposalResult(p), nil
	}
}

// getProposal reads the caller's proposal, waiting for a change while it
// awaits a person.
func (h *Handler) getProposal(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	agent, ok := agentOf(req)
	if !ok {
		return nil, errors.New("unauthenticated request")
	}
	var in struct {
		ProposalID  string `json:"proposal_id"`
		WaitSeconds *int   `json:"wait_seconds"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return h.toolError(ctx, err)
	}
	wait := DefaultWait
	if in.WaitSeconds != nil {
		if *in.WaitSeconds < 0 || *in.WaitSeconds > int(writes.MaxWait/time.Second) {
			return h.toolError(ctx, &models.Error{Code: models.ESchemaViolation, Message: "wait_seconds must be from 0 to 60",
				Fields: []models.FieldProblem{{Pointer: "/wait_seconds", Message: "must be from 0 to 60"}}})
		}
		wait = time.Duration(*in.WaitSeconds) * time.Second
	}
	p, err := h.own(ctx, agent, in.ProposalID)
	if err != nil {
		return h.toolError(ctx, err)
	}
	if res := h.awaitPerson(ctx, req, p); res != nil {
		return res, nil
	}
	if p.Status.Pending() && wait > 0 {
		if p, err = h.waitOwn(ctx, agent, p, wait); err != nil {
			return h.toolError(ctx, err)
		}
	}
	return h.proposalResult(p), nil
}

// executeConfirmed redeems the proposal's token on the agent's behalf: the
// token never passes through the model.
func (h *Handler) executeConfirmed(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	agent, ok := agentOf(req)
	if !ok {
		return nil, errors.New("unauthenticated request")
	}
	var in struct {
		ProposalID string `json:"proposal_id"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return h.toolError(ctx, err)
	}
	p, err := h.own(ctx, agent, in.ProposalID)
	if err != nil {
		return h.toolError(ctx, err)
	}
	switch {
	case !p.Status.Executable(), p.Token == nil, p.Token.Compact == "":
		// Nothing to redeem: an outcome to report, not an error to retry.
		// Whatever else Execute is asked, the protocol decides.
		return h.notExecuted(p), nil
	}
	e, err := h.p.Execute(ctx, agent, p.ID, p.Token.Compact)
	if err != nil {
		return h.toolError(ctx, err)
	}
	return h.executionResult(p, e), nil
}

func (h *Handler) cancelProposal(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	agent, ok := agentOf(req)
	if !ok {
		return nil, errors.New("unauthenticated request")
	}
	var in struct {
		ProposalID string `json:"proposal_id"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return h.toolError(ctx, err)
	}
	p, err := h.own(ctx, agent, in.ProposalID)
	if err != nil {
		return h.toolError(ctx, err)
	}
	if p.Status == models.StatusExpired {
		// An outcome to report, as get_proposal and execute_confirmed
		// do, not an error to retry.
		return h.proposalResult(p), nil
	}
	p, err = h.p.Cancel(ctx, agent, in.ProposalID)
	if models.IsCode(err, models.EProposalExpired) {
		// It ran out of time since it was read.
		if p, err = h.own(ctx, agent, in.ProposalID); err == nil {
			return h.proposalResult(p), nil
		}
	}
	if err != nil {
		return h.toolError(ctx, err)
	}
	return h.proposalResult(p), nil
}

// own returns the agent's own proposal; another agent's is not found, as
// an unknown id is.
func (h *Handler) own(ctx context.Context, agent models.Agent, id string) (*models.Proposal, error) {
	if id == "" {
		return nil, &models.Error{Code: models.ESchemaViolation, Message: "proposal_id is required",
			Fields: []models.FieldProblem{{Pointer: "/proposal_id", Message: "is required"}}}
	}
	p, err := h.p.Get(ctx, agent.TenantID, id)
	if err != nil {
		return nil, err
	}
	if !p.ProposedBy(agent) {
		return nil, models.Errorf(models.ENotFound, "no proposal %q", id)
	}
	return p, nil
}

// waitOwn waits up to max for p to change, counted against the agent's
// limit of concurrent long-polls like a wait over the HTTP API.
func (h *Handler) waitOwn(ctx context.Context, agent models.Agent, p *models.Proposal, max time.Duration) (*models.Proposal, error) {
	next, err := h.p.AgentWait(ctx, agent, p, max)
	if err != nil {
		if ctx.Err() != nil {
			return p, nil
		}
		return nil, err
	}
	return next, nil
}

// decodeArgs decodes a built-in tool's arguments by the rules the API
// decodes request bodies by (jsonstrict): a value that does not fit the
// tool's input schema (an unknown or misspelled parameter, a wrong type, a
// fraction for an integer) is a schema violation naming its pointer; a
// document that is not well-formed (a key named twice) is invalid_request,
// as the API answers it.
func decodeArgs(req *mcp.CallToolRequest, v any) error {
	err := jsonstrict.Decode(arguments(req), v, "arguments object")
	var me *models.Error
	if !errors.As(err, &me) {
		return err
	}
	if jsonstrict.IsFieldError(err) {
		return &models.Error{Code: models.ESchemaViolation, Message: me.Message, Fields: me.Fields, Err: err}
	}
	return me
}

// arguments are a call's arguments, {} when absent or null.
func arguments(req *mcp.CallToolRequest) []byte {
	args := bytes.TrimSpace(req.Params.Arguments)
	if len(args) == 0 || string(args) == "null" {
		return []byte("{}")
	}
	return args
}
