package writes

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/models"
)

// MaxReason bounds a decline reason.
const MaxReason = 1000

// Confirm records a reviewer's approval of exactly the proposal and digest
// the reviewer saw and, when the tier's requirement is met (one click, a
// security-key assertion, or N distinct approvers), issues the confirmation
// token. Before recording it re-checks, on the server: the proposal awaits
// confirmation and has not expired, the reviewer belongs to the tenant and
// is enabled, the digest is the stored one, the requester is not approving
// its own proposal, the tier's authentication is present, and the business
// state is unchanged since the preview, and so is the effect preview: the
// reviewer was shown the stored one (in.EffectSeen) and the business system
// still describes the write that way.
//
// Errors: ENotFound, EForbidden, EProposalExpired, EInvalidState,
// EArgsMismatch, ESelfApproval, EDutyConflict, EStepUpRequired,
// EStateChanged, EEffectChanged, EAlreadyDecided, EUnavailable; EInvalidRequest for a
// comment that is too long; EUnauthenticated for the zero Evidence.
func (s *Service) confirm(ctx context.Context, in ConfirmInput) (*models.Proposal, error) {
	comment := strings.TrimSpace(in.Comment)
	if len(comment) > MaxReason {
		return nil, &models.Error{Code: models.EInvalidRequest, Message: "a comment may have at most 1000 characters",
			Fields: []models.FieldProblem{{Pointer: "/comment", Message: "at most 1000 characters"}}}
	}
	if err := models.StorableText("/comment", comment); err != nil {
		return nil, err
	}
	ev := in.Evidence
	if err := evidenceFor(ev, in); err != nil {
		return nil, err
	}
	p, err := s.approvable(ctx, in.Reviewer, in.ProposalID, in.DigestSeen)
	if err != nil {
		return nil, err
	}
	if p.Tier.Confirmation == models.ConfirmWebAuthn && !ev.SteppedUp() {
		return nil, models.Errorf(models.EStepUpRequired, "this %s-risk write needs a security-key confirmation", p.Tier.Name)
	}
	if err := s.stateUnchanged(ctx, p); err != nil {
		return nil, err
	}
	if err := s.effectUnchanged(ctx, p, in.EffectSeen); err != nil {
		return nil, err
	}
	// The stored amr says how the reviewer signed in and, only with a
	// verified assertion, that this write was confirmed with a security key.
	amr := models.DecisionAMR(ev.SignInMethods(), ev.SteppedUp())
	d := models.Decision{ID: models.NewID("dec"), ProposalID: p.ID, UserID: in.Reviewer.ID,
		Kind: models.DecisionApprove, Reason: comment, DigestSeen: in.DigestSeen, EffectSeen: in.EffectSeen,
		AMR: amr, Evidence: ev.Assertion()}
	now := s.clock.Now()
	out, err := s.store.RecordDecision(ctx, d, p.TenantID, now, func(p *models.Proposal) (models.Token, error) {
		return s.issue(ctx, p, now)
	})
	if err != nil {
		return nil, err
	}
	s.changed(p.TenantID, p.ID)
	return out, nil
}

// evidenceFor checks that ev is evidence of this approval: made (not the
// zero value), about the reviewer who approves, and a security-key
// assertion, when there is one, made over this proposal and digest.
func evidenceFor(ev Evidence, in ConfirmInput) error {
	switch {
	case ev.IsZero():
		return models.Errorf(models.EUnauthenticated, "an approval needs verified evidence of how the reviewer signed in")
	case ev.UserID() != in.Reviewer.ID:
		return models.Errorf(models.EForbidden, "the evidence of this approval is another reviewer's")
	}
	if id, digest := ev.StepUpFor(); ev.SteppedUp() && (id != in.ProposalID || digest != in.DigestSeen) {
		return models.Errorf(models.EArgsMismatch, "the security-key confirmation was made for another proposal or other arguments")
	}
	return nil
}

