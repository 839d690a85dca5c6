package console

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/admin"
	"github.com/countersign/countersign/web/session"
)

// WebhookService is what the webhook admin pages need from the domain
// (*events.Service). Scopes and tenant ids come from the signed-in
// administrator's session; other tenants' ids are not found. The changes
// take the administrator's user id as actor, whom their audit entries name.
type WebhookService interface {
	RegisterEndpoint(ctx context.Context, actor string, sc models.EndpointScope, url, description string) (models.WebhookEndpoint, string, error)
	Endpoints(ctx context.Context, sc models.EndpointScope) ([]models.WebhookEndpoint, error)
	DisableEndpoint(ctx context.Context, actor string, sc models.EndpointScope, id string) error
	Deliveries(ctx context.Context, tenantID, target string, limit int) ([]models.Delivery, error)
	Delivery(ctx context.Context, tenantID, deliveryID string) (models.Delivery, error)
	Attempts(ctx context.Context, tenantID, deliveryID string) ([]models.DeliveryAttempt, error)
	Redeliver(ctx context.Context, actor, tenantID, deliveryID string) error
}

var _ WebhookService = (*events.Service)(nil)

// Webhooks serve the administrators' webhook pages: the endpoints, the
// delivery log and redelivery. Build them with NewWebhooks.
type Webhooks struct {
	*AdminHandlers
	svc WebhookService
}

// as returns the webhook pages as admin s reads them.
func (h *Webhooks) as(s *session.Session) *Webhooks {
	c := *h
	c.AdminHandlers = h.AdminHandlers.as(s)
	return &c
}

// NewWebhooks returns the webhook pages; admin supplies the agent names
// and the page frame.
func NewWebhooks(svc WebhookService, adminSvc AdminService, assets *static.Assets) *Webhooks {
	return &Webhooks{AdminHandlers: NewAdminHandlers(adminSvc, assets), svc: svc}
}

// tenantScope is the administrator's whole tenant. The routes run
// RequireAdmin; the role is checked again here because the event service
// itself does not know about roles.
func tenantScope(s *session.Session) (models.EndpointScope, error) {
	if s.User.Role != models.RoleAdmin {
		return models.EndpointScope{}, models.Errorf(models.EForbidden, "only administrators manage webhooks")
	}
	return models.EndpointScope{TenantID: s.User.TenantID}, nil
}

// Page handles GET /admin/webhooks.
func (h *Webhooks) Page(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	notice := ""
	switch {
	case c.QueryParam("disabled") != "":
		notice = "The endpoint was disabled; nothing more is sent to it."
	case c.QueryParam("redelivered") != "":
		notice = "The delivery is due again and goes out within seconds."
	}
	return h.page(c, s, http.StatusOK, admin.WebhookForm{}, "", notice)
}

func (h *Webhooks) page(c echo.Context, s *session.Session, status int, form admin.WebhookForm, formErr, notice string) error {
	ctx := c.Request().Context()
	sc, err := tenantScope(s)
	if err != nil {
		return err
	}
	eps, err := h.svc.Endpoints(ctx, sc)
	if err != nil {
		return err
	}
	agents, err := h.AdminHandlers.svc.ListAgents(ctx, s.User)
	if err != nil {
		return err
	}
	agentName := map[string]string{}
	for _, a := range agents {
		agentName[a.ID] = a.Name
	}
	urls := map[string]string{}
	p := admin.WebhooksPage{Layout: h.frame(s, "Webhooks", "webhooks"), Form: form, Error: formErr, Notice: notice}
	for _, ep := range eps {
		urls[ep.ID] = ep.URL
		row := admin.EndpointRow{ID: ep.ID, URL: ep.URL, Description: ep.Description, Scope: "Whole organization",
			Created: h.when(ep.CreatedAt)}
		if ep.AgentID != "" {
			row.Scope = "Agent " + agentName[ep.AgentID]
		}
		if ep.DisabledAt != nil {
			row.Disabled = h.when(*ep.DisabledAt)
		}
		p.Endpoints = append(p.Endpoints, row)
	}
	ds, err := h.svc.Deliveries(ctx, sc.TenantID, "", 50)
	if err != nil {
		return err
	}
	for _, d := range ds {
		p.Deliveries = append(p.Deliveries, h.deliveryRow(d, urls))
	}
	return render(c, status, admin.Webhooks(p))
}

