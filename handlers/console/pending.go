package console

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/protocol"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/views/pending"
	"github.com/countersign/countersign/web/session"
)

// pendingQuery is the pending list's query string: ?tool=&tier=&cursor=.
type pendingQuery struct {
	Tool, Tier, Cursor string
}

func readPendingQuery(c echo.Context) pendingQuery {
	return pendingQuery{Tool: c.QueryParam("tool"), Tier: c.QueryParam("tier"), Cursor: c.QueryParam("cursor")}
}

// Pending serves GET /: the proposals awaiting confirmation, newest first,
// filtered by ?tool= and ?tier=, one keyset page at a time (?cursor=).
func (h *Pages) Pending(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	q := readPendingQuery(c)
	rows, tiers, err := h.pendingRows(c, s, q)
	if err != nil {
		return err
	}
	filter := pending.Filter{Tool: q.Tool, Tier: q.Tier, Tiers: tiers}
	for _, t := range h.p.Registry().Tools() {
		filter.Tools = append(filter.Tools, pending.Option{Value: t.Name, Label: t.Title})
	}
	page := pending.Page{
		Layout:  h.frame(s, "Pending proposals", "pending"),
		Filter:  filter,
		Rows:    rows,
		RowsURL: withQuery("/pending/rows", "tool", q.Tool, "tier", q.Tier, "cursor", q.Cursor),
	}
	noStore(c)
	return render(c, http.StatusOK, pending.View(page))
}

// PendingRows serves GET /pending/rows, the htmx partial of the list (rows
// and pagination) that the page re-fetches whenever proposals change.
func (h *Pages) PendingRows(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	rows, _, err := h.pendingRows(c, s, readPendingQuery(c))
	if err != nil {
		return err
	}
	noStore(c)
	return render(c, http.StatusOK, pending.RowsView(rows))
}

// pendingRows loads one page of pending proposals and maps it; it also
// returns the tier names seen, as suggestions for the filter.
func (h *Pages) pendingRows(c echo.Context, s *session.Session, q pendingQuery) (pending.Rows, []string, error) {
	res, err := h.p.List(c.Request().Context(), s.User.TenantID, protocol.ListQuery{
		Statuses: []models.Status{models.StatusAwaitingConfirmation},
		Tool:     q.Tool, Tier: q.Tier, Cursor: q.Cursor, Limit: pendingPageSize,
	})
	if err != nil {
		return pending.Rows{}, nil, err
	}
	now := h.clock.Now()
	rows := pending.Rows{
		Filtered: q.Tool != "" || q.Tier != "",
		Updated:  h.formatTime(now),
		Empty:    h.emptyState(c),
	}
	if res.Next != "" {
		rows.OlderURL = withQuery("/", "tool", q.Tool, "tier", q.Tier, "cursor", res.Next)
	}
	if q.Cursor != "" {
		rows.FirstURL = withQuery("/", "tool", q.Tool, "tier", q.Tier)
	}
	var tiers []string
	if q.Tier != "" {
		tiers = append(tiers, q.Tier)
	}
	for _, p := range res.Items {
		rows.Items = append(rows.Items, h.pendingRow(p, now))
		if !slices.Contains(tiers, p.Tier.Name) {
			tiers = append(tiers, p.Tier.Name)
		}
	}
	slices.Sort(tiers)
	return rows, tiers, nil
}

func (h *Pages) pendingRow(p *models.Proposal, now time.Time) pending.Row {
	row := pending.Row{
		URL:        proposalURL(p.ID),
		ToolTitle:  h.toolTitle(p.Tool),
		Tool:       p.Tool,
		Tier:       tierBadge(p.Tier),
		Requester:  p.AgentName,
		Created:    h.formatTime(p.CreatedAt),
		CreatedISO: p.CreatedAt.UTC().Format(time.RFC3339),
		Expires:    h.countdown(p.ExpiresAt, now),
	}
	row.Expires.Compact = true
	var seen revealer
	row.Target = seen.show(target(p), visible.Strict)
	// The key value is the first argument that is not the target itself:
	// the amount of a refund, the template of an email, the ids of a batch.
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
		if f.Name != resourceField {
			row.SummaryLabel, row.Summary = f.Label, seen.show(f.Display, visible.Strict)
			break
		}
	}
	// The row shows only part of the proposal: warn when any argument
	// or the context hides something, not only the part shown.
	for _, f := range h.preview(p) {
		seen.show(string(f.Value), visible.Strict)
	}
	seen.show(p.Context, visible.FreeText)
	row.HiddenWarning = visible.Warning(seen.found)
	return row
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
