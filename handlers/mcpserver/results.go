package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/models"
)

// ProposalResult is the structured content of every tool that answers with
// a proposal. Field names are part of the MCP interface.
type ProposalResult struct {
	ProposalID   string         `json:"proposal_id"`
	Tool         string         `json:"tool"`
	Status       models.Status  `json:"status"`
	ArgsDigest   string         `json:"args_digest"`
	RequestKey   string         `json:"request_key"`
	CreatedAt    string         `json:"created_at"`
	Preview      Preview        `json:"preview"`
	RiskTier     string         `json:"risk_tier"`
	Confirmation string         `json:"confirmation"`
	Approvals    Approvals      `json:"approvals"`
	ExpiresAt    string         `json:"expires_at"`
	ConsoleURL   string         `json:"console_url"`
	Revision     int64          `json:"revision"`
	Reason       string         `json:"reason,omitempty"`
	Executed     *bool          `json:"executed,omitempty"`
	Execution    *ExecutionInfo `json:"execution,omitempty"`
	// Problems says why the business system refused the arguments
	// (rejected only), as GET /api/v1/proposals/{id} does.
	Problems []models.FieldProblem `json:"problems,omitempty"`
	// Supersedes and SupersededBy link versions a reviewer's edit made.
	Supersedes   *EditInfo `json:"supersedes,omitempty"`
	SupersededBy *EditInfo `json:"superseded_by,omitempty"`
	Next         string    `json:"next"`
	// Kind is "mandate" for a request of a standing mandate, else absent.
	Kind string `json:"kind,omitempty"`
	// MandateID names the standing mandate that confirmed this write (or
	// that a granted mandate request made live); MandateNote says why a
	// mandate covering it could not confirm it.
	MandateID   string `json:"mandate_id,omitempty"`
	MandateNote string `json:"mandate_note,omitempty"`
	// Effect is what the business system said the write would do, before
	// → after, and EffectDigest its digest; absent when it describes
	// nothing.
	Effect       *models.Description `json:"effect,omitempty"`
	EffectDigest string              `json:"effect_digest,omitempty"`
}

// EditInfo is a reviewer's edit between two versions of the request.
type EditInfo struct {
	OriginalID string             `json:"original_id"`
	RevisedID  string             `json:"revised_id"`
	Editor     string             `json:"editor"`
	Reason     string             `json:"reason"`
	Changes    []models.ArgChange `json:"changes"`
}

func editInfo(c *models.Counter) *EditInfo {
	if c == nil {
		return nil
	}
	e := &EditInfo{OriginalID: c.OriginalID, RevisedID: c.RevisedID, Editor: c.EditorName, Reason: c.Reason,
		Changes: make([]models.ArgChange, 0, len(c.Changes))}
	for _, ch := range c.Changes {
		if ch.Before == nil {
			ch.Before = json.RawMessage("null")
		}
		if ch.After == nil {
			ch.After = json.RawMessage("null")
		}
		e.Changes = append(e.Changes, ch)
	}
	return e
}

// Preview is what the reviewer sees: the normalized arguments (machine) and
// each one as displayed (display).
type Preview struct {
	Machine json.RawMessage `json:"machine"`
	Display []DisplayField  `json:"display"`
}

// DisplayField is one argument as the console shows it.
type DisplayField struct {
	Name    string `json:"name"`
	Label   string `json:"label"`
	Display string `json:"display"`
}

// Approvals counts the approvals a quorum tier has and needs.
type Approvals struct {
	Have int `json:"have"`
	Need int `json:"need"`
}

func approvals(p *models.Proposal) Approvals {
	have, need := p.ApprovalCount()
	return Approvals{Have: have, Need: need}
}

// ExecutionInfo is the outcome of execute_confirmed.
type ExecutionInfo struct {
	ExecutionID string          `json:"execution_id"`
	Status      models.Status   `json:"status"`
	Result      json.RawMessage `json:"result,omitempty"`
	Receipt     models.Receipt  `json:"receipt"`
}

