package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/httpstatus"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/views/proposals"
	"github.com/countersign/countersign/views/ui"
	"github.com/countersign/countersign/web/session"
)

// outcome is what a refused form post shows on the re-rendered page.
type outcome struct {
	alert         string
	declineReason string
	declineError  string
	// A refused edit keeps what was typed and says why.
	editArguments, editReason, editError string
}

// Proposal serves GET /proposals/:id: the preview a reviewer decides on.
func (h *Pages) Proposal(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	p, err := h.p.Get(c.Request().Context(), s.User.TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	page, err := h.proposalPage(c.Request().Context(), s, p, outcome{})
	if err != nil {
		return err
	}
	noStore(c)
	return render(c, http.StatusOK, proposals.View(page))
}

// ProposalLive serves GET /proposals/:id/live?rev=N, the part of the
// proposal page that follows the proposal while it is open (status line,
// decision forms, decisions, receipt). It answers 204 while the proposal
// is still at revision N, so that nothing is redrawn under the reviewer's
// cursor; a background request, it does not keep the session alive.
func (h *Pages) ProposalLive(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	p, err := h.p.Get(c.Request().Context(), s.User.TenantID, c.Param("id"))
	if err != nil {
		return err
	}
	noStore(c)
	if c.QueryParam("rev") == strconv.FormatInt(p.Revision, 10) {
		return c.NoContent(http.StatusNoContent)
	}
	page, err := h.proposalPage(c.Request().Context(), s, p, outcome{})
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, proposals.LiveUpdate(page))
}

// Approve serves POST /proposals/:id/approve (form fields digest, effect
// when the page showed an effect preview, optional comment and
// csrf_token): an approval of exactly the digests the page showed. On success
// it redirects to the proposal; a refusal re-renders the page with the
// status of the refusal and says why.
func (h *Pages) Approve(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	id := c.Param("id")
	_, err = h.p.Confirm(c.Request().Context(), writes.ConfirmInput{
		Reviewer: s.User, ProposalID: id, DigestSeen: c.FormValue("digest"), EffectSeen: c.FormValue("effect"),
		Evidence: auth.ApprovalEvidence(s.User, s.AMR), Comment: c.FormValue("comment"),
	})
	if err != nil {
		return h.refused(c, s, id, "approve", err, outcome{})
	}
	return seeOther(c, proposalURL(id))
}

// Decline serves POST /proposals/:id/decline (form fields digest, reason and
// csrf_token). Without a reason the page comes back with 422, the form
// error and what was typed.
func (h *Pages) Decline(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	id, reason := c.Param("id"), c.FormValue("reason")
	_, err = h.p.Decline(c.Request().Context(), writes.DeclineInput{
		Reviewer: s.User, ProposalID: id, DigestSeen: c.FormValue("digest"), Reason: reason,
	})
	if err != nil {
		return h.refused(c, s, id, "decline", err, outcome{declineReason: reason})
	}
	return seeOther(c, proposalURL(id))
}

// Revoke serves POST /proposals/:id/revoke: an administrator withdraws a
// confirmed, unused token. It returns to the history when the form says it
// came from there (return=history), to the proposal otherwise.
func (h *Pages) Revoke(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	id := c.Param("id")
	if _, err := h.p.Revoke(c.Request().Context(), s.User, id); err != nil {
		return h.refused(c, s, id, "revoke", err, outcome{})
	}
	if c.FormValue("return") == "history" {
		return seeOther(c, "/history")
	}
	return seeOther(c, proposalURL(id))
}

// refused re-renders the proposal page after the protocol refused a
// decision, with the refusal's status and a message saying why. Errors that
// are no refusal (not found, unavailable, internal) go to the server's
// error handler.
func (h *Pages) refused(c echo.Context, s *session.Session, id, action string, err error, o outcome) error {
	code := models.ErrorCode(err)
	status := httpstatus.Of(code)
	switch code {
	case models.EArgsMismatch, models.EProposalExpired, models.EInvalidState, models.EAlreadyDecided,
		models.EStateChanged, models.EEffectChanged, models.EStepUpRequired, models.ESelfApproval, models.EDutyConflict, models.EForbidden:
	case models.EInvalidRequest:
		if action != "decline" {
			return err
		}
		// The only invalid input of a decline is its reason: a form error.
		status = http.StatusUnprocessableEntity
		o.declineError = models.ErrorMessage(err)
		var de *models.Error
		if errors.As(err, &de) {
			for _, f := range de.Fields {
				if f.Pointer == "/reason" {
					o.declineError = "A reason is required (at most 1000 characters): the agent and the history show it."
				}
			}
		}
	default:
		return err
	}
	p, gerr := h.p.Get(c.Request().Context(), s.User.TenantID, id)
	if gerr != nil {
		return gerr
	}
	if o.declineError != "" {
		o.alert = "Nothing was declined: " + lowerFirst(o.declineError)
	} else {
		o.alert = h.refusalMessage(code, action, p, err)
	}
	page, err := h.proposalPage(c.Request().Context(), s, p, o)
	if err != nil {
		return err
	}
	noStore(c)
	return render(c, status, proposals.View(page))
}

