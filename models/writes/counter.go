package writes

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/countersign/countersign/models"
)

// CounterInput is a reviewer's edit of a proposal awaiting confirmation.
type CounterInput struct {
	Reviewer   models.User
	ProposalID string
	// DigestSeen is the digest of the version the reviewer edited.
	DigestSeen string
	// Arguments are the complete new arguments, as a tool call would give
	// them; they go through the same normalization and checks as the
	// agent's.
	Arguments json.RawMessage
	// Reason tells the agent and the other reviewers why (required).
	Reason string
}

// Counter lets a reviewer fix a proposal instead of declining it. The new
// arguments take the same path as a proposal of the agent's: normalization,
// strict schema, the business system's validation as the agent (its
// authorization, state version and resource label), a risk tier evaluated
// anew — an edit can raise the tier, never keep a lower one it no longer
// qualifies for — and a new digest and expiry. The new version belongs to
// the same agent, under the request key models.CounterRequestKey derives
// from the chain's first key; the original ends superseded in the same
// transaction (store.SupersedeProposal), so its token is never issued and
// the agent redeems the new version's.
//
// The editor is the new version's requester: models.EditorMayApprove bars
// them from approving it, so an edit always needs another reviewer.
//
// Errors: ENotFound, EForbidden, EProposalExpired, EInvalidState,
// EArgsMismatch, EInvalidRequest (no reason, or nothing changed),
// ESchemaViolation, EClarificationNeeded, EBusinessRule (the business
// system refused the new arguments; nothing was stored and the original
// still awaits), EIdempotencyKeyReuse, EUnavailable, EOutcomeUncertain.
func (s *Service) Counter(ctx context.Context, in CounterInput) (*models.Proposal, error) {
	reason := strings.TrimSpace(in.Reason)
	if reason == "" || len(reason) > MaxReason {
		return nil, &models.Error{Code: models.EInvalidRequest, Message: "say why you edit the proposal (1–1000 characters)",
			Fields: []models.FieldProblem{{Pointer: "/reason", Message: "a reason is required"}}}
	}
	if err := models.StorableText("/reason", reason); err != nil {
		return nil, err
	}
	orig, err := s.decidable(ctx, in.Reviewer, in.ProposalID, in.DigestSeen)
	if err != nil {
		return nil, err
	}
	tool, ok := s.reg.Tool(orig.Tool)
	if !ok {
		return nil, models.Errorf(models.EInvalidState, "tool %s is no longer in the registry", orig.Tool)
	}
	prep, err := tool.Prepare(in.Arguments)
	if err != nil {
		return nil, err
	}
	digest := prep.Digest
	if digest == orig.ArgsDigest {
		return nil, models.Errorf(models.EInvalidRequest, "the edited arguments are the same as the proposal's; approve or decline it instead")
	}
	changes, err := models.ArgumentDiff(orig.Arguments, prep.Arguments)
	if err != nil {
		return nil, err
	}
	ad, err := s.adapter(orig.Tool)
	if err != nil {
		return nil, err
	}
	vr, err := ad.Validate(ctx, models.ValidateRequest{
		Tool: tool.Name, Arguments: prep.Arguments, Tenant: orig.TenantID, Principal: orig.AgentID})
	if err != nil {
		return nil, adapterErr(err)
	}
	if !vr.OK {
		e := models.Errorf(models.EBusinessRule, "the business system refuses the edited arguments; the proposal is unchanged")
		for _, msg := range vr.Problems {
			e.Fields = append(e.Fields, models.FieldProblem{Message: msg})
		}
		return nil, e
	}
	tier, err := tool.Tier(prep.Arguments)
	if err != nil {
		return nil, err
	}
	preview, err := tool.Preview(prep.Arguments, vr.ResourceLabel, time.UTC)
	if err != nil {
		return nil, err
	}
	version, root := 2, orig.RequestKey
	if orig.Supersedes != nil {
		version, root = orig.Supersedes.Version+1, orig.Supersedes.RootRequestKey
	}
	requestKey := models.CounterRequestKey(root, version)
	if err := checkRequestKey(requestKey); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	p := &models.Proposal{
		ID: models.NewID("prop"), TenantID: orig.TenantID, AgentID: orig.AgentID, AgentName: orig.AgentName,
		Tool: tool.Name, Arguments: prep.Arguments, ArgsDigest: digest, Preview: preview,
		Resource: prep.Resource, ResourceSet: prep.ResourceSet, ResourceSetDigest: prep.ResourceSetDigest,
		ResourceCount: len(prep.ResourceSet), ResourceLabel: vr.ResourceLabel, StateVersion: vr.StateVersion,
		Tier: tier, PolicyVersion: tool.PolicyVersion, RequestKey: requestKey, Context: orig.Context,
		Status: models.StatusAwaitingConfirmation, Revision: 1,
		CreatedAt: now, ExpiresAt: now.Add(tier.TTL), UpdatedAt: now,
	}
	if !p.Batch() {
		p.ResourceCount = 1
	}
	// The new version is described anew: the reviewers of the edit see
	// what it would do.
	if p.Effect, p.EffectDigest, err = s.describe(ctx, tool.Name, prep.Arguments, orig.TenantID); err != nil {
		return nil, err
	}
	c := models.Counter{OriginalID: orig.ID, RevisedID: p.ID, EditorID: in.Reviewer.ID, Reason: reason,
		Changes: changes, Version: version, RootRequestKey: root}
	out, err := s.store.SupersedeProposal(ctx, orig.ID, in.DigestSeen, p, c, now)
	if err != nil {
		return nil, err
	}
	s.changed(orig.TenantID, orig.ID)
	s.changed(out.TenantID, out.ID)
	return out, nil
}
