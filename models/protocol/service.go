// Package protocol is the write-confirmation protocol in one place: propose,
// confirm or decline, issue the bound token, redeem it exactly once, execute,
// keep the receipt and reconcile what is uncertain. HTTP handlers, the
// console and the command line call it; none of them re-implements a rule.
package protocol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/checkpoint"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
)

// Config assembles a Service.
type Config struct {
	Store    *store.Store
	Registry *registry.Registry
	Tokens   *token.Service
	// Adapters maps each tool name to the adapter that validates and
	// executes it. Every tool of the registry needs one.
	Adapters map[string]models.Adapter
	Clock    models.Clock
	Logger   *slog.Logger
	// ExecutionLease bounds one execution attempt: the adapter call gets this
	// long, and the reconciler leaves the execution alone until it ran out.
	// Default 30s; keep it above the slowest adapter timeout.
	ExecutionLease time.Duration
	// PollInterval is how often long-polls look for changes made by other
	// instances. Default 500ms.
	PollInterval time.Duration
	// CheckpointInterval is how often RunBackground signs a checkpoint of
	// each audit chain that grew. Default 1m.
	CheckpointInterval time.Duration
}

// Service implements the protocol. It is safe for concurrent use, and
// several instances over one PostgreSQL database are correct together: every
// at-most-once step is decided by the database.
type Service struct {
	store    *store.Store
	reg      *registry.Registry
	tokens   *token.Service
	adapters map[string]models.Adapter
	clock    models.Clock
	log      *slog.Logger
	lease    time.Duration
	poll     time.Duration
	changes  *notifier

	checkpoints     checkpoint.Checkpointer
	checkpointEvery time.Duration
}