func (h *Handler) view(p *models.Proposal) ProposalResult {
	out := ProposalResult{
		ProposalID: p.ID, Tool: p.Tool, Status: p.Status, RiskTier: p.Tier.Name,
		ArgsDigest: p.ArgsDigest, RequestKey: p.RequestKey, CreatedAt: models.FormatTime(p.CreatedAt),
		Confirmation: string(p.Tier.Confirmation),
		Approvals:    approvals(p),
		ConsoleURL:   h.ConsoleURL(p.ID), Revision: p.Revision,
		Preview: Preview{Machine: p.Arguments, Display: make([]DisplayField, 0, len(p.Preview))},
		Kind:    p.Kind, MandateID: p.MandateID, MandateNote: p.MandateNote,
		Effect: p.Effect, EffectDigest: p.EffectDigest,
	}
	if len(out.Preview.Machine) == 0 {
		out.Preview.Machine = json.RawMessage("{}")
	}
	if !p.ExpiresAt.IsZero() {
		out.ExpiresAt = models.FormatTime(p.ExpiresAt)
	}
	for _, f := range p.Preview {
		out.Preview.Display = append(out.Preview.Display, DisplayField{Name: f.Name, Label: f.Label, Display: f.Display})
	}
	for _, d := range p.Decisions {
		if d.Kind == models.DecisionDecline {
			out.Reason = d.Reason
		}
	}
	if p.Execution != nil {
		out.Execution = &ExecutionInfo{ExecutionID: p.Execution.ID, Status: p.Execution.Status,
			Result: p.Execution.Result, Receipt: p.Execution.Receipt()}
	}
	if p.Status == models.StatusRejected {
		out.Problems = make([]models.FieldProblem, 0, len(p.Problems))
		out.Problems = append(out.Problems, p.Problems...)
	}
	out.Supersedes, out.SupersededBy = editInfo(p.Supersedes), editInfo(p.SupersededBy)
	out.Next = h.next(p, out.Reason)
	return out
}

// next tells the model, in one or two sentences, what the status means and
// what to do.
func (h *Handler) next(p *models.Proposal, reason string) string {
	url := h.ConsoleURL(p.ID)
	switch {
	case p.MandateGranted():
		return "A person granted the mandate: your writes that fit its terms are now confirmed without a person (call execute_confirmed on each)."
	case p.Kind == "" && p.Status == models.StatusConfirmed && p.MandateID != "":
		return "Your standing mandate " + p.MandateID + " confirmed exactly these arguments. Call execute_confirmed with this proposal_id to carry out the write."
	case p.Status == models.StatusAwaitingConfirmation && p.MandateNote != "":
		return fmt.Sprintf("Nothing has been written. Your standing mandate does not cover this write (%s), so a person must approve it in the countersign console at %s. "+
			"Call get_proposal to wait for the decision.", p.MandateNote, url)
	}
	switch p.Status {
	case models.StatusAwaitingConfirmation:
		return fmt.Sprintf("Nothing has been written. A person must approve this request in the countersign console at %s (show the user this link). "+
			"Call get_proposal to wait for the decision.", url)
	case models.StatusConfirmed:
		return "A person approved exactly these arguments. Call execute_confirmed with this proposal_id to carry out the write."
	case models.StatusDeclined:
		return fmt.Sprintf("The reviewer declined this request: %s. Nothing was written. Do not retry the same write unchanged.", reason)
	case models.StatusExpired:
		return "Nobody decided before the request expired, or its confirmation was not used in time. Nothing was written; propose again if it is still needed."
	case models.StatusCancelled:
		return "The request was withdrawn. Nothing was written."
	case models.StatusRevoked:
		return "An administrator revoked the confirmation before it was used. Nothing was written."
	case models.StatusRejected:
		return "The business system refused these arguments (problems says why). Nothing was written."
	case models.StatusSuperseded:
		if p.SupersededBy != nil {
			return fmt.Sprintf("A reviewer edited this request instead of declining it (superseded_by: reason and changes). Nothing was written for this version. "+
				"Call get_proposal with proposal_id %s, the edited version, and execute that one once it is confirmed.", p.SupersededBy.RevisedID)
		}
		return "A reviewer edited this request into a new version. Nothing was written for this version."
	case models.StatusExecuting, models.StatusUnknown, models.StatusFailedRetryable:
		return "The write is being carried out or its outcome is being reconciled. Call get_proposal later; do not request it again."
	case models.StatusSucceeded:
		return "The write was carried out. The receipt is in execution.receipt."
	case models.StatusFailedTerminal:
		if p.Execution != nil && p.Execution.ErrorCode == string(models.EStateChanged) {
			return "Nothing was written: the target changed after the preview a person approved, so the write was not made. " +
				"Propose it again (a new request, which a person approves anew) if it is still needed."
		}
		return "The business system refused the write when it was executed. Nothing more will happen."
	}
	return ""
}

