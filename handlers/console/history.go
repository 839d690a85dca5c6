package console

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/views/history"
	"github.com/countersign/countersign/views/ui"
)

// History serves GET /history: the proposals that left the reviewers' queue
// (decided, expired, cancelled, executed), newest first, with what they did,
// what the business system answered, approvers and receipts; filtered by
// ?status=, ?target=, ?agent=, ?reviewer=, ?tool= and ?before= (a date in
// the reviewer's zone: the list starts at the end of that day and goes
// back), paginated by ?cursor=.
func (h *Pages) History(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	status, cursor := c.QueryParam("status"), c.QueryParam("cursor")
	search := history.Search{Target: strings.TrimSpace(c.QueryParam("target")), Agent: strings.TrimSpace(c.QueryParam("agent")),
		Reviewer: strings.TrimSpace(c.QueryParam("reviewer")), Tool: c.QueryParam("tool"), Before: c.QueryParam("before")}
	statuses := historyStatuses
	if status != "" {
		if !slices.Contains(historyStatuses, models.Status(status)) {
			return models.Errorf(models.EInvalidRequest, "the history has no status %q", status)
		}
		statuses = []models.Status{models.Status(status)}
	}
	q := writes.ListQuery{Statuses: statuses, Resource: search.Target, AgentName: search.Agent, ReviewerName: search.Reviewer,
		Tool: search.Tool, Cursor: cursor, Limit: historyPageSize}
	if search.Before != "" {
		day, err := time.ParseInLocation("2006-01-02", search.Before, h.loc)
		if err != nil {
			return models.Errorf(models.EInvalidRequest, "the date %q is not YYYY-MM-DD", search.Before)
		}
		q.Before = day.AddDate(0, 0, 1)
	}
	ctx := c.Request().Context()
	res, err := h.p.List(ctx, s.User.TenantID, q)
	if err != nil {
		return err
	}
	page := history.Page{Layout: h.frame(s, "History", "history"), Status: status, Search: search, CSRF: s.CSRF}
	for _, st := range historyStatuses {
		page.Statuses = append(page.Statuses, history.Option{Value: string(st), Label: statusBadge(st).Text})
	}
	for _, t := range h.p.Registry().Tools() {
		page.Tools = append(page.Tools, history.Option{Value: t.Name, Label: t.Title})
	}
	filters := []string{"status", status, "target", search.Target, "agent", search.Agent, "reviewer", search.Reviewer,
		"tool", search.Tool, "before", search.Before}
	if res.Next != "" {
		page.OlderURL = withQuery("/history", append(filters, "cursor", res.Next)...)
	}
	if cursor != "" {
		page.FirstURL = withQuery("/history", filters...)
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

// resultText says what the business system answered for p, or why nothing
// was written.
func (h *Pages) resultText(p *models.Proposal) string {
	if e := p.Execution; e != nil {
		out := statusBadge(e.Status).Text
		if r := businessResult(e.Result); r != "" {
			out += ": " + r
		}
		if e.ErrorMessage != "" {
			out += " — " + e.ErrorMessage
		}
		return out
	}
	switch p.Status {
	case models.StatusDeclined:
		for _, d := range p.Decisions {
			if d.Kind == models.DecisionDecline {
				return "Declined by " + d.UserName + ": " + d.Reason
			}
		}
	case models.StatusRejected:
		var ms []string
		for _, pr := range p.Problems {
			ms = append(ms, pr.Message)
		}
		return "Refused by the business system: " + strings.Join(ms, "; ")
	}
	return h.settledNote(p, p.Status == models.StatusExpired)
}

// businessResult words an execution's result object: amounts in minor
// units beside a currency become money ("refunded: ¥50.00 CNY"), other
// fields are shown as they are.
func businessResult(raw json.RawMessage) string {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if len(raw) == 0 || dec.Decode(&m) != nil || len(m) == 0 {
		return ""
	}
	cur, _ := m["currency"].(string)
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == "currency" && cur != "" {
			continue
		}
		v := fmt.Sprint(m[k])
		name := strings.ReplaceAll(k, "_", " ")
		if base, ok := strings.CutSuffix(k, "_minor"); ok && cur != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				if money, err := registry.FormatMoney(n, cur); err == nil {
					name, v = strings.ReplaceAll(base, "_", " "), money+" "+cur
				}
			}
		}
		parts = append(parts, name+": "+visible.Reveal(v, visible.Strict).Shown)
	}
	return strings.Join(parts, " · ")
}

func (h *Pages) historyItem(ctx context.Context, p *models.Proposal, viewer models.User) history.Item {
	it := history.Item{
		ID:           p.ID,
		URL:          proposalURL(p.ID),
		ToolTitle:    h.toolTitle(p.Tool),
		Tool:         p.Tool,
		Target:       visible.Reveal(target(p), visible.Strict).Shown,
		Summary:      visible.Reveal(h.summary(p).Line, visible.Strict).Shown,
		Result:       visible.Reveal(h.resultText(p), visible.FreeText).Shown,
		Status:       proposalStatus(p),
		Tier:         tierBadge(p.Tier),
		Requester:    p.AgentName,
		Created:      h.formatTime(p.CreatedAt),
		Updated:      h.formatTime(p.UpdatedAt),
		CreatedISO:   p.CreatedAt.UTC().Format(time.RFC3339),
		UpdatedISO:   p.UpdatedAt.UTC().Format(time.RFC3339),
		Receipt:      h.receipt(p),
		RevokeAction: proposalURL(p.ID) + "/revoke",
		CanRevoke:    canRevoke(p, viewer, h.clock.Now()),
	}
	for _, d := range p.Approvals() {
		it.Approvers = append(it.Approvers, d.UserName+" ("+amrText(d.AMR)+") · "+h.enrolmentText(d.Decider))
		if d.Reason != "" {
			it.Comments = append(it.Comments, history.Decline{Who: d.UserName, Reason: visible.Reveal(d.Reason, visible.FreeText).Shown})
		}
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
