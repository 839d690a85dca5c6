package api

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
)

// Events is what the webhook and event-stream routes need from the domain
// (*events.Service).
type Events interface {
	// RegisterEndpoint returns the endpoint and its signing secret, shown
	// once (EInvalidRequest for a URL that is not http(s) or when the agent
	// has as many endpoints as it may; EAlreadyExists for a URL it has an
	// endpoint for). actor, here the agent itself, is who the audit entry
	// names.
	RegisterEndpoint(ctx context.Context, actor string, sc models.EndpointScope, url, description string) (models.WebhookEndpoint, string, error)
	Endpoints(ctx context.Context, sc models.EndpointScope) ([]models.WebhookEndpoint, error)
	// DisableEndpoint answers ENotFound outside the scope.
	DisableEndpoint(ctx context.Context, actor string, sc models.EndpointScope, id string) error
	// OpenStream follows the agent's events (EInvalidRequest for an
	// unknown Last-Event-ID).
	OpenStream(ctx context.Context, agent models.Agent, lastEventID string) (*events.Stream, error)
}

var _ Events = (*events.Service)(nil)

// HasEvents reports whether the webhook and event-stream routes are served.
func (h *Handlers) HasEvents() bool { return h.events != nil }

type endpointJSON struct {
	ID          string  `json:"id"`
	URL         string  `json:"url"`
	Description string  `json:"description"`
	Scope       string  `json:"scope"`
	CreatedAt   string  `json:"created_at"`
	DisabledAt  *string `json:"disabled_at"`
	// Secret is present once, in the answer to the registration.
	Secret string `json:"secret,omitempty"`
}

func newEndpointJSON(ep models.WebhookEndpoint) endpointJSON {
	j := endpointJSON{ID: ep.ID, URL: ep.URL, Description: ep.Description, Scope: "agent", CreatedAt: timestamp(ep.CreatedAt)}
	if ep.AgentID == "" {
		j.Scope = "tenant"
	}
	if ep.DisabledAt != nil {
		j.DisabledAt = optionalTimestamp(*ep.DisabledAt)
	}
	return j
}

func scopeOf(agent models.Agent) models.EndpointScope {
	return models.EndpointScope{TenantID: agent.TenantID, AgentID: agent.ID}
}

// CreateWebhook handles POST /api/v1/webhooks {"url", "description"}: the
// agent registers an endpoint for its own proposals' events. The answer
// (201) carries the signing secret, the only time it is shown.
func (h *Handlers) CreateWebhook(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	var in struct {
		URL         string `json:"url"`
		Description string `json:"description"`
	}
	if err := h.decodeJSON(c, &in); err != nil {
		return err
	}
	ep, secret, err := h.events.RegisterEndpoint(c.Request().Context(), agent.ID, scopeOf(agent), in.URL, in.Description)
	if err != nil {
		return err
	}
	out := newEndpointJSON(ep)
	out.Secret = secret
	c.Response().Header().Set(echo.HeaderLocation, h.baseURL+"/api/v1/webhooks/"+ep.ID)
	return c.JSON(http.StatusCreated, out)
}

// ListWebhooks handles GET /api/v1/webhooks[?include=disabled]: the
// agent's own endpoints, without secrets; deleted (disabled) ones only when
// asked for.
func (h *Handlers) ListWebhooks(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	var disabled bool
	switch v := c.QueryParam("include"); v {
	case "":
	case "disabled":
		disabled = true
	default:
		return models.Errorf(models.EInvalidRequest, "include=%q: the only value is disabled", v)
	}
	eps, err := h.events.Endpoints(c.Request().Context(), scopeOf(agent))
	if err != nil {
		return err
	}
	out := struct {
		Items []endpointJSON `json:"items"`
	}{Items: []endpointJSON{}}
	for _, ep := range eps {
		if ep.DisabledAt == nil || disabled {
			out.Items = append(out.Items, newEndpointJSON(ep))
		}
	}
	return c.JSON(http.StatusOK, out)
}

// DeleteWebhook handles DELETE /api/v1/webhooks/{id}: no further events go
// to the endpoint (204). Other agents' endpoints are not found.
func (h *Handlers) DeleteWebhook(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	if err := h.events.DisableEndpoint(c.Request().Context(), agent.ID, scopeOf(agent), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