func (h *Handler) proposalResult(p *models.Proposal) *mcp.CallToolResult {
	return h.result(h.view(p), false)
}

// notExecuted answers execute_confirmed for a proposal without a token to
// redeem: a result (not an error) that says where it stands, with the
// reviewer's reason when it was declined.
func (h *Handler) notExecuted(p *models.Proposal) *mcp.CallToolResult {
	v := h.view(p)
	no := false
	v.Executed = &no
	return h.result(v, false)
}

func (h *Handler) executionResult(p *models.Proposal, e *models.Execution) *mcp.CallToolResult {
	v := h.view(p)
	yes := true
	v.Executed = &yes
	v.Status = e.Status
	v.Execution = &ExecutionInfo{ExecutionID: e.ID, Status: e.Status, Result: e.Result, Receipt: e.Receipt()}
	v.Next = h.next(&models.Proposal{ID: p.ID, Status: e.Status, Execution: e}, "")
	return h.result(v, false)
}

// result puts v in the structured content and, for clients that read only
// text, its first sentence and JSON in a text block.
func (h *Handler) result(v ProposalResult, isError bool) *mcp.CallToolResult {
	b, _ := json.Marshal(v)
	return &mcp.CallToolResult{
		IsError:           isError,
		StructuredContent: json.RawMessage(b),
		Content:           []mcp.Content{&mcp.TextContent{Text: v.Next + "\n" + string(b)}},
	}
}

// ToolError is the body of a tool error, the API's error envelope. It is
// the JSON on the last line of the error's text content, never its
// structured content: a tool's output schema describes its results, and a
// client that validates structured content against it (as the TypeScript
// SDK does, also when isError is set) would turn the error into a protocol
// exception the model never reads. The MCP specification's tool execution
// errors carry text content only, as the go-sdk's own do.
type ToolError struct {
	Error ToolErrorBody `json:"error"`
}

// ToolErrorBody carries the same code, message and field pointers as the
// HTTP API's error envelope.
type ToolErrorBody struct {
	Code    models.Code           `json:"code"`
	Message string                `json:"message"`
	Fields  []models.FieldProblem `json:"fields,omitempty"`
	Details map[string]any        `json:"details,omitempty"`
}

// toolError turns a domain error into a tool result with isError set, so
// the model reads it and can correct its call: a line per problem, then
// the error envelope as JSON (see ToolError). An internal error is logged
// and shown as "internal error" only.
func (h *Handler) toolError(ctx context.Context, err error) (*mcp.CallToolResult, error) {
	var me *models.Error
	ok := errors.As(err, &me)
	body := ToolErrorBody{Code: models.EInternal, Message: "internal error"}
	if ok && me.Code != models.EInternal {
		body = ToolErrorBody{Code: me.Code, Message: me.Message, Fields: me.Fields, Details: me.Details}
	} else {
		h.log.LogAttrs(ctx, slog.LevelError, "mcp tool failed", slog.String("err", err.Error()))
	}
	var text strings.Builder
	fmt.Fprintf(&text, "%s: %s", body.Code, body.Message)
	for _, f := range body.Fields {
		ptr := f.Pointer
		if ptr == "" {
			ptr = "(arguments)"
		}
		fmt.Fprintf(&text, "\n  %s: %s", ptr, f.Message)
	}
	b, _ := json.Marshal(ToolError{Error: body})
	text.WriteString("\n")
	text.Write(b)
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: text.String()}},
	}, nil
}