// stateUnchanged asks the business system whether the target is still as
// previewed. A mandate proposal has no target: its terms are all there is.
func (s *Service) stateUnchanged(ctx context.Context, p *models.Proposal) error {
	if p.Kind == models.KindMandate {
		return nil
	}
	ad, err := s.adapter(p.Tool)
	if err != nil {
		return err
	}
	vr, err := ad.Validate(ctx, models.ValidateRequest{
		Tool: p.Tool, Arguments: p.Arguments, Tenant: p.TenantID, Principal: p.AgentID})
	if err != nil {
		return adapterErr(err)
	}
	if err := vr.Check(); err != nil {
		return answerOutOfBounds(err)
	}
	if !vr.OK || vr.StateVersion != p.StateVersion {
		e := models.Errorf(models.EStateChanged, "the target changed since this preview was made; the agent must propose again")
		for _, msg := range vr.Problems {
			e.Fields = append(e.Fields, models.FieldProblem{Message: msg})
		}
		return e
	}
	return nil
}

// CheckApprove tells, before a reviewer goes through a security-key
// ceremony, whether an approval of the proposal as seen (digestSeen) could
// be recorded now: the same checks as Confirm except the tier's
// authentication and the business state, plus that the reviewer has not
// decided it already. It changes nothing; Confirm checks everything again.
//
// Errors: ENotFound, EForbidden, EProposalExpired, EInvalidState,
// EArgsMismatch, ESelfApproval, EDutyConflict, EAlreadyDecided,
// EUnavailable.
func (s *Service) CheckApprove(ctx context.Context, reviewer models.User, proposalID, digestSeen string) (*models.Proposal, error) {
	p, err := s.approvable(ctx, reviewer, proposalID, digestSeen)
	if err != nil {
		return nil, err
	}
	if p.Expired(s.clock.Now()) {
		return nil, models.Errorf(models.EProposalExpired, "the proposal expired at %s", p.ExpiresAt.Format(time.RFC3339))
	}
	for _, d := range p.Decisions {
		if d.UserID == reviewer.ID {
			return nil, models.Errorf(models.EAlreadyDecided, "you already decided this proposal")
		}
	}
	return p, nil
}

// approvable is decidable plus separation of duties (models.DutyConflict;
// the store checks it again inside the deciding transaction) and the
// self-approval rules: the reviewer who edited the proposal may not approve
// it (models.EditorMayApprove); the requester (the
// agent's owner) may not approve unless the tier allows it, and never
// counts toward a quorum of two or more, whatever the tier says — N
// distinct approvers means N people besides the one who asked.
func (s *Service) approvable(ctx context.Context, reviewer models.User, id, digestSeen string) (*models.Proposal, error) {
	p, err := s.decidable(ctx, reviewer, id, digestSeen)
	if err != nil {
		return nil, err
	}
	agent, err := s.store.AgentByID(ctx, p.TenantID, p.AgentID)
	if err != nil {
		return nil, err
	}
	if adminID, conflict := models.DutyConflict(reviewer, agent); conflict {
		name := "an administrator"
		if admin, err := s.store.UserByID(ctx, p.TenantID, adminID); err == nil {
			name = admin.Name
		}
		return nil, models.DutyConflictError(name, agent.Name)
	}
	if !models.EditorMayApprove(p, reviewer.ID) {
		return nil, models.Errorf(models.ESelfApproval, "you edited this proposal, so it is your request: another reviewer must approve it")
	}
	if models.SelfApprovalForbidden(p.Tier) {
		if agent.OwnerUserID != "" && agent.OwnerUserID == reviewer.ID {
			if p.Tier.Approvers() > 1 {
				return nil, models.Errorf(models.ESelfApproval,
					"you requested this write through agent %s, and the requester never counts toward a quorum of %d approvers", agent.Name, p.Tier.Approvers())
			}
			return nil, models.Errorf(models.ESelfApproval, "you requested this write through agent %s and may not approve it yourself", agent.Name)
		}
	}
	return p, nil
}

// Decline records a reviewer's refusal with a reason; the proposal is
// declined at once. Errors as Confirm, plus EInvalidRequest without a reason.
func (s *Service) decline(ctx context.Context, in DeclineInput) (*models.Proposal, error) {
	reason := strings.TrimSpace(in.Reason)
	if reason == "" || len(reason) > MaxReason {
		return nil, &models.Error{Code: models.EInvalidRequest, Message: "say why you decline (1–1000 characters)",
			Fields: []models.FieldProblem{{Pointer: "/reason", Message: "a reason is required"}}}
	}
	if err := models.StorableText("/reason", reason); err != nil {
		return nil, err
	}
	p, err := s.decidable(ctx, in.Reviewer, in.ProposalID, in.DigestSeen)
	if err != nil {
		return nil, err
	}
	d := models.Decision{ID: models.NewID("dec"), ProposalID: p.ID, UserID: in.Reviewer.ID,
		Kind: models.DecisionDecline, Reason: reason, DigestSeen: in.DigestSeen, AMR: []string{"pwd"}}
	out, err := s.store.RecordDecision(ctx, d, p.TenantID, s.clock.Now(), nil)
	if err != nil {
		return nil, err
	}
	s.changed(p.TenantID, p.ID)
	return out, nil
}

