package api

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

type proposeRequest struct {
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
	RequestKey string          `json:"request_key"`
	Context    string          `json:"context"`
}

// Propose handles POST /api/v1/proposals: 201 with Location for a new
// proposal, 200 when an idempotent retry returned the existing one.
// Arguments are passed on raw: the registry normalizes and validates them.
func (h *Handlers) Propose(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	var req proposeRequest
	if err := h.decodeJSON(c, &req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	p, created, err := h.p.Propose(c.Request().Context(), agent, writes.ProposeInput{
		Tool:       req.Tool,
		Arguments:  req.Arguments,
		RequestKey: req.RequestKey,
		Context:    req.Context,
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		c.Response().Header().Set(echo.HeaderLocation, h.baseURL+"/api/v1/proposals/"+p.ID)
	}
	c.Response().Header().Set("ETag", etag(p))
	return c.JSON(status, newProposalJSON(p, agent, h.clock.Now()))
}

func (r *proposeRequest) validate() error {
	if r.Tool == "" {
		return models.Errorf(models.EInvalidRequest, "field \"tool\" is required")
	}
	args := bytes.TrimSpace(r.Arguments)
	if len(args) == 0 {
		return models.Errorf(models.EInvalidRequest, "field \"arguments\" is required and must be a JSON object")
	}
	if args[0] != '{' {
		return models.Errorf(models.EInvalidRequest, "field \"arguments\" must be a JSON object")
	}
	r.Arguments = args
	// request_key and context are checked by the protocol, the one place
	// their limits live.
	return nil
}
