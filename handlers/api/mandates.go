package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/jsonstrict"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// Mandates is what the standing-mandate endpoints need from the domain
// (*writes.Service).
type Mandates interface {
	// RequestMandate creates a proposal of kind mandate for the agent.
	RequestMandate(ctx context.Context, agent models.Agent, in writes.MandateInput) (*models.Proposal, bool, error)
	// Mandate returns a mandate of the tenant (ENotFound otherwise).
	Mandate(ctx context.Context, tenantID, id string) (models.Mandate, error)
}

// HasMandates reports whether the mandate endpoints are served.
func (h *Handlers) HasMandates() bool { return h.mandates != nil }

type mandateRequest struct {
	Terms      json.RawMessage `json:"terms"`
	RequestKey string          `json:"request_key"`
	Context    string          `json:"context"`
}

// RequestMandate handles POST /api/v1/mandates: the agent asks for a
// standing mandate; the answer is the proposal of kind mandate (201, or 200
// for an idempotent retry) that reviewers confirm like any other.
func (h *Handlers) RequestMandate(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	var req mandateRequest
	if err := h.decodeJSON(c, &req); err != nil {
		return err
	}
	terms, err := mandateTerms(req.Terms)
	if err != nil {
		return err
	}
	p, created, err := h.mandates.RequestMandate(c.Request().Context(), agent,
		writes.MandateInput{Terms: terms, RequestKey: req.RequestKey, Context: req.Context})
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

// mandateTerms decodes a request's terms by the rules of the body around
// them (jsonstrict: a field name in another case, say "TOOL", is refused
// here as at the top level) and refuses the members the server sets
// (models.RefuseServerSetTerms). Errors: EInvalidRequest, their pointers under
// /terms.
func mandateTerms(raw json.RawMessage) (models.MandateTerms, error) {
	var terms models.MandateTerms
	if len(raw) == 0 {
		return terms, &models.Error{Code: models.EInvalidRequest, Message: "field \"terms\" is required",
			Fields: []models.FieldProblem{{Pointer: "/terms", Message: "is required"}}}
	}
	err := jsonstrict.Decode(raw, &terms, "terms object")
	if err == nil {
		err = models.RefuseServerSetTerms(raw)
	}
	var me *models.Error
	if !errors.As(err, &me) {
		return terms, err
	}
	out := &models.Error{Code: models.EInvalidRequest, Message: "the mandate's terms are not valid: " + me.Message, Err: err}
	for _, f := range me.Fields {
		out.Fields = append(out.Fields, models.FieldProblem{Pointer: "/terms" + f.Pointer, Message: f.Message})
	}
	if len(out.Fields) == 0 {
		out.Fields = []models.FieldProblem{{Pointer: "/terms", Message: me.Message}}
	}
	return terms, out
}

// mandateJSON is a mandate as agents see it, with its live usage.
type mandateJSON struct {
	ID          string              `json:"id"`
	Status      string              `json:"status"`
	Live        bool                `json:"live"`
	Terms       models.MandateTerms `json:"terms"`
	TermsDigest string              `json:"terms_digest"`
	ProposalID  string              `json:"proposal_id"`
	Spent       int64               `json:"spent"`
	Uses        int64               `json:"uses"`
	Grantors    []string            `json:"grantors"`
	GrantedAt   string              `json:"granted_at"`
	RevokedAt   *string             `json:"revoked_at"`
}

// GetMandate handles GET /api/v1/mandates/{id}: a mandate that covers the
// calling agent, with its usage. Other mandates are not found.
func (h *Handlers) GetMandate(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	m, err := h.mandates.Mandate(c.Request().Context(), agent.TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	if !slices.Contains(m.Terms.Agents, agent.ID) {
		return models.Errorf(models.ENotFound, "no mandate %q", c.Param("id"))
	}
	out := mandateJSON{ID: m.ID, Status: string(m.Status), Live: m.Live(h.clock.Now()), Terms: m.Terms,
		TermsDigest: m.TermsDigest, ProposalID: m.ProposalID, Spent: m.Spent, Uses: m.Uses,
		Grantors: m.Grantors, GrantedAt: timestamp(m.GrantedAt)}
	if out.Grantors == nil {
		out.Grantors = []string{}
	}
	if m.RevokedAt != nil {
		out.RevokedAt = optionalTimestamp(*m.RevokedAt)
	}
	return c.JSON(http.StatusOK, out)
}