// decidable loads a proposal for a reviewer's decision and checks what can
// be checked before the deciding transaction (which checks status and
// expiry again, atomically).
func (s *Service) decidable(ctx context.Context, reviewer models.User, id, digestSeen string) (*models.Proposal, error) {
	if reviewer.Disabled || !reviewer.Role.Valid() {
		return nil, models.Errorf(models.EForbidden, "your account may not decide proposals")
	}
	p, err := s.Get(ctx, reviewer.TenantID, id)
	if err != nil {
		return nil, err
	}
	switch {
	case p.Status == models.StatusExpired:
		return nil, models.Errorf(models.EProposalExpired, "the proposal expired at %s", p.ExpiresAt.Format(time.RFC3339))
	case p.Status != models.StatusAwaitingConfirmation:
		return nil, models.Errorf(models.EInvalidState, "the proposal is %s, not awaiting confirmation", p.Status)
	case digestSeen != p.ArgsDigest:
		return nil, models.Errorf(models.EArgsMismatch, "the arguments you saw are not the ones stored; reload the proposal")
	}
	return p, p.Intact()
}

// issue builds and signs the token of a proposal whose quorum is complete.
// It runs inside the deciding transaction and must not use the database:
// keys are cached since New.
func (s *Service) issue(ctx context.Context, p *models.Proposal, now time.Time) (models.Token, error) {
	iat := now.Truncate(time.Second)
	exp := iat.Add(p.Tier.TTL)
	var approvers, amr []string
	for _, d := range p.Approvals() {
		approvers = append(approvers, d.UserID)
		for _, m := range d.AMR {
			if !slices.Contains(amr, m) {
				amr = append(amr, m)
			}
		}
	}
	slices.Sort(amr)
	if p.MandateID != "" {
		// No person confirmed this write: the mandate's grantors did, once.
		approvers, amr = p.MandateGrantors, []string{models.AMRMandate}
	}
	c := models.Claims{
		Issuer: s.tokens.Issuer(), Audience: s.tokens.Audience(), Subject: p.AgentID, Tenant: p.TenantID,
		ID: models.NewID("tok"), Operation: p.Tool, Resource: p.Resource, ResourceSetDigest: p.ResourceSetDigest,
		ArgsDigest: p.ArgsDigest, Policy: p.PolicyVersion, RequestKey: p.RequestKey, ProposalID: p.ID,
		Approvers: approvers, AMR: amr, IssuedAt: iat.Unix(), Expiry: exp.Unix(), MandateID: p.MandateID,
	}
	compact, kid, err := s.tokens.Sign(ctx, c)
	if err != nil {
		return models.Token{}, err
	}
	return models.Token{JTI: c.ID, TenantID: p.TenantID, ProposalID: p.ID, AgentID: p.AgentID, KeyID: kid,
		Status: models.TokenIssued, Compact: compact, IssuedAt: iat, ExpiresAt: exp}, nil
}

// Revoke withdraws a confirmation (administrators only) while that can
// still prevent a write: a confirmed, unused, unexpired token, or a
// failed_retryable execution (which then ends failed_terminal with nothing
// written, and is never retried). models.Proposal.Revocable is the same rule
// for showing the action.
// Errors: EForbidden, ENotFound, EInvalidState.
func (s *Service) Revoke(ctx context.Context, admin models.User, proposalID string) (*models.Proposal, error) {
	if admin.Role != models.RoleAdmin || admin.Disabled {
		return nil, models.Errorf(models.EForbidden, "only an administrator may revoke a confirmation")
	}
	if err := s.store.RevokeTokenBy(ctx, admin.TenantID, proposalID, admin.ID, s.clock.Now()); err != nil {
		return nil, err
	}
	s.changed(admin.TenantID, proposalID)
	return s.store.GetProposal(ctx, admin.TenantID, proposalID)
}
