package console

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/views/proposals"
	"github.com/countersign/countersign/web/session"
)

// stepUpApproval sets up the Approve form of a tier that requires a
// security key: "Approve with security key", enabled when the reviewer has
// a usable key, and otherwise disabled with a link to register one.
func (h *Pages) stepUpApproval(ctx context.Context, s *session.Session, p *models.Proposal, page *proposals.Page, sum registry.Summary) error {
	if h.stepUp == nil {
		page.CanApprove = false
		page.ApproveLabel = sum.Approve + " — security key required"
		page.ApproveBlockedReason = fmt.Sprintf("The %s tier requires a security-key confirmation (WebAuthn) for every approval. "+
			"This console cannot run the security-key ceremony yet, so this proposal cannot be approved here; you can still decline it.", p.Tier.Name)
		return nil
	}
	page.ApproveLabel = sum.Approve + " with security key"
	page.StepUpPrompt = sum.Approve + ": unlock and touch your security key, which signs exactly this proposal…"
	page.StepUpBegin = proposalURL(p.ID) + "/stepup/begin"
	page.StepUpFinish = proposalURL(p.ID) + "/stepup/finish"
	ok, err := h.stepUp.HasUsableKey(ctx, s.User)
	if err != nil {
		return err
	}
	if !ok {
		page.CanApprove = false
		page.ApproveBlockedReason = fmt.Sprintf("The %s tier requires every approval to be confirmed with a security key or passkey, "+
			"and you have none that can approve. Register one, then come back to this proposal; you can still decline it.", p.Tier.Name)
		page.ApproveBlockedLink = keysURL
		page.ApproveBlockedLinkText = "Register a security key"
	}
	return nil
}

// StepUpBegin serves POST /proposals/:id/stepup/begin with the digest the
// page showed (form field or JSON {"digest": …}). It answers the WebAuthn
// request options as JSON ({"publicKey": …}) whose challenge is bound to
// this proposal and digest, or a JSON error saying why the approval cannot
// be made.
func (h *Pages) StepUpBegin(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	if h.stepUp == nil {
		return echo.NewHTTPError(http.StatusNotFound)
	}
	digest, err := digestField(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	opts, err := h.stepUp.BeginApproval(c.Request().Context(), s.User, id, digest)
	if err != nil {
		return h.stepUpRefusal(c, s, id, err, models.EArgsMismatch)
	}
	noStore(c)
	return c.JSONBlob(http.StatusOK, opts)
}

// StepUpFinish serves POST /proposals/:id/stepup/finish with the assertion
// (credential.toJSON()). On success the approval is recorded — and, when it
// completes the quorum, the token issued — and it answers {"redirect":
// "/proposals/ID"}; otherwise a JSON error saying why nothing was approved.
func (h *Pages) StepUpFinish(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	if h.stepUp == nil {
		return echo.NewHTTPError(http.StatusNotFound)
	}
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	var extra struct {
		Comment string `json:"comment"`
		Effect  string `json:"effect"`
	}
	_ = json.Unmarshal(body, &extra) // the assertion itself is checked below
	_, err = h.stepUp.FinishApproval(c.Request().Context(), stepup.ApprovalInput{
		Reviewer: s.User, SignedIn: auth.ApprovalEvidence(s.User, s.AMR), ProposalID: id, Response: body, Comment: extra.Comment,
		EffectSeen: extra.Effect})
	if err != nil {
		return h.stepUpRefusal(c, s, id, err)
	}
	return redirectJSON(c, proposalURL(id))
}

// stepUpRefusal words the protocol's refusals the way the proposal page
// does; the step-up's own refusals are worded for the reviewer already.
// also lists further codes to reword (the begin's digest mismatch is the
// page's, the finish's is the step-up's).
func (h *Pages) stepUpRefusal(c echo.Context, s *session.Session, id string, err error, also ...models.Code) error {
	code := models.ErrorCode(err)
	switch code {
	case models.EProposalExpired, models.EInvalidState, models.EAlreadyDecided, models.EStateChanged, models.EEffectChanged,
		models.ESelfApproval, models.EDutyConflict, models.EForbidden:
	default:
		reword := false
		for _, a := range also {
			reword = reword || a == code
		}
		if !reword {
			return err
		}
	}
	p, gerr := h.p.Get(c.Request().Context(), s.User.TenantID, id)
	if gerr != nil {
		return err
	}
	return &models.Error{Code: code, Message: h.refusalMessage(code, "approve", p, err), Err: err}
}

// digestField reads the digest the reviewer saw from a form or a JSON body.
func digestField(c echo.Context) (string, error) {
	if mt, _, _ := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType)); mt == echo.MIMEApplicationJSON {
		body, err := readJSON(c)
		if err != nil {
			return "", err
		}
		var in struct {
			Digest string `json:"digest"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return "", models.Wrap(models.EInvalidRequest, err, "the request is not a JSON object")
		}
		return in.Digest, nil
	}
	return c.FormValue("digest"), nil
}
