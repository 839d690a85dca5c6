package mcpserver

import (
	"context"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// multiRoundTripVersion is the first protocol revision in which a server
// asks for input by returning it (SEP-2322) instead of sending requests.
const multiRoundTripVersion = "2026-07-28"

// consoleInput names the one input request countersign makes.
const consoleInput = "countersign_console"

// awaitPerson points the client at the console page while p awaits a
// person, in the way the request's protocol revision allows:
//
//   - 2026-07-28: an input-required result whose input request is a URL
//     elicitation of the console page; the client retries the call with
//     its answer and the proposal id as request state (see afterInput).
//     Only request_* tools return it: the revision keeps no session in
//     which to remember that a proposal was already shown.
//   - 2025-11-25 (URL elicitation capability): an elicitation/create
//     request in url mode, once per session and proposal, and a
//     notifications/elicitation/complete once the proposal is decided.
//
// It returns the input-required result to send, or nil to answer normally.
// The client's answer never decides anything: it is not even read.
func (h *Handler) awaitPerson(ctx context.Context, req *mcp.CallToolRequest, p *models.Proposal) *mcp.CallToolResult {
	if !p.Status.Pending() || req.Session == nil {
		return nil
	}
	ss := req.Session
	params := ss.InitializeParams()
	if params == nil || params.Capabilities == nil || params.Capabilities.Elicitation == nil ||
		params.Capabilities.Elicitation.URL == nil {
		return nil // the result's console_url is all this client can show
	}
	elicit := &mcp.ElicitParams{
		Mode:          "url",
		Message:       "A person must approve this " + p.Tool + " request in the countersign console before anything is written.",
		URL:           h.ConsoleURL(p.ID),
		ElicitationID: "elicit_" + p.ID,
	}
	if params.ProtocolVersion >= multiRoundTripVersion {
		if req.Params.Name == "get_proposal" {
			return nil
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{consoleInput: elicit}, RequestState: p.ID}
	}
	key := elicitKey{session: ss.ID(), proposal: p.ID}
	h.mu.Lock()
	if h.elicited[key] {
		h.mu.Unlock()
		return nil
	}
	h.elicited[key] = true
	h.mu.Unlock()
	if _, err := ss.Elicit(ctx, elicit); err != nil {
		h.log.LogAttrs(ctx, slog.LevelDebug, "mcp: url elicitation not delivered", slog.String("err", err.Error()))
		h.forget(key)
		return nil
	}
	go h.announceDecision(ss, p, key, elicit.ElicitationID)
	return nil
}

// announceDecision sends the elicitation's completion once p leaves
// awaiting_confirmation, or gives up when the session ends.
func (h *Handler) announceDecision(ss *mcp.ServerSession, p *models.Proposal, key elicitKey, elicitationID string) {
	defer h.forget(key)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		ss.Wait()
		cancel()
	}()
	rev := p.Revision
	for ctx.Err() == nil {
		next, err := h.p.Wait(ctx, p.TenantID, p.ID, rev, writes.MaxWait)
		if err != nil || ctx.Err() != nil {
			return
		}
		if !next.Status.Pending() {
			if err := ss.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: elicitationID}); err != nil {
				h.log.LogAttrs(ctx, slog.LevelDebug, "mcp: elicitation completion not delivered", slog.String("err", err.Error()))
			}
			return
		}
		rev = next.Revision
	}
}

func (h *Handler) forget(key elicitKey) {
	h.mu.Lock()
	delete(h.elicited, key)
	h.mu.Unlock()
}

// afterInput answers the retry of a call that returned an input-required
// result: the request state names the proposal the first round created.
// Only the caller's own proposal of the same kind ("" for a write,
// models.KindMandate for a mandate request) and, when tool is set, of the
// same tool is reported, read afresh; the input responses are ignored.
func (h *Handler) afterInput(ctx context.Context, req *mcp.CallToolRequest, agent models.Agent, kind, tool string) (*mcp.CallToolResult, error) {
	p, err := h.own(ctx, agent, req.Params.RequestState)
	if err != nil {
		return h.toolError(ctx, err)
	}
	if p.Kind != kind || tool != "" && p.Tool != tool {
		return h.toolError(ctx, models.Errorf(models.ENotFound, "no proposal %q", req.Params.RequestState))
	}
	return h.proposalResult(p), nil
}