// refusalMessage says why a decision was refused and that nothing happened.
func (h *Pages) refusalMessage(code models.Code, action string, p *models.Proposal, err error) string {
	nothing := map[string]string{
		"approve": "Nothing was approved.",
		"decline": "Nothing was declined.",
		"revoke":  "Nothing was revoked.",
	}[action]
	switch code {
	case models.EArgsMismatch:
		return "The digest you " + action + "d is not the digest of the stored arguments: the page you acted on was not this proposal as it stands. " +
			nothing + " Review the arguments below and decide again."
	case models.EProposalExpired:
		return fmt.Sprintf("This proposal expired at %s. %s The agent has to propose again.", h.formatTime(p.ExpiresAt), nothing)
	case models.EInvalidState:
		if action == "revoke" {
			return fmt.Sprintf("Only a confirmed, unused confirmation can be revoked, and this proposal is %s. %s",
				strings.ToLower(statusBadge(p.Status).Text), nothing)
		}
		return fmt.Sprintf("This proposal is no longer awaiting a decision: it is %s. %s",
			strings.ToLower(statusBadge(p.Status).Text), nothing)
	case models.EAlreadyDecided:
		return "You already decided this proposal; your first decision stands and was recorded once."
	case models.EStateChanged:
		return "The target changed in the business system since this preview was made (its state version moved). " +
			nothing + " The agent has to propose again with a fresh preview."
	case models.EEffectChanged:
		if seen, stale := writes.StaleEffect(err); stale {
			// The stored preview is what the page should have shown: the
			// page was out of date (or not this proposal's), not the
			// business system's answer.
			if seen == "" {
				return "The page you approved from did not show what this write would do (it was out of date, from before the " +
					"business system's effect preview). " + nothing + " Reload the proposal, look at the effect below, and decide again."
			}
			return "The effect preview on the page you approved from is not the one stored with this proposal. " + nothing +
				" Reload the proposal, look at the effect below, and decide again."
		}
		return "The business system now describes what this write would do differently than the preview shown to you " +
			"(the values before → after moved). " + nothing + " The agent has to propose again with a fresh preview."
	case models.EStepUpRequired:
		if h.stepUp != nil {
			return fmt.Sprintf("The %s tier requires a security-key confirmation: use the Approve button marked “with security key”, "+
				"which asks your key to sign exactly this proposal (it needs JavaScript). %s", p.Tier.Name, nothing)
		}
		return fmt.Sprintf("The %s tier requires a security-key confirmation, which this console cannot perform yet. %s",
			p.Tier.Name, nothing)
	default: // self_approval, forbidden: the domain's message is written for the user
		return upperFirst(models.ErrorMessage(err)) + ". " + nothing
	}
}

