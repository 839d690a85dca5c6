package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/httpstatus"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/views/proposals"
	"github.com/countersign/countersign/web/session"
)

// Counter serves POST /proposals/:id/edit (form fields digest, arguments,
// reason and csrf_token): the reviewer's edit becomes a new version and the
// browser goes to it. Arguments the protocol refuses (schema, business
// rules, no reason, nothing changed) come back in the form with 422 and
// what was typed; refusals of the proposal's state come back as an alert.
func (h *Pages) Counter(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	id, args, reason := c.Param("id"), c.FormValue("arguments"), c.FormValue("reason")
	rev, err := h.p.Counter(c.Request().Context(), writes.CounterInput{Reviewer: s.User, ProposalID: id,
		DigestSeen: c.FormValue("digest"), Arguments: json.RawMessage(args), Reason: reason})
	if err == nil {
		return seeOther(c, proposalURL(rev.ID))
	}
	code := models.ErrorCode(err)
	o := outcome{editArguments: args, editReason: reason}
	status := httpstatus.Of(code)
	switch code {
	case models.EInvalidRequest, models.ESchemaViolation, models.EClarificationNeeded, models.EBusinessRule:
		status = http.StatusUnprocessableEntity
		o.editError = "Nothing was edited: " + lowerFirst(models.ErrorMessage(err))
		var de *models.Error
		if errors.As(err, &de) {
			var parts []string
			for _, f := range de.Fields {
				parts = append(parts, strings.TrimSpace(f.Pointer+" "+f.Message))
			}
			if len(parts) > 0 {
				o.editError += " (" + strings.Join(parts, "; ") + ")"
			}
		}
	case models.EArgsMismatch:
		o.alert = "The proposal you edited is not this proposal as it stands. Nothing was edited. Review it below and edit again."
	case models.EProposalExpired, models.EInvalidState, models.EForbidden, models.EIdempotencyKeyReuse:
		o.alert = upperFirst(models.ErrorMessage(err)) + ". Nothing was edited."
	default:
		return err
	}
	p, gerr := h.p.Get(c.Request().Context(), s.User.TenantID, id)
	if gerr != nil {
		return gerr
	}
	page, err := h.proposalPage(c.Request().Context(), s, p, o)
	if err != nil {
		return err
	}
	noStore(c)
	return render(c, status, proposals.View(page))
}

// counterView maps p's edit chain and the edit form for reviewer s.
func (h *Pages) counterView(s *session.Session, p *models.Proposal, awaiting bool, o outcome) proposals.Counter {
	v := proposals.Counter{CanEdit: awaiting, EditAction: proposalURL(p.ID) + "/edit", Digest: p.ArgsDigest, CSRF: s.CSRF,
		Arguments: o.editArguments, Reason: o.editReason, Error: o.editError}
	if v.Arguments == "" {
		var b bytes.Buffer
		if json.Indent(&b, p.Arguments, "", "  ") == nil {
			v.Arguments = b.String()
		}
	}
	edit := func(c *models.Counter, other string) *proposals.Edit {
		e := &proposals.Edit{URL: proposalURL(other), ID: other, Version: c.Version, Editor: c.EditorName,
			Reason: visible.Reveal(c.Reason, visible.FreeText).Shown, At: h.formatTime(c.CreatedAt)}
		for _, ch := range c.Changes {
			e.Changes = append(e.Changes, proposals.Change{Pointer: ch.Pointer,
				Before: visible.RevealJSON(jsonOrNone(ch.Before), visible.Strict).Shown,
				After:  visible.RevealJSON(jsonOrNone(ch.After), visible.Strict).Shown})
		}
		return e
	}
	if p.Supersedes != nil {
		v.Supersedes = edit(p.Supersedes, p.Supersedes.OriginalID)
	}
	if p.SupersededBy != nil {
		v.SupersededBy = edit(p.SupersededBy, p.SupersededBy.RevisedID)
	}
	return v
}

func jsonOrNone(v json.RawMessage) string {
	if v == nil {
		return "(none)"
	}
	return string(v)
}

// factors fills the page's per-group progress of p's tier: how many of
// each group approved, by name, and whether the group's count is met.
func factors(p *models.Proposal, page *proposals.Page) {
	names := map[string]string{}
	for _, d := range p.Decisions {
		names[d.UserID] = d.UserName
	}
	for _, f := range p.Progress {
		row := proposals.FactorRow{Group: f.Group, Have: len(f.Approvers), Need: f.Count, Met: f.Met()}
		for _, id := range f.Approvers {
			row.Approvers = append(row.Approvers, names[id])
		}
		page.Factors = append(page.Factors, row)
	}
}
