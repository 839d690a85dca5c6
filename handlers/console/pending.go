package console

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/views/pending"
	"github.com/countersign/countersign/web/session"
)

// pendingQuery is the pending list's query string:
// ?tool=&tier=&sort=&cursor=. sort is "newest"; anything else is by time
// left, soonest first.
type pendingQuery struct {
	Tool, Tier, Sort, Cursor string
}

func readPendingQuery(c echo.Context) pendingQuery {
	q := pendingQuery{Tool: c.QueryParam("tool"), Tier: c.QueryParam("tier"), Sort: c.QueryParam("sort"), Cursor: c.QueryParam("cursor")}
	if q.Sort != "newest" {
		q.Sort = ""
	}
	return q
}

// Pending serves GET /: the proposals awaiting confirmation, by time left
// (or ?sort=newest), filtered by ?tool= and ?tier=, one keyset page at a
// time (?cursor=).
func (h *Pages) Pending(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	q := readPendingQuery(c)
	rows, err := h.pendingRows(c, s, q)
	if err != nil {
		return err
	}
	filter := pending.Filter{Tool: q.Tool, Tier: q.Tier, Sort: q.Sort, Tiers: h.p.Registry().Tiers()}
	if q.Tier != "" && !slices.Contains(filter.Tiers, q.Tier) {
		// A tier of an older registry still filters what it named.
		filter.Tiers = append(filter.Tiers, q.Tier)
	}
	for _, t := range h.p.Registry().Tools() {
		filter.Tools = append(filter.Tools, pending.Option{Value: t.Name, Label: t.Title})
	}
	page := pending.Page{
		Layout:  h.frame(s, rows.Title, "pending"),
		Filter:  filter,
		Rows:    rows,
		RowsURL: withQuery("/pending/rows", "tool", q.Tool, "tier", q.Tier, "sort", q.Sort, "cursor", q.Cursor),
	}
	noStore(c)
	return render(c, http.StatusOK, pending.View(page))
}

// PendingRows serves GET /pending/rows, the htmx partial of the list (rows,
// pagination and the tab's title with the count) that the page re-fetches
// whenever proposals change.
func (h *Pages) PendingRows(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	rows, err := h.pendingRows(c, s, readPendingQuery(c))
	if err != nil {
		return err
	}
	noStore(c)
	return render(c, http.StatusOK, pending.RowsUpdate(rows))
}

// pendingRows loads one page of pending proposals and maps it.
func (h *Pages) pendingRows(c echo.Context, s *session.Session, q pendingQuery) (pending.Rows, error) {
	ctx := c.Request().Context()
	res, err := h.p.List(ctx, s.User.TenantID, writes.ListQuery{
		Statuses: []models.Status{models.StatusAwaitingConfirmation},
		Tool:     q.Tool, Tier: q.Tier, ByTimeLeft: q.Sort == "", WithDecisions: true,
		Cursor: q.Cursor, Limit: pendingPageSize,
	})
	if err != nil {
		return pending.Rows{}, err
	}
	count, err := h.p.CountAwaiting(ctx, s.User.TenantID)
	if err != nil {
		return pending.Rows{}, err
	}
	now := h.clock.Now()
	rows := pending.Rows{
		Filtered: q.Tool != "" || q.Tier != "",
		Newest:   q.Sort == "newest",
		Count:    count,
		Title:    fmt.Sprintf("(%d) Pending proposals", count),
		Updated:  h.formatTime(now),
		Empty:    h.emptyState(c),
	}
	if res.Next != "" {
		rows.OlderURL = withQuery("/", "tool", q.Tool, "tier", q.Tier, "sort", q.Sort, "cursor", res.Next)
	}
	if q.Cursor != "" {
		rows.FirstURL = withQuery("/", "tool", q.Tool, "tier", q.Tier, "sort", q.Sort)
	}
	shared := models.SharedTargets(res.Items)
	for _, p := range res.Items {
		row := h.pendingRow(p, s.User, now)
		if n := shared[p.Target()]; n > 1 {
			row.SharedHint = fmt.Sprintf("%d pending proposals write to %s", n, targetID(p))
		}
		rows.Items = append(rows.Items, row)
	}
	return rows, nil
}

// reasonExcerpt bounds the reason shown in a list row.
const reasonExcerpt = 90