// proposalPage maps a proposal to the page's view-model for reviewer s.
func (h *Pages) proposalPage(ctx context.Context, s *session.Session, p *models.Proposal, o outcome) (proposals.Page, error) {
	now := h.clock.Now()
	expired := p.Status == models.StatusExpired || (p.Status == models.StatusAwaitingConfirmation && p.Expired(now))
	title := h.toolTitle(p.Tool)
	// A countdown only where time still decides something: the window for
	// a decision, or the token's validity while it waits to be redeemed.
	var expiryLabel string
	var expires ui.Countdown
	switch {
	case p.Status == models.StatusAwaitingConfirmation || p.Status == models.StatusExpired && p.Token == nil:
		expiryLabel, expires = "Decide before", h.countdown(p.ExpiresAt, now)
	case (p.Status == models.StatusConfirmed || p.Status == models.StatusExpired) && p.Token != nil:
		expiryLabel, expires = "Token valid", h.countdown(p.Token.ExpiresAt, now)
	}
	// Everything an agent or the business system wrote is shown through
	// one rule (visible.Reveal): hidden code points become ⟨U+…⟩.
	var seen revealer
	sum := h.summary(p)
	sum.Line, sum.Approve = seen.show(sum.Line, visible.Strict), visible.Reveal(sum.Approve, visible.Strict).Shown
	page := proposals.Page{
		Summary:       sum.Line,
		Owner:         p.AgentOwnerName,
		ContextLong:   utf8.RuneCountInString(p.Context) > contextFold || strings.Count(p.Context, "\n") >= 4,
		LiveURL:       proposalURL(p.ID) + "/live",
		Revision:      strconv.FormatInt(p.Revision, 10),
		ExpiryLabel:   expiryLabel,
		Expires:       expires,
		Layout:        h.frame(s, title, "pending"),
		ID:            p.ID,
		Tool:          p.Tool,
		Title:         title,
		Status:        proposalStatus(p),
		Digest:        digest(p.ArgsDigest),
		Resource:      seen.show(p.Resource, visible.Strict),
		ResourceLabel: seen.show(p.ResourceLabel, visible.Strict),
		StateVersion:  seen.show(p.StateVersion, visible.Strict),
		Tier:          tierBadge(p.Tier),
		Confirmation:  confirmationText(p.Tier),
		Zone:          h.loc.String(),
		Context:       seen.show(p.Context, visible.FreeText),
		Requester:     p.AgentName,
		Created:       h.formatTime(p.CreatedAt),
		CreatedISO:    p.CreatedAt.UTC().Format(time.RFC3339),
		Expired:       expired,
		Receipt:       h.receipt(p),
		ApproveAction: proposalURL(p.ID) + "/approve",
		DeclineAction: proposalURL(p.ID) + "/decline",
		RevokeAction:  proposalURL(p.ID) + "/revoke",
		CSRF:          s.CSRF,
		Alert:         o.alert,
		DeclineReason: o.declineReason,
		DeclineError:  o.declineError,
	}
	tool, known := h.p.Registry().Tool(p.Tool)
	if known {
		page.Description = tool.Description
	}
	page.Mandate = mandateText(p)
	if p.MandateID != "" {
		page.MandateURL = "/mandates#" + mandateAnchor(p.MandateID)
	}
	if p.Kind == models.KindMandate {
		page.Title = "Standing mandate: " + title
		page.Description = "Granting this lets the agent's writes that fit these terms be confirmed without a person, until the budget, uses or time run out."
	}
	if p.Batch() {
		page.Resource = p.ResourceSetDigest
		page.Batch = &proposals.Batch{Count: p.ResourceCount, IDs: p.ResourceSet, SetDigest: digest(p.ResourceSetDigest)}
	}
	for _, f := range h.preview(p) {
		before := len(seen.found)
		// Free text (an e-mail's body) keeps its line breaks where it is
		// read; the machine value shows them escaped, exactly.
		mode := visible.Strict
		if known && tool.TextField(f.Name) {
			mode = visible.FreeText
		}
		page.Fields = append(page.Fields, proposals.Field{Name: f.Name, Label: f.Label,
			Machine: seen.showJSON(string(f.Value), mode), Display: seen.show(f.Display, mode)})
		page.Fields[len(page.Fields)-1].Hidden = len(seen.found) > before
	}
	page.Effect = effectView(p, &seen)
	page.HiddenWarning = visible.Warning(seen.found)
	for _, pr := range p.Problems {
		page.Problems = append(page.Problems, pr.Message)
	}

	// The meter shows what is still missing (ApprovalCount); the text
	// names the tier's count and, apart, the groups still short.
	need := p.Tier.Approvers()
	have, meter := p.ApprovalCount()
	page.Quorum = proposals.Quorum{Have: have, Need: meter, Text: fmt.Sprintf("%d of %d %s", have, need, plural(need, "approval", "approvals"))}
	if p.Tier.Confirmation == models.ConfirmWebAuthn {
		page.Quorum.Text += plural(need, " with a security key", ", each with the reviewer's own security key")
	}
	more, short := p.StillNeeded()
	lacking := models.Shortfalls(short)
	switch {
	case more == 0:
		page.Quorum.Text += " — complete"
	case have >= need:
		page.Quorum.Text += " — still needs " + lacking
	}
	factors(p, &page)

	decided := p.DecidedBy(s.User.ID)
	for _, d := range p.Decisions {
		kind := ui.Badge{Text: "Approved", Symbol: "✓", Tone: "ok"}
		if d.Kind == models.DecisionDecline {
			kind = ui.Badge{Text: "Declined", Symbol: "✗", Tone: "bad"}
		}
		who := d.UserName
		if who == "" {
			who = d.UserID
		}
		page.Decisions = append(page.Decisions, proposals.Decision{
			Who: who, Kind: kind, At: h.formatTime(d.CreatedAt), AtISO: d.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"),
			Reason: visible.Reveal(d.Reason, visible.FreeText).Shown, AMR: amrText(d.AMR), DigestSeen: digest(d.DigestSeen),
			Enrolment: h.enrolmentText(d.Decider),
		})
		if d.VoidedAt != nil {
			page.Decisions[len(page.Decisions)-1].Voided = fmt.Sprintf(
				"Voided at %s: this reviewer was disabled before the proposal was confirmed, so the approval does not count.",
				h.formatTime(*d.VoidedAt))
		}
	}

	awaiting := p.Decidable(now)
	page.CanDecide = awaiting && !decided
	page.ApproveLabel = sum.Approve
	page.CanApprove = page.CanDecide
	switch {
	case page.CanDecide && !models.EditorMayApprove(p, s.User.ID):
		page.CanApprove = false
		page.ApproveBlockedReason = "You edited this proposal, so it is your request: another reviewer must approve it. You may still decline it."
	case page.CanDecide && !p.MayApprove(s.User.ID):
		page.CanApprove = false
		page.ApproveBlockedReason = fmt.Sprintf("You own this agent (%s), another reviewer must decide. You may still decline it.", p.AgentName)
	case page.CanDecide && p.Tier.Confirmation == models.ConfirmWebAuthn:
		if err := h.stepUpApproval(ctx, s, p, &page, sum); err != nil {
			return page, err
		}
	}
	switch {
	case awaiting && decided:
		page.DecidedNote = fmt.Sprintf("You have decided this proposal. It waits for %d more %s from other reviewers.",
			more, plural(more, "approval", "approvals"))
		if lacking != "" {
			page.DecidedNote = fmt.Sprintf("You have decided this proposal. It waits for %d more %s: %s. An approval already given counts toward a group as soon as its reviewer joins it.",
				more, plural(more, "approval", "approvals"), lacking)
		}
	case !awaiting:
		page.DecidedNote = h.settledNote(p, expired)
	}
	if awaiting && more == 0 && len(p.Tier.Require) > 0 {
		// Complete yet waiting: a change of group membership completed it
		// and it waits for its business state to be checked.
		next, queued, err := h.p.QueuedConfirmation(ctx, p.TenantID, p.ID)
		if err != nil {
			return page, err
		}
		if queued {
			page.DecidedNote = fmt.Sprintf("Its approvals are complete since a change of group membership. It is confirmed as soon as the business system confirms that the target is as previewed (next try %s).",
				h.formatTime(next))
		}
	}
	page.CanRevoke = canRevoke(p, s.User, now)
	page.Counter = h.counterView(s, p, awaiting, o)
	for _, e := range p.Timeline() {
		st := proposals.Step{At: h.formatTime(e.At), AtISO: e.At.UTC().Format(time.RFC3339), Text: h.stepText(e)}
		if e.Decision != nil {
			st.Detail = visible.Reveal(e.Detail, visible.FreeText).Shown
		}
		page.Timeline = append(page.Timeline, st)
	}
	return page, nil
}