// New checks the configuration, makes sure a token signing key exists and
// returns the service.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Registry == nil || cfg.Tokens == nil {
		return nil, errors.New("protocol: store, registry and tokens are required")
	}
	for _, t := range cfg.Registry.Tools() {
		if cfg.Adapters[t.Name] == nil {
			return nil, fmt.Errorf("protocol: no adapter for tool %s", t.Name)
		}
	}
	s := &Service{store: cfg.Store, reg: cfg.Registry, tokens: cfg.Tokens, adapters: cfg.Adapters,
		clock: cfg.Clock, log: cfg.Logger, lease: cfg.ExecutionLease, poll: cfg.PollInterval, changes: newNotifier()}
	if s.clock == nil {
		s.clock = models.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.lease <= 0 {
		s.lease = 30 * time.Second
	}
	if s.poll <= 0 {
		s.poll = 500 * time.Millisecond
	}
	s.checkpoints = checkpoint.Checkpointer{Store: cfg.Store, Tokens: cfg.Tokens}
	s.checkpointEvery = cfg.CheckpointInterval
	if s.checkpointEvery <= 0 {
		s.checkpointEvery = time.Minute
	}
	// Tokens are signed inside the confirming transaction, which must not
	// wait on the database for a key: load (or create) the keys now.
	if err := s.tokens.EnsureKey(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Registry returns the tool registry the service enforces.
func (s *Service) Registry() *registry.Registry { return s.reg }

// Ready reports whether the database answers.
func (s *Service) Ready(ctx context.Context) error { return s.store.Ping(ctx) }

// JWKS returns the public token keys as a JSON Web Key Set.
func (s *Service) JWKS(ctx context.Context) ([]byte, error) { return s.tokens.JWKS(ctx) }

// AuthenticateAgent returns the agent an API key belongs to, or
// EUnauthenticated.
func (s *Service) AuthenticateAgent(ctx context.Context, apiKey string) (models.Agent, error) {
	if !strings.HasPrefix(apiKey, "csk_") || len(apiKey) > 200 {
		return models.Agent{}, models.Errorf(models.EUnauthenticated, "unknown or revoked API key")
	}
	return s.store.AgentByKeyHash(ctx, secret.HashAPIKey(apiKey))
}

var requestKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)

// MaxContext bounds the free text an agent gives reviewers, in characters.
const MaxContext = 4000

// Propose turns an agent's proposed write into an immutable snapshot awaiting
// confirmation: normalize, validate strictly, ask the business system
// (authorization, state version, resource label), pick the risk tier,
// compute the digest and store it. created=false means an earlier proposal
// with the same request key and digest was returned instead.
//
// Errors: EUnknownTool, EInvalidRequest, EClarificationNeeded,
// ESchemaViolation, EIdempotencyKeyReuse, EBusinessRule (the proposal is
// stored as rejected; Details carries its id), EUnavailable.
func (s *Service) Propose(ctx context.Context, agent models.Agent, in ProposeInput) (*models.Proposal, bool, error) {
	tool, ok := s.reg.Tool(in.Tool)
	if !ok {
		return nil, false, models.Errorf(models.EUnknownTool, "no tool named %q", in.Tool)
	}
	if in.RequestKey != "" && !requestKeyPattern.MatchString(in.RequestKey) {
		return nil, false, models.Errorf(models.EInvalidRequest, "request_key must be 1–200 characters of A–Z a–z 0–9 . _ : -")
	}
	if utf8.RuneCountInString(in.Context) > MaxContext {
		return nil, false, models.Errorf(models.EInvalidRequest, "context is limited to %d characters", MaxContext)
	}
	prep, err := tool.Prepare(in.Arguments)
	if err != nil {
		return nil, false, err
	}
	digest, err := models.Digest(prep.Arguments)
	if err != nil {
		return nil, false, err
	}
	if in.RequestKey != "" {
		// A retry must find its proposal even when the business state has
		// moved on since (e.g. the refund ran), so look before validating.
		prev, err := s.store.ProposalByRequestKey(ctx, agent.TenantID, in.RequestKey)
		if err == nil {
			return sameRequest(prev, agent, tool.Name, digest)
		}
		if !models.IsCode(err, models.ENotFound) {
			return nil, false, err
		}
	}
	vr, err := s.adapters[tool.Name].Validate(ctx, models.ValidateRequest{
		Tool: tool.Name, Arguments: prep.Arguments, Tenant: agent.TenantID, Principal: agent.ID})
	if err != nil {
		return nil, false, adapterErr(err)
	}
	tier, err := tool.Tier(prep.Arguments)
	if err != nil {
		return nil, false, err
	}
	preview, err := tool.Preview(prep.Arguments, vr.ResourceLabel, time.UTC)
	if err != nil {
		return nil, false, err
	}
	now := s.clock.Now()
	p := &models.Proposal{
		ID: models.NewID("prop"), TenantID: agent.TenantID, AgentID: agent.ID, AgentName: agent.Name,
		Tool: tool.Name, Arguments: prep.Arguments, ArgsDigest: digest, Preview: preview,
		Resource: prep.Resource, ResourceSet: prep.ResourceSet, ResourceSetDigest: prep.ResourceSetDigest,
		ResourceCount: len(prep.ResourceSet), ResourceLabel: vr.ResourceLabel, StateVersion: vr.StateVersion,
		Tier: tier, PolicyVersion: tool.PolicyVersion, RequestKey: in.RequestKey, Context: in.Context,
		Status: models.StatusAwaitingConfirmation, Revision: 1,
		CreatedAt: now, ExpiresAt: now.Add(tier.TTL), UpdatedAt: now,
	}
	if !p.Batch() {
		p.ResourceCount = 1
	}
	if p.RequestKey == "" {
		target := p.Resource
		if p.Batch() {
			target = "set-" + strings.TrimPrefix(p.ResourceSetDigest, models.DigestPrefix)[:16]
		}
		p.RequestKey = fmt.Sprintf("%s:%s:%s:%s", tool.Name, agent.TenantID, target, p.ID)
	}
	if !vr.OK {
		p.Status = models.StatusRejected
		for _, msg := range vr.Problems {
			p.Problems = append(p.Problems, models.FieldProblem{Message: msg})
		}
		if len(p.Problems) == 0 {
			p.Problems = []models.FieldProblem{{Message: "the business system refused the write"}}
		}
	}
	prev, inserted, err := s.store.CreateProposal(ctx, p)
	if err != nil {
		return nil, false, err
	}
	if !inserted {
		return sameRequest(prev, agent, tool.Name, digest)
	}
	s.changes.notify(p.ID)
	if p.Status == models.StatusRejected {
		return nil, false, &models.Error{Code: models.EBusinessRule, Message: "the business system refused this write",
			Fields: p.Problems, Details: map[string]any{"proposal_id": p.ID}}
	}
	return p, true, nil
}

// sameRequest decides whether prev, found under the same request key, is an
// idempotent retry of the agent's request.
func sameRequest(prev *models.Proposal, agent models.Agent, tool, digest string) (*models.Proposal, bool, error) {
	if prev.AgentID != agent.ID || prev.Tool != tool || prev.ArgsDigest != digest {
		return nil, false, models.Errorf(models.EIdempotencyKeyReuse,
			"request key %q was already used for another write; use a new key for new arguments", prev.RequestKey)
	}
	if prev.Status == models.StatusRejected {
		return nil, false, &models.Error{Code: models.EBusinessRule, Message: "the business system refused this write",
			Fields: prev.Problems, Details: map[string]any{"proposal_id": prev.ID}}
	}
	return prev, false, nil
}

// Get returns a proposal of the tenant, moving it to expired first when its
// time ran out. ENotFound for unknown ids and for other tenants' ids alike.
func (s *Service) Get(ctx context.Context, tenantID, id string) (*models.Proposal, error) {
	p, err := s.store.GetProposal(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	if s.due(p, s.clock.Now()) {
		if _, err := s.store.ExpireDue(ctx, tenantID, id, s.clock.Now()); err != nil {
			return nil, err
		}
		s.changes.notify(id)
		return s.store.GetProposal(ctx, tenantID, id)
	}
	return p, nil
}

// due reports whether p has something to expire at now.
func (s *Service) due(p *models.Proposal, now time.Time) bool {
	switch p.Status {
	case models.StatusAwaitingConfirmation:
		return p.Expired(now)
	case models.StatusConfirmed:
		return p.Token != nil && p.Token.Status == models.TokenIssued && !now.Before(p.Token.ExpiresAt)
	}
	return false
}

// Wait returns the proposal as soon as its revision differs from
// sinceRevision, or when max (capped at MaxWait) elapsed, or when ctx ends.
func (s *Service) Wait(ctx context.Context, tenantID, id string, sinceRevision int64, max time.Duration) (*models.Proposal, error) {
	if max > MaxWait {
		max = MaxWait
	}
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	p, err := s.Get(ctx, tenantID, id)
	if err != nil || p.Revision != sinceRevision {
		return p, err
	}
	for {
		// Subscribe before looking, so a change between the look and the
		// wait still wakes us. The periodic look is the cheap revision
		// read; the whole proposal is loaded only when something changed
		// or its time ran out.
		done, p2, err := s.waitOnce(ctx, tenantID, id, sinceRevision, p, tick.C, deadline.C)
		if done || err != nil {
			return p2, err
		}
		p = p2
	}
}

// waitOnce looks once and then sleeps until a wake-up; done reports that
// Wait should return p.
func (s *Service) waitOnce(ctx context.Context, tenantID, id string, since int64, p *models.Proposal,
	tick, deadline <-chan time.Time) (done bool, _ *models.Proposal, _ error) {
	changed, release := s.changes.wait(id)
	defer release()
	rev, _, err := s.store.ProposalRevision(ctx, tenantID, id)
	if err != nil {
		return true, nil, err
	}
	if rev != since || s.due(p, s.clock.Now()) {
		if p, err = s.Get(ctx, tenantID, id); err != nil || p.Revision != since {
			return true, p, err
		}
	}
	select {
	case <-changed:
	case <-tick:
	case <-deadline:
		return true, p, nil
	case <-ctx.Done():
		return true, p, nil
	}
	return false, p, nil
}

// WaitAny returns a channel closed at the next change this process makes to
// any proposal (the console's live list listens to it).
func (s *Service) WaitAny() <-chan struct{} { return s.changes.waitAny() }

// List returns one page of the tenant's proposals, newest first.
func (s *Service) List(ctx context.Context, tenantID string, q ListQuery) (Page, error) {
	for _, st := range q.Statuses {
		if !st.Valid() {
			return Page{}, models.Errorf(models.EInvalidRequest, "unknown status %q", st)
		}
	}
	items, next, err := s.store.ListProposals(ctx, store.ListFilter{TenantID: tenantID, AgentID: q.AgentID,
		Statuses: q.Statuses, Tool: q.Tool, Tier: q.Tier, Cursor: q.Cursor, Limit: q.Limit})
	if err != nil {
		return Page{}, err
	}
	return Page{Items: items, Next: next}, nil
}

// Cancel withdraws an agent's own proposal while it awaits confirmation.
// Errors: ENotFound, EProposalExpired, EInvalidState.
func (s *Service) Cancel(ctx context.Context, agent models.Agent, id string) (*models.Proposal, error) {
	if err := s.store.Cancel(ctx, agent.TenantID, agent.ID, id, s.clock.Now()); err != nil {
		return nil, err
	}
	s.changes.notify(id)
	return s.store.GetProposal(ctx, agent.TenantID, id)
}

// Sweep expires every proposal and token whose time ran out and returns how
// many proposals it expired.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	return s.store.ExpireDue(ctx, "", "", s.clock.Now())
}

// adapterErr passes domain errors through and makes anything else from an
// adapter EUnavailable.
func adapterErr(err error) error {
	var de *models.Error
	if errors.As(err, &de) {
		return err
	}
	return models.Wrap(models.EUnavailable, err, "the business system cannot be reached")
}

func hasAMR(amr []string, m string) bool { return slices.Contains(amr, m) }
