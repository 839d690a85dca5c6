package console

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/protocol"
	"github.com/countersign/countersign/views/history"
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
		page.Items = append(page.Items, h.historyItem(p, s.User))
	}
	noStore(c)
	return render(c, http.StatusOK, history.View(page))
}

func (h *Pages) historyItem(p *models.Proposal, viewer models.User) history.Item {
	it := history.Item{
		ID:           p.ID,
		URL:          proposalURL(p.ID),
		ToolTitle:    h.toolTitle(p.Tool),
		Tool:         p.Tool,
		Target:       target(p),
		Status:       statusBadge(p.Status),
		Tier:         tierBadge(p.Tier),
		Requester:    p.AgentName,
		Created:      h.formatTime(p.CreatedAt),
		Updated:      h.formatTime(p.UpdatedAt),
		Receipt:      h.receipt(p),
		RevokeAction: proposalURL(p.ID) + "/revoke",
		CanRevoke:    canRevoke(p, viewer),
	}
	for _, d := range p.Approvals() {
		it.Approvers = append(it.Approvers, d.UserName+" ("+amrText(d.AMR)+")")
	}
	for _, d := range p.Decisions {
		if d.Kind == models.DecisionDecline {
			it.Decliners = append(it.Decliners, history.Decline{Who: d.UserName, Reason: d.Reason})
		}
	}
	return it
}
