package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// maxListLimit mirrors writes.ListQuery's documented bound.
const maxListLimit = 100

// ListProposals handles GET /api/v1/proposals?status=a,b&tool=&tier=&agent=&limit=&cursor=:
// the calling agent's own proposals, newest first; for an agent with
// tenant-wide read (--read-all), the tenant's, or one agent's with
// ?agent=ID (writes.Service.AgentList decides what an agent may list).
func (h *Handlers) ListProposals(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	q := writes.ListQuery{
		AgentID: c.QueryParam("agent"),
		Tool:    c.QueryParam("tool"),
		Tier:    c.QueryParam("tier"),
		Cursor:  c.QueryParam("cursor"),
		// An item's approvals are counted as GET shows them.
		WithDecisions: true,
	}
	if q.Statuses, err = statusesParam(c.QueryParam("status")); err != nil {
		return err
	}
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return models.Errorf(models.EInvalidRequest, "limit must be a whole number from 1 to %d", maxListLimit)
		}
		q.Limit = n
	}
	page, err := h.p.AgentList(c.Request().Context(), agent, q)
	if err != nil {
		return err
	}
	now := h.clock.Now()
	out := listResponse{Items: make([]proposalJSON, 0, len(page.Items))}
	for _, p := range page.Items {
		out.Items = append(out.Items, newProposalJSON(p, agent, now))
	}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	return c.JSON(http.StatusOK, out)
}

// statusesParam parses a comma-separated list of proposal states; an unknown
// one is an error rather than an empty result.
func statusesParam(v string) ([]models.Status, error) {
	if v == "" {
		return nil, nil
	}
	var out []models.Status
	for s := range strings.SplitSeq(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		st := models.Status(s)
		if !st.Valid() {
			return nil, models.Errorf(models.EInvalidRequest, "unknown status %q", s)
		}
		out = append(out, st)
	}
	return out, nil
}
