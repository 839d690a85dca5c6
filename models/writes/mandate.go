package writes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
)

// MandateRequestWindow is how long a mandate proposal awaits its grant
// (less when the terms end sooner).
const MandateRequestWindow = 24 * time.Hour

// MandateInput is an agent's request for a standing mandate.
type MandateInput struct {
	Terms      models.MandateTerms
	RequestKey string // optional; derived when empty
	Context    string // free text for reviewers
}

// RequestMandate turns an agent's request for a standing mandate into a
// proposal of kind mandate awaiting confirmation. The terms are checked
// against the tool, put in canonical form and digested; the proposal's
// tier is the strictest tier the terms cover, so granting it takes what
// confirming the riskiest covered write takes (security key, quorum,
// self-approval and separation-of-duty rules alike). An agent asks for
// itself only: Agents defaults to the agent and may name no other.
// created=false means the same request (request key and digest) was
// returned again.
//
// Errors: EUnknownTool, EInvalidRequest, EForbidden, EIdempotencyKeyReuse,
// ERateLimited, EUnavailable, EOutcomeUncertain.
func (s *Service) RequestMandate(ctx context.Context, agent models.Agent, in MandateInput) (*models.Proposal, bool, error) {
	tool, ok := s.reg.Tool(in.Terms.Tool)
	if !ok {
		return nil, false, models.Errorf(models.EUnknownTool, "no tool named %q", in.Terms.Tool)
	}
	if in.RequestKey != "" {
		if err := checkRequestKey(in.RequestKey); err != nil {
			return nil, false, err
		}
	}
	if n := utf8.RuneCountInString(in.Context); n > MaxContext {
		return nil, false, models.Errorf(models.EInvalidRequest, "context must be at most %d characters, got %d", MaxContext, n)
	}
	if err := models.StorableText("/context", in.Context); err != nil {
		return nil, false, err
	}
	terms := in.Terms
	if len(terms.Agents) == 0 {
		terms.Agents = []string{agent.ID}
	}
	for _, a := range terms.Agents {
		if a != agent.ID {
			return nil, false, models.Errorf(models.EForbidden, "an agent may ask for a mandate for itself only, not for %q", a)
		}
	}
	now := s.clock.Now()
	if err := terms.Check(tool.MandateTool(), now); err != nil {
		return nil, false, err
	}
	preview, err := terms.Preview(registry.FormatMoney,
		models.MandateNames{ToolTitle: tool.Title, Agents: map[string]string{agent.ID: agent.Name}})
	if err != nil {
		// The formatter's own text names the package; the agent is told
		// what to change.
		return nil, false, &models.Error{Code: models.EInvalidRequest, Message: "the mandate's currency is unknown",
			Fields: []models.FieldProblem{{Pointer: "/money/currency", Message: "is not an ISO 4217 currency this server formats"}}}
	}
	args, digest, err := terms.Canonical()
	if err != nil {
		return nil, false, err
	}
	tier, ok := tool.TierNamed(terms.Tiers[0])
	if !ok {
		return nil, false, models.Errorf(models.EInternal, "tier %s vanished from %s", terms.Tiers[0], tool.Name)
	}
	id := models.NewID("prop")
	requestKey := in.RequestKey
	if requestKey == "" {
		requestKey = fmt.Sprintf("mandate:%s:%s:%s", tool.Name, agent.TenantID, id)
	}
	prev, limits, err := s.admit(ctx, agent, in.RequestKey, now)
	if err != nil {
		return nil, false, err
	}
	if prev != nil {
		return sameRequest(prev, agent, tool.Name, digest)
	}
	expires := now.Add(MandateRequestWindow)
	if terms.ExpiresAt.Before(expires) {
		expires = terms.ExpiresAt
	}
	// The grant follows the strictest covered tier's rules, but it awaits
	// its reviewers for the request's own window; no token is issued for
	// it, so the tier's time-to-live is that window.
	tier.TTL = expires.Sub(now)
	p := &models.Proposal{
		ID: id, TenantID: agent.TenantID, AgentID: agent.ID, AgentName: agent.Name, Kind: models.KindMandate,
		Tool: tool.Name, Arguments: args, ArgsDigest: digest, Preview: preview,
		ResourceLabel: "Standing mandate for " + tool.Title, Tier: tier, PolicyVersion: tool.PolicyVersion,
		RequestKey: requestKey, Context: in.Context, Status: models.StatusAwaitingConfirmation, Revision: 1,
		CreatedAt: now, ExpiresAt: expires, UpdatedAt: now,
	}
	prev, inserted, err := s.store.CreateProposalWithin(ctx, p, limits.OpenProposals)
	if err != nil {
		return nil, false, err
	}
	if !inserted {
		return sameRequest(prev, agent, tool.Name, digest)
	}
	s.changed(p.TenantID, p.ID)
	return p, true, nil
}

