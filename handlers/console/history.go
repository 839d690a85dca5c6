package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/protocol"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/views/history"
	"github.com/countersign/countersign/views/ui"
)

// History serves GET /history: the proposals that left the reviewers' queue
// (decided, expired, cancelled, executed), newest first, with approvers and
// receipts, filtered by ?status= and paginated by ?cursor=.
func (h *Pages) History(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	status, cursor := c.QueryParam("status"), c.QueryParam("cursor")
	statuses := historyStatuses
	if status != "" {
		if !slices.Contains(historyStatuses, models.Status(status)) {
			return models.Errorf(models.EInvalidRequest, "the history has no status %q", status)
		}
		statuses = []models.Status{models.Status(status)}
	}
	ctx := c.Request().Context()
	res, err := h.p.List(ctx, s.User.TenantID, protocol.ListQuery{Statuses: statuses, Cursor: cursor, Limit: historyPageSize})
	if err != nil {
		return err
	}
	page := history.Page{Layout: h.frame(s, "History", "history"), Status: status, CSRF: s.CSRF}
	for _, st := range historyStatuses {
		page.Statuses = append(page.Statuses, history.Option{Value: string(st), Label: statusBadge(st).Text})
	}
	if res.Next != "" {
		page.OlderURL = withQuery("/history", "status", status, "cursor", res.Next)
	}
	if cursor != "" {
		page.FirstURL = withQuery("/history", "status", status)
	}
	for _, item := range res.Items {
		// The list carries no decisions or executions; a page is small.
		p, err := h.p.Get(ctx, s.User.TenantID, item.ID)
		if err != nil {
			return err
		}
		page.Items = append(page.Items, h.historyItem(ctx, p, s.User))
	}
	noStore(c)
	return render(c, http.StatusOK, history.View(page))
}

func (h *Pages) historyItem(ctx context.Context, p *models.Proposal, viewer models.User) history.Item {
	it := history.Item{
		ID:           p.ID,
		URL:          proposalURL(p.ID),
		ToolTitle:    h.toolTitle(p.Tool),
		Tool:         p.Tool,
		Target:       visible.Reveal(target(p), visible.Strict).Shown,
		Status:       statusBadge(p.Status),
		Tier:         tierBadge(p.Tier),
		Requester:    p.AgentName,
		Created:      h.formatTime(p.CreatedAt),
		Updated:      h.formatTime(p.UpdatedAt),
		Receipt:      h.receipt(p),
		RevokeAction: proposalURL(p.ID) + "/revoke",
		CanRevoke:    canRevoke(p, viewer, h.clock.Now()),
	}
	for _, d := range p.Approvals() {
		it.Approvers = append(it.Approvers, d.UserName+" ("+amrText(d.AMR)+") · "+h.enrolmentText(d.Decider))
		if len(d.Evidence) > 0 {
			it.Evidence = append(it.Evidence, h.evidenceView(ctx, p, d))
		}
	}
	for _, d := range p.Decisions {
		if d.Kind == models.DecisionDecline {
			it.Decliners = append(it.Decliners, history.Decline{Who: d.UserName, Reason: visible.Reveal(d.Reason, visible.FreeText).Shown})
		}
	}
	return it
}

// evidenceView shows an approval's security-key evidence, re-verified
// against the proposal as stored and against the approver's registered keys
// (stepup.Service.CheckEvidence): anyone reading the history sees whether
// the approver's own key really signed this proposal's digest. The evidence
// carries its own public key, so a signature that merely verifies proves
// nothing about whose key it is; without the step-up service the page says
// so rather than claim it.
func (h *Pages) evidenceView(ctx context.Context, p *models.Proposal, d models.Decision) history.Evidence {
	who := d.UserName
	if who == "" {
		who = d.UserID
	}
	v := history.Evidence{Who: who}
	ev, err := stepup.ParseEvidence(d.Evidence)
	if err != nil {
		v.Check = ui.Badge{Text: "the evidence cannot be read: " + models.ErrorMessage(err), Symbol: "✗", Tone: "bad"}
		return v
	}
	v.KeyName, v.CredentialID = ev.KeyName, ev.CredentialID
	v.SignCount = fmt.Sprint(ev.SignCount)
	v.UserVerified = "no"
	if ev.UserVerified {
		v.UserVerified = "yes"
	}
	v.Challenge, v.Nonce, v.Origin, v.RPID = ev.Challenge, ev.Nonce, ev.Origin, ev.RPID
	if h.stepUp == nil {
		if err := stepup.VerifyEvidence(p, d.Evidence); err != nil {
			v.Check = ui.Badge{Text: "does not verify: " + models.ErrorMessage(err), Symbol: "✗", Tone: "bad"}
		} else {
			v.Check = ui.Badge{Text: "the signature verifies, but whose key made it cannot be checked here", Symbol: "?", Tone: "warn"}
		}
		return v
	}
	if _, err := h.stepUp.CheckEvidence(ctx, p, d); err != nil {
		v.Check = ui.Badge{Text: "does not verify: " + models.ErrorMessage(err), Symbol: "✗", Tone: "bad"}
	} else {
		v.Check = ui.Badge{Text: "the signature verifies: this key, registered to " + who +
			", signed the challenge of this proposal and digest", Symbol: "✓", Tone: "ok"}
	}
	return v
}
