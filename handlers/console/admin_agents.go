package console

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/views/admin"
	"github.com/countersign/countersign/web/session"
)

// Agents handles GET /admin/agents: every agent of the tenant with its
// owner, creation time and revocation, and the create form.
func (h *AdminHandlers) Agents(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	notice := ""
	if c.QueryParam("revoked") != "" {
		notice = "The agent's key was revoked; it no longer works."
	}
	return h.agentsPage(c, s, http.StatusOK, admin.AgentForm{}, "", notice)
}

func (h *AdminHandlers) agentsPage(c echo.Context, s *session.Session, status int, form admin.AgentForm, formErr, notice string) error {
	ctx := c.Request().Context()
	agents, err := h.svc.ListAgents(ctx, s.User)
	if err != nil {
		return err
	}
	users, err := h.svc.ListUsers(ctx, s.User)
	if err != nil {
		return err
	}
	names := make(map[string]string, len(users))
	p := admin.AgentsPage{Layout: h.frame(s, "Agents", "agents"), Form: form, Error: formErr, Notice: notice}
	for _, u := range users {
		names[u.ID] = u.Name
		if !u.Disabled {
			p.Owners = append(p.Owners, admin.Option{Value: u.ID, Label: u.Name})
		}
	}
	for _, a := range agents {
		row := admin.AgentRow{ID: a.ID, Name: a.Name, Owner: names[a.OwnerUserID], Created: h.when(a.CreatedAt)}
		if a.RevokedAt != nil {
			row.Revoked = h.when(*a.RevokedAt)
		}
		p.Agents = append(p.Agents, row)
	}
	return render(c, status, admin.Agents(p))
}

// CreateAgent handles POST /admin/agents: creates the agent and shows its
// API key, once, on a page that is never cached. A bad or taken name
// re-renders the form with the reason.
func (h *AdminHandlers) CreateAgent(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	form := admin.AgentForm{Name: c.FormValue("name"), Owner: c.FormValue("owner")}
	a, key, err := h.svc.CreateAgent(c.Request().Context(), s.User, form.Name, form.Owner)
	if formRefusal(err) {
		return h.agentsPage(c, s, statusOf(err), form, models.ErrorMessage(err), "")
	}
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return render(c, http.StatusOK, admin.AgentKey(admin.AgentKeyPage{
		Layout: h.frame(s, "API key for "+a.Name, "agents"), AgentName: a.Name, Key: key}))
}

// RevokeAgent handles POST /admin/agents/{id}/revoke and returns to the
// list. Another tenant's agent is not found.
func (h *AdminHandlers) RevokeAgent(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	if _, err := h.svc.RevokeAgent(c.Request().Context(), s.User, c.Param("id")); err != nil {
		return err
	}
	return seeOther(c, "/admin/agents?revoked=1")
}
