package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/protocol"
)

// Limits on what an agent sends besides the arguments.
const (
	maxRequestKeyLen = 200
	maxContextLen    = 4000 // characters
)

// requestKeyPattern is the alphabet of request keys: they travel as the
// Idempotency-Key header to business systems, so they stay header-safe.
var requestKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

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
	p, created, err := h.p.Propose(c.Request().Context(), agent, protocol.ProposeInput{
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
	if len(r.RequestKey) > maxRequestKeyLen {
		return models.Errorf(models.EInvalidRequest, "field \"request_key\" must be at most %d characters", maxRequestKeyLen)
	}
	if r.RequestKey != "" && !requestKeyPattern.MatchString(r.RequestKey) {
		return models.Errorf(models.EInvalidRequest, "field \"request_key\" may contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'")
	}
	if n := utf8.RuneCountInString(r.Context); n > maxContextLen {
		return models.Errorf(models.EInvalidRequest, "field \"context\" must be at most %d characters, got %d", maxContextLen, n)
	}
	return nil
}
