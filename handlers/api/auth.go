package api

import (
	"errors"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
)

// errNoAgent is a wiring bug: a route needing an agent served without RequireAgent.
var errNoAgent = errors.New("api: route registered without RequireAgent")

// agentKey is where RequireAgent leaves the authenticated agent.
const agentKey = "countersign.api.agent"

// RequireAgent authenticates the caller from "Authorization: Bearer <key>"
// and stores the agent for the handlers. A missing, malformed or unknown key
// is EUnauthenticated, answered with a WWW-Authenticate challenge (RFC 6750).
func (h *Handlers) RequireAgent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key, err := bearerKey(c.Request().Header.Get(echo.HeaderAuthorization))
		if err != nil {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="countersign"`)
			return err
		}
		agent, err := h.p.AuthenticateAgent(c.Request().Context(), key)
		if err != nil {
			if models.IsCode(err, models.EUnauthenticated) {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="countersign", error="invalid_token"`)
			}
			return err
		}
		c.Set(agentKey, agent)
		return next(c)
	}
}

// bearerKey extracts the key of a Bearer Authorization header. The scheme is
// case-insensitive (RFC 9110); the key is one non-empty token.
func bearerKey(header string) (string, error) {
	if header == "" {
		return "", models.Errorf(models.EUnauthenticated, "missing Authorization header; send \"Authorization: Bearer <agent key>\"")
	}
	scheme, key, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", models.Errorf(models.EUnauthenticated, "Authorization header must use the Bearer scheme")
	}
	key = strings.TrimSpace(key)
	if key == "" || strings.ContainsAny(key, " \t") {
		return "", models.Errorf(models.EUnauthenticated, "malformed Bearer credentials")
	}
	return key, nil
}

// AgentFrom returns the agent RequireAgent authenticated, for the layers
// served behind it (MCP).
func AgentFrom(c echo.Context) (models.Agent, error) { return agentFrom(c) }

// agentFrom returns the agent RequireAgent authenticated. A route registered
// without RequireAgent is a wiring bug, reported as an internal error rather
// than served anonymously.
func agentFrom(c echo.Context) (models.Agent, error) {
	agent, ok := c.Get(agentKey).(models.Agent)
	if !ok || agent.ID == "" {
		return models.Agent{}, models.Wrap(models.EInternal, errNoAgent, "internal error")
	}
	return agent, nil
}