// stepText words one step of a proposal's timeline.
func (h *Pages) stepText(e models.TimelineEvent) string {
	switch e.Kind {
	case models.StepProposed:
		return "Proposed by " + e.Who
	case models.StepApproved:
		return "Approved by " + e.Who + " (" + amrText(e.Decision.AMR) + ")"
	case models.StepDeclined:
		return "Declined by " + e.Who
	case models.StepConfirmed:
		return "Confirmed: a one-time token was issued"
	case models.StepRedeemed:
		return "Token redeemed by " + e.Who + ": execution started"
	case models.StepExecuted:
		return "The business system answered: " + statusBadge(models.Status(e.Detail)).Text
	default:
		return statusBadge(models.Status(e.Detail)).Text
	}
}

// contextFold is the length past which the agent's context is folded away:
// the write comes first, whatever the agent wrote.
const contextFold = 280

// effectView shows the effect preview stored with the proposal: what the
// business system said the write would do when it was proposed, the
// description whose digest an approval confirms. The business system's
// text is shown like the agent's values (visible.Strict), and what seen
// finds in it joins the page's warning.
func effectView(p *models.Proposal, seen *revealer) *proposals.Effect {
	if p.Effect == nil {
		return nil
	}
	free := func(s string) string { return seen.show(s, visible.Strict) }
	out := &proposals.Effect{Digest: digest(p.EffectDigest)}
	for _, f := range p.Effect.Facts {
		out.Facts = append(out.Facts, proposals.Fact{Label: free(f.Label), Value: free(f.Value)})
	}
	for _, c := range p.Effect.Changes {
		out.Changes = append(out.Changes, proposals.EffectChange{Label: free(c.Label), Field: free(c.Field),
			Before: seen.showJSON(string(c.Before), visible.Strict), After: seen.showJSON(string(c.After), visible.Strict),
			BeforeDisplay: free(c.BeforeDisplay), AfterDisplay: free(c.AfterDisplay)})
	}
	return out
}