func (h *Pages) pendingRow(p *models.Proposal, u models.User, now time.Time) pending.Row {
	have, need := p.ApprovalCount()
	row := pending.Row{
		ID:         p.ID,
		URL:        proposalURL(p.ID),
		ToolTitle:  h.toolTitle(p.Tool),
		Tool:       p.Tool,
		TargetID:   visible.Reveal(targetID(p), visible.Strict).Shown,
		Tier:       tierBadge(p.Tier),
		Quorum:     fmt.Sprintf("%d of %d", have, need),
		Requester:  p.AgentName,
		Owner:      p.AgentOwnerName,
		Created:    h.formatTime(p.CreatedAt),
		CreatedISO: p.CreatedAt.UTC().Format(time.RFC3339),
		Expires:    h.countdown(p.ExpiresAt, now),
	}
	row.Expires.Compact = true
	if p.OwnedBy(u.ID) && !p.MayApprove(u.ID) {
		row.OwnNote = "You own this agent, another reviewer must decide."
	}
	var seen revealer
	row.Target = seen.show(target(p), visible.Strict)
	// The key value is the first argument that is not the target itself
	// nor the reason: the amount of a refund, the template of an email,
	// the ids of a batch.
	resourceField := ""
	if t, ok := h.p.Registry().Tool(p.Tool); ok && !t.Batch {
		resourceField = t.ResourceField
	}
	if p.Kind == models.KindMandate {
		// A mandate's key value is its bound, after tool, agents and tiers.
		row.ToolTitle, resourceField = "Standing mandate: "+row.ToolTitle, "tool"
	}
	for _, f := range h.preview(p) {
		if p.Kind == models.KindMandate && (f.Name == "agents" || f.Name == "tiers") {
			continue
		}
		switch {
		case f.Name == "reason":
			row.Reason = excerpt(seen.show(f.Display, visible.FreeText), reasonExcerpt)
		case f.Name != resourceField && row.Summary == "":
			row.SummaryLabel, row.Summary = f.Label, seen.show(f.Display, visible.Strict)
		}
	}
	if row.Reason == "" && p.Context != "" {
		row.Reason = excerpt(visible.Reveal(p.Context, visible.FreeText).Shown, reasonExcerpt)
	}
	// The row shows only part of the proposal: warn when any argument
	// or the context hides something, not only the part shown.
	tool, known := h.p.Registry().Tool(p.Tool)
	for _, f := range h.preview(p) {
		mode := visible.Strict
		if known && tool.TextField(f.Name) {
			mode = visible.FreeText // its line breaks are what it says, as on the proposal page
		}
		seen.showJSON(string(f.Value), mode)
	}
	seen.show(p.Context, visible.FreeText)
	row.HiddenWarning = visible.Warning(seen.found)
	return row
}

// targetID is the target as an identifier: the resource id, or for a batch
// the number of ids.
func targetID(p *models.Proposal) string {
	if p.Batch() {
		return fmt.Sprintf("%d ids", p.ResourceCount)
	}
	return p.Resource
}

// excerpt shortens s to at most n characters on a word boundary, on one
// line.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	cut := string(r[:n])
	if i := strings.LastIndex(cut, " "); i > n/2 {
		cut = cut[:i]
	}
	return cut + "…"
}

// emptyState tells a reviewer with nothing to do how work arrives.
func (h *Pages) emptyState(c echo.Context) pending.Empty {
	e := pending.Empty{Endpoint: "POST /api/v1/proposals"}
	tools := h.p.Registry().Tools()
	for _, t := range tools {
		e.Tools = append(e.Tools, pending.Option{Value: t.Name, Label: t.Title})
	}
	tool, args := "TOOL_NAME", `{…}`
	if len(tools) > 0 {
		tool = tools[0].Name
	}
	if _, ok := h.p.Registry().Tool("refund_order"); ok {
		// With the demo registry the example works as it stands.
		tool = "refund_order"
		args = `{"order_id": "ord_1001", "amount_minor": 19900, "currency": "CNY", "reason": "damaged on arrival"}`
	}
	origin := c.Scheme() + "://" + c.Request().Host
	e.Curl = fmt.Sprintf(`curl -X POST %s/api/v1/proposals \
  -H "Authorization: Bearer $COUNTERSIGN_AGENT_KEY" \
  -H "Content-Type: application/json" \
  -d '{"tool": %q, "arguments": %s,
       "context": "why the agent wants this, for the reviewer"}'`, origin, tool, args)
	return e
}

// Events serves GET /events, the server-sent events that keep the pending
// list live: an event named "proposals" whenever a proposal changes, and a
// comment every 15 s so that idle connections stay open. It ends when the
// client goes away. Only changes of the reviewer's own tenant send an event,
// so another tenant's activity is not even visible as timing. Events carry
// no data about any proposal: the page re-fetches its rows, which are scoped
// to the reviewer's tenant.
func (h *Pages) Events(c echo.Context) error {
	sess, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(sess)
	ctx := c.Request().Context()
	w := c.Response()
	rc := http.NewResponseController(w)
	// Subscribe before answering, so that no change after the first byte is
	// missed.
	changed := h.p.WaitAny(sess.Tenant.ID)
	w.Header().Set(echo.HeaderContentType, "text/event-stream")
	w.Header().Set(echo.HeaderCacheControl, "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	send := func(msg string) error {
		// The server's write timeout is meant for ordinary responses; each
		// message gets its own deadline instead. (Not every writer supports
		// deadlines; then the server's timeout stays.)
		_ = rc.SetWriteDeadline(time.Now().Add(h.heartbeat + 10*time.Second))
		if _, err := fmt.Fprint(w, msg); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := send(": connected\nretry: 5000\n\n"); err != nil {
		return nil // the client is gone
	}
	beat := time.NewTicker(h.heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			changed = h.p.WaitAny(sess.Tenant.ID)
			if err := send("event: proposals\ndata: changed\n\n"); err != nil {
				return nil
			}
		case <-beat.C:
			if err := send(": heartbeat\n\n"); err != nil {
				return nil
			}
		}
	}
}