func (h *Webhooks) deliveryRow(d models.Delivery, urls map[string]string) admin.DeliveryRow {
	row := admin.DeliveryRow{ID: d.ID, EventID: d.Event.ID, EventType: string(d.Event.Type), ProposalID: d.Event.ProposalID,
		Destination: d.Channel, Status: string(d.Status), Attempts: d.Attempts, LastCode: d.LastCode,
		LastError: d.LastError, Created: h.when(d.CreatedAt)}
	if d.Channel == models.ChannelWebhook {
		row.Destination = urls[d.Target]
	}
	if d.Status == models.DeliveryPending && d.Attempts > 0 {
		row.Next = d.NextAttemptAt.In(h.loc).Format(time.TimeOnly)
	}
	return row
}

// Delivery handles GET /admin/deliveries/{id}: one delivery and every
// attempt made. Other tenants' deliveries are not found.
func (h *Webhooks) Delivery(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	sc, err := tenantScope(s)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	d, err := h.svc.Delivery(ctx, sc.TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	attempts, err := h.svc.Attempts(ctx, sc.TenantID, d.ID)
	if err != nil {
		return err
	}
	urls := map[string]string{}
	if d.Channel == models.ChannelWebhook {
		eps, err := h.svc.Endpoints(ctx, sc)
		if err != nil {
			return err
		}
		for _, ep := range eps {
			urls[ep.ID] = ep.URL
		}
	}
	p := admin.DeliveryPage{Layout: h.frame(s, "Delivery", "webhooks"), Delivery: h.deliveryRow(d, urls)}
	for _, a := range attempts {
		p.Attempts = append(p.Attempts, admin.AttemptRow{Attempt: a.Attempt, At: h.when(a.At), StatusCode: a.StatusCode,
			Error: a.Error, Duration: a.Duration.String()})
	}
	return render(c, http.StatusOK, admin.Delivery(p))
}

// Create handles POST /admin/webhooks: registers a tenant-wide endpoint and
// shows its signing secret, once, on a page that is never cached.
func (h *Webhooks) Create(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	sc, err := tenantScope(s)
	if err != nil {
		return err
	}
	form := admin.WebhookForm{URL: c.FormValue("url"), Description: c.FormValue("description")}
	ep, secret, err := h.svc.RegisterEndpoint(c.Request().Context(), s.User.ID, sc, form.URL, form.Description)
	if formRefusal(err) {
		return h.page(c, s, statusOf(err), form, models.ErrorMessage(err), "")
	}
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	return render(c, http.StatusOK, admin.WebhookSecret(admin.WebhookSecretPage{
		Layout: h.frame(s, "Signing secret", "webhooks"), URL: ep.URL, Secret: secret}))
}

// Disable handles POST /admin/webhooks/{id}/disable.
func (h *Webhooks) Disable(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	sc, err := tenantScope(s)
	if err != nil {
		return err
	}
	if err := h.svc.DisableEndpoint(c.Request().Context(), s.User.ID, sc, c.Param("id")); err != nil {
		return err
	}
	return seeOther(c, "/admin/webhooks?disabled=1")
}

// Redeliver handles POST /admin/deliveries/{id}/redeliver: the delivery is
// due again at once, with the same webhook-id.
func (h *Webhooks) Redeliver(c echo.Context) error {
	s, err := h.admin(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	sc, err := tenantScope(s)
	if err != nil {
		return err
	}
	if err := h.svc.Redeliver(c.Request().Context(), s.User.ID, sc.TenantID, c.Param("id")); err != nil {
		return err
	}
	return seeOther(c, "/admin/webhooks?redelivered=1")
}