// applyMandates confirms a new awaiting write proposal under the first of
// the tenant's live mandates covering its agent and tool that it fits, by
// store.ConfirmByMandate (budget, count and token in one transaction).
// When mandates cover it but none can confirm it, the first reason is
// recorded on the proposal and a person decides. Any failure leaves the
// proposal awaiting a person: a mandate never makes a write less checked.
func (s *Service) applyMandates(ctx context.Context, agent models.Agent, p *models.Proposal) *models.Proposal {
	mandates, err := s.store.LiveMandates(ctx, p.TenantID, p.Tool)
	if err != nil {
		s.log.Warn("reading mandates; the proposal waits for a person", "proposal", p.ID, "err", err)
		return p
	}
	now := s.clock.Now()
	note := ""
	for _, m := range mandates {
		if !m.Covers(agent.ID, p.Tool) {
			continue
		}
		amount, reason := m.Fit(p, now)
		if reason == "" && !s.grantCovers(m, p) {
			reason = models.MandateTierAbove
		}
		if reason == "" {
			out, err := s.store.ConfirmByMandate(ctx, p.TenantID, p.ID, m.ID, amount, now, func(q *models.Proposal) (models.Token, error) {
				return s.issue(ctx, q, now)
			})
			if err == nil {
				s.changed(p.TenantID, p.ID)
				return out
			}
			var refused *store.MandateRefused
			if !errors.As(err, &refused) {
				s.log.Warn("confirming under a mandate; the proposal waits for a person", "proposal", p.ID, "mandate", m.ID, "err", err)
				return p
			}
			reason = refused.Reason
		}
		if note == "" || models.MandateReasonNearer(reason, note) {
			note = reason
		}
	}
	if note == "" {
		return p
	}
	if err := s.store.NoteMandate(ctx, p.TenantID, p.ID, note, now); err != nil {
		s.log.Warn("noting why no mandate applied", "proposal", p.ID, "err", err)
		return p
	}
	s.changed(p.TenantID, p.ID)
	if out, err := s.store.GetProposal(ctx, p.TenantID, p.ID); err == nil {
		return out
	}
	p.MandateNote = note
	return p
}

// grantCovers reports whether the tier mandate m was granted under (the
// first its terms name) asks for at least what p's tier asks for: a
// mandate whose terms list a stricter tier, as terms checked before tiers
// were compared by what they require could, confirms none of its writes.
func (s *Service) grantCovers(m models.Mandate, p *models.Proposal) bool {
	tool, ok := s.reg.Tool(p.Tool)
	if !ok || len(m.Terms.Tiers) == 0 {
		return false
	}
	grant, ok := tool.TierNamed(m.Terms.Tiers[0])
	return ok && p.Tier.NoStricterThan(grant)
}

// Mandates returns the tenant's mandates, newest first, with their
// grantors' names.
func (s *Service) Mandates(ctx context.Context, tenantID string) ([]models.Mandate, error) {
	return s.store.ListMandates(ctx, tenantID)
}

// Mandate returns one mandate of the tenant, or ENotFound.
func (s *Service) Mandate(ctx context.Context, tenantID, id string) (models.Mandate, error) {
	return s.store.GetMandate(ctx, tenantID, id)
}

// RevokeMandate ends a mandate at once (administrators only): no token is
// issued under it after this returns. Tokens it issued before stay valid
// until redeemed, expired or revoked one by one (Revoke).
// Errors: EForbidden, ENotFound, EInvalidState.
func (s *Service) RevokeMandate(ctx context.Context, admin models.User, id string) (models.Mandate, error) {
	if admin.Role != models.RoleAdmin || admin.Disabled {
		return models.Mandate{}, models.Errorf(models.EForbidden, "only an administrator may revoke a mandate")
	}
	if strings.TrimSpace(id) == "" {
		return models.Mandate{}, models.Errorf(models.ENotFound, "no mandate")
	}
	if err := s.store.RevokeMandate(ctx, admin.TenantID, id, admin.ID, s.clock.Now()); err != nil {
		return models.Mandate{}, err
	}
	return s.store.GetMandate(ctx, admin.TenantID, id)
}