// enrolmentText says who enrolled a decider and when, and who last reset
// their password: a reviewer judging a quorum sees whether one
// administrator stands behind several approvers.
func (h *Pages) enrolmentText(e models.Enrolment) string {
	var out string
	switch e.EnrolledBy {
	case "":
		out = "enrolled " + h.formatTime(e.EnrolledAt) + " (by whom was not recorded)"
	case models.EnrolledByCLI:
		out = "enrolled from the command line " + h.formatTime(e.EnrolledAt)
	default:
		out = "enrolled by " + e.EnrolledBy + " " + h.formatTime(e.EnrolledAt)
	}
	if e.PasswordResetBy != "" && e.PasswordResetAt != nil {
		out += " · password reset by " + e.PasswordResetBy + " " + h.formatTime(*e.PasswordResetAt)
	}
	return out
}

// settledNote says what became of a proposal that no longer waits.
func (h *Pages) settledNote(p *models.Proposal, expired bool) string {
	switch {
	case expired:
		return fmt.Sprintf("This proposal expired at %s without a decision. Nothing was approved; the agent has to propose again.", h.formatTime(p.ExpiresAt))
	case p.Status == models.StatusConfirmed && p.Token != nil:
		return fmt.Sprintf("Confirmed. The agent holds a one-time token, valid until %s, to execute exactly this write once.", h.formatTime(p.Token.ExpiresAt))
	case p.MandateGranted():
		return "Granted. Nothing is executed for a grant itself; the mandate confirms the writes that fit it."
	case p.Status == models.StatusConfirmed:
		return "Confirmed."
	case p.Status == models.StatusDeclined:
		return "Declined. Nothing will be executed."
	case p.Status == models.StatusCancelled:
		return "The agent withdrew this proposal. Nothing will be executed."
	case p.Status == models.StatusRevoked:
		return "An administrator revoked the confirmation. Nothing will be executed."
	case p.Status == models.StatusRejected:
		return "The business system refused this write when it was proposed; it never needed a decision."
	case p.Status == models.StatusExecuting:
		return "Confirmed and executing now."
	case p.Status == models.StatusSucceeded:
		return "Confirmed and executed: see the receipt below."
	case p.Status == models.StatusFailedRetryable:
		return "Confirmed; the execution failed and will be retried with the same request key."
	case p.Status == models.StatusFailedTerminal:
		return "Confirmed; the execution failed for good. See the receipt below."
	case p.Status == models.StatusSuperseded:
		return "A reviewer edited this proposal into a new version (linked above); this version will never be executed."
	case p.Status == models.StatusUnknown:
		return "Confirmed; whether the business system applied the write is not known yet. It is being checked, never re-sent."
	default:
		return "This proposal does not await a decision."
	}
}

// mandateAnchor is the id of a mandate's row on the mandates page.
func mandateAnchor(id string) string { return "mandate-" + id }

// mandateText says what a standing mandate did for the proposal: granted
// by it, confirmed under it, or why one covering it could not.
func mandateText(p *models.Proposal) string {
	switch {
	case p.Kind == models.KindMandate && p.MandateID != "":
		return "Granted as standing mandate " + p.MandateID + ": it confirms, without a person, the agent's writes that fit these terms until its budget, uses or time run out or it is revoked."
	case p.MandateID != "":
		return "Confirmed without a person under standing mandate " + p.MandateID + "."
	case p.MandateNote != "":
		return "A standing mandate covers this agent and tool but could not confirm this write: " + p.MandateNote + "."
	}
	return ""
}
