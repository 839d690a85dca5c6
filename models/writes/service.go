// Package writes is the write-confirmation protocol in one place, the life of
// an agent's write: propose, confirm or decline, issue the bound token,
// redeem it exactly once, execute, keep the receipt and reconcile what is
// uncertain. HTTP handlers, the MCP server, the console and the command line
// call it; none of them re-implements a rule. (Named writes, not protocol,
// so that it never clashes with go-webauthn's protocol package.)
package writes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

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
	// ExecutionLease is the longest lease one execution attempt may hold.
	// Each tool's lease is derived from its adapter: the adapter's own
	// timeout (models.TimedAdapter, else DefaultAdapterTimeout) plus
	// LeaseMargin, so the lease always outlasts the attempt and the
	// reconciler never re-sends a write that is still in flight. New refuses
	// a registry whose tool would need a longer lease. Default
	// DefaultExecutionLease.
	ExecutionLease time.Duration
	// LeaseMargin is the time on top of an adapter's timeout to record the
	// outcome. Default DefaultLeaseMargin.
	LeaseMargin time.Duration
	// PollInterval bounds how long a long-poll sleeps before it compares
	// the clock with its proposal's expiry again (it reads the database only
	// when the proposal is due). Changes wake long-polls through
	// notifications, not through this. Default 30s; tests with an injected
	// clock set it short.
	PollInterval time.Duration
	// HeartbeatInterval is how often RunBackground renews this instance's
	// heartbeat in the database. Default DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// InstanceTimeout is how old another instance's heartbeat may be before
	// the executions it holds count as abandoned (it crashed) and the
	// reconciler takes them over without waiting for their lease. Default
	// DefaultInstanceTimeout; it must exceed HeartbeatInterval.
	InstanceTimeout time.Duration
	// Limits are the default per-agent limits; tenants and agents may have
	// overrides in the database. The zero value limits nothing.
	Limits models.Limits
	// Observer is told the result of every propose, decision, execution
	// and reconciliation (metrics); nil observes nothing.
	Observer Observer
	// Tracer makes a span for every propose, decision, execution and
	// reconciliation; nil traces nothing.
	Tracer trace.Tracer
	// CheckpointInterval is how often RunBackground signs a checkpoint of
	// each audit chain that grew. Default 1m.
	CheckpointInterval time.Duration
}

// Lease defaults (see Config).
const (
	// DefaultExecutionLease is the longest lease an attempt may hold unless
	// configured: a registry's largest adapter timeout (5m) plus margin fits.
	DefaultExecutionLease = 6 * time.Minute
	// DefaultLeaseMargin is the time to record an outcome after the adapter
	// answered or timed out.
	DefaultLeaseMargin = 5 * time.Second
	// DefaultAdapterTimeout bounds a call to an adapter that does not say
	// its own timeout (the in-process demo ledger).
	DefaultAdapterTimeout = 5 * time.Second
	// DefaultHeartbeatInterval and DefaultInstanceTimeout: an instance that
	// missed about three heartbeats is taken for dead.
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultInstanceTimeout   = 7 * time.Second
)

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
	// timeouts bounds each tool's adapter call; the lease of an attempt is
	// the timeout plus margin.
	timeouts map[string]time.Duration
	margin   time.Duration
	poll     time.Duration
	beat     time.Duration
	// instance is this process's registered id: the owner of the
	// executions it attempts, and what tells its change announcements from
	// other instances'.
	instance string
	changes  *notifier
	wakeups  *wakeups
	limits   models.Limits
	// installation is this installation's id, part of every downstream
	// idempotency key.
	installation string
	observer     Observer
	tracer       trace.Tracer

	checkpoints     checkpoint.Checkpointer
	checkpointEvery time.Duration
}

// New checks the configuration, makes sure a token signing key exists and
// returns the service.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Registry == nil || cfg.Tokens == nil {
		return nil, errors.New("writes: store, registry and tokens are required")
	}
	for _, t := range cfg.Registry.Tools() {
		if cfg.Adapters[t.Name] == nil {
			return nil, fmt.Errorf("writes: no adapter for tool %s", t.Name)
		}
	}
	s := &Service{store: cfg.Store, reg: cfg.Registry, tokens: cfg.Tokens, adapters: cfg.Adapters,
		clock: cfg.Clock, log: cfg.Logger, margin: cfg.LeaseMargin, poll: cfg.PollInterval, changes: newNotifier(), wakeups: newWakeups(),
		limits: cfg.Limits, observer: cfg.Observer, tracer: cfg.Tracer}
	if s.tracer == nil {
		s.tracer = noop.NewTracerProvider().Tracer("")
	}
	if s.clock == nil {
		s.clock = models.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.margin <= 0 {
		s.margin = DefaultLeaseMargin
	}
	maxLease := cfg.ExecutionLease
	if maxLease <= 0 {
		maxLease = DefaultExecutionLease
	}
	s.timeouts = map[string]time.Duration{}
	for _, t := range cfg.Registry.Tools() {
		timeout := DefaultAdapterTimeout
		if ta, ok := cfg.Adapters[t.Name].(models.TimedAdapter); ok && ta.Timeout() > 0 {
			timeout = ta.Timeout()
		}
		if timeout+s.margin > maxLease {
			return nil, fmt.Errorf("writes: tool %s: its adapter timeout %s plus the lease margin %s exceeds the longest execution lease %s; "+
				"lower the tool's timeout or raise the execution lease", t.Name, timeout, s.margin, maxLease)
		}
		s.timeouts[t.Name] = timeout
	}
	if s.poll <= 0 {
		s.poll = 30 * time.Second
	}
	s.beat = cfg.HeartbeatInterval
	if s.beat <= 0 {
		s.beat = DefaultHeartbeatInterval
	}
	stale := cfg.InstanceTimeout
	if stale <= 0 {
		stale = DefaultInstanceTimeout
	}
	if stale <= s.beat {
		return nil, fmt.Errorf("writes: the instance timeout %s must exceed the heartbeat interval %s", stale, s.beat)
	}
	var err error
	if s.instance, err = s.store.RegisterInstance(ctx, s.clock.Now(), stale); err != nil {
		return nil, err
	}
	s.checkpoints = checkpoint.Checkpointer{Store: cfg.Store, Tokens: cfg.Tokens}
	s.checkpointEvery = cfg.CheckpointInterval
	if s.checkpointEvery <= 0 {
		s.checkpointEvery = time.Minute
	}
	// Every organization's chain names the keys that sign for it; record
	// those it does not yet (keys from before keys were recorded).
	if _, err := s.store.RecordSigningKeys(ctx); err != nil {
		return nil, err
	}
	// And the registry this server runs with, where it is another than the
	// one last recorded.
	if _, err := s.store.RecordRegistry(ctx, s.registryRecord(), false); err != nil {
		return nil, err
	}
	// Tokens are signed inside the confirming transaction, which must not
	// wait on the database for a key: load (or create) the keys now.
	if err := s.tokens.EnsureKey(ctx); err != nil {
		return nil, err
	}
	id, err := s.store.Installation(ctx)
	if err != nil {
		return nil, err
	}
	s.installation = id
	return s, nil
}

// Instance is the id under which this service holds executions.
func (s *Service) Instance() string { return s.instance }

// Heartbeat tells other instances that this one is alive. RunBackground
// calls it every HeartbeatInterval.
func (s *Service) Heartbeat(ctx context.Context) error { return s.store.Heartbeat(ctx, s.clock.Now()) }

// Registry returns the tool registry the service enforces.
func (s *Service) Registry() *registry.Registry { return s.reg }

// Ready reports whether the database answers.
func (s *Service) Ready(ctx context.Context) error { return s.store.Ping(ctx) }

// JWKS returns the public token keys as a JSON Web Key Set.
func (s *Service) JWKS(ctx context.Context) ([]byte, error) { return s.tokens.JWKS(ctx) }

// AuthenticateAgent returns the agent an API key belongs to, or
// EUnauthenticated.
func (s *Service) AuthenticateAgent(ctx context.Context, apiKey string) (models.Agent, error) {
	if strings.HasPrefix(apiKey, AuditKeyPrefix) {
		// Said from the prefix alone: whether the key is valid is not
		// told here.
		return models.Agent{}, models.Errorf(models.EUnauthenticated,
			"this is an audit reader key (csa_…), which reads receipts and the audit log only; this request needs an agent key (csk_…)")
	}
	if !strings.HasPrefix(apiKey, secret.APIKeyPrefix) || len(apiKey) > 200 {
		return models.Agent{}, models.Errorf(models.EUnauthenticated, "unknown or revoked API key")
	}
	return s.store.AgentByKeyHash(ctx, secret.HashAPIKey(apiKey))
}

// requestKeyPattern is the alphabet of request keys: ASCII letters, digits
// and . _ : -, at most MaxRequestKey characters.
var requestKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)

// MaxRequestKey bounds request keys, in characters (all ASCII).
const MaxRequestKey = 200

// MaxContext bounds the free text an agent gives reviewers, in characters.
const MaxContext = 4000

// checkRequestKey refuses a request key that could not travel unchanged as
// an HTTP header value and as one URL path segment, or that would be read as
// a path step ("." and ".."): such a key must be refused before anything is
// stored or sent, never left to fail at execute time. The business system
// sees a key derived from it (models.DownstreamKey), but the request key
// itself appears in tokens, receipts and logs of both sides.
func checkRequestKey(key string) error {
	if !requestKeyPattern.MatchString(key) || key == "." || key == ".." {
		return models.Errorf(models.EInvalidRequest,
			"request_key must be 1–%d characters of A–Z a–z 0–9 . _ : - and not \".\" or \"..\"", MaxRequestKey)
	}
	return nil
}

// Propose turns an agent's proposed write into an immutable snapshot awaiting
// confirmation: normalize, validate strictly, ask the business system
// (authorization, state version, resource label), pick the risk tier,
// compute the digest and store it. created=false means an earlier proposal
// with the same request key and digest was returned instead.
//
// A new proposal (not an idempotent retry) spends one of the agent's
// proposals per minute before the business system is asked, and is refused
// when the agent already has as many open proposals as its limit allows.
//
// A new proposal that fits a live standing mandate of its agent and tool
// comes back confirmed, with its token, without a person (see
// applyMandates); one that a mandate covers but does not fit comes back
// awaiting, with MandateNote saying why.
//
// Errors: EUnknownTool, EInvalidRequest, EClarificationNeeded,
// ESchemaViolation, EIdempotencyKeyReuse, EBusinessRule (the proposal is
// stored as rejected; Details carries its id), ERateLimited (Details carries
// "limit" and "retry_after" in seconds), EUnavailable (nothing was stored),
// EOutcomeUncertain (the database failed at commit and it cannot be told
// whether the proposal was stored; Details carries the request_key to retry
// with).
func (s *Service) propose(ctx context.Context, agent models.Agent, in ProposeInput) (*models.Proposal, bool, error) {
	tool, ok := s.reg.Tool(in.Tool)
	if !ok {
		return nil, false, models.Errorf(models.EUnknownTool, "no tool named %q", in.Tool)
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
	prep, err := tool.Prepare(in.Arguments)
	if err != nil {
		return nil, false, err
	}
	digest := prep.Digest
	id := models.NewID("prop")
	requestKey := in.RequestKey
	if requestKey == "" {
		// Derived before the business system is asked or anything is
		// stored, so that a resource id no key can carry is refused now.
		target := prep.Resource
		if prep.ResourceSetDigest != "" {
			target = "set-" + strings.TrimPrefix(prep.ResourceSetDigest, models.DigestPrefix)[:16]
		}
		requestKey = fmt.Sprintf("%s:%s:%s:%s", tool.Name, agent.TenantID, target, id)
		if err := checkRequestKey(requestKey); err != nil {
			return nil, false, models.Errorf(models.EInvalidRequest,
				"the resource id %q cannot be part of a request key (A–Z a–z 0–9 . _ : -, at most %d characters in all); "+
					"send a request_key of your own", target, MaxRequestKey)
		}
	}
	// A retry must find its proposal even when the business state has
	// moved on since (e.g. the refund ran), so look before validating.
	prev, limits, err := s.admit(ctx, agent, in.RequestKey, s.clock.Now())
	if err != nil {
		return nil, false, err
	}
	if prev != nil {
		return sameRequest(prev, agent, tool.Name, digest)
	}
	vr, effect, effectDigest, err := s.validate(ctx, models.ValidateRequest{
		Tool: tool.Name, Arguments: prep.Arguments, Tenant: agent.TenantID, Principal: agent.ID})
	if err != nil {
		return nil, false, err
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
		ID: id, TenantID: agent.TenantID, AgentID: agent.ID, AgentName: agent.Name,
		Tool: tool.Name, Arguments: prep.Arguments, ArgsDigest: digest, Preview: preview,
		Resource: prep.Resource, ResourceSet: prep.ResourceSet, ResourceSetDigest: prep.ResourceSetDigest,
		ResourceCount: len(prep.ResourceSet), ResourceLabel: vr.ResourceLabel, StateVersion: vr.StateVersion,
		Tier: tier, PolicyVersion: tool.PolicyVersion, RequestKey: requestKey, Context: in.Context,
		Effect: effect, EffectDigest: effectDigest,
		Status: models.StatusAwaitingConfirmation, Revision: 1,
		CreatedAt: now, ExpiresAt: now.Add(tier.TTL), UpdatedAt: now,
	}
	if !p.Batch() {
		p.ResourceCount = 1
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
	prev, inserted, mandates, err := s.store.CreateProposalSeeingMandates(ctx, p, limits.OpenProposals)
	if models.IsCode(err, models.EOutcomeUncertain) {
		// The agent learns the key to retry with, also when it sent none:
		// a retry with it finds the proposal if it was stored.
		return nil, false, &models.Error{Code: models.EOutcomeUncertain,
			Message: "the proposal may or may not have been stored; retry with the same request_key (details.request_key)",
			Details: map[string]any{"request_key": p.RequestKey, "proposal_id": p.ID}, Err: err}
	}
	if err != nil {
		return nil, false, err
	}
	if !inserted {
		return sameRequest(prev, agent, tool.Name, digest)
	}
	s.changed(p.TenantID, p.ID)
	if p.Status == models.StatusRejected {
		return nil, false, &models.Error{Code: models.EBusinessRule, Message: "the business system refused this write",
			Fields: p.Problems, Details: map[string]any{"proposal_id": p.ID}}
	}
	if !mandates {
		// No live mandate of the tenant for the tool when it was
		// stored: none can confirm it.
		return p, true, nil
	}
	return s.applyMandates(ctx, agent, p), true, nil
}

// sameRequest decides whether prev, the agent's own proposal under the same
// request key, is an idempotent retry of the agent's request: the same tool
// and digest return it; anything else is EIdempotencyKeyReuse.
func sameRequest(prev *models.Proposal, agent models.Agent, tool, digest string) (*models.Proposal, bool, error) {
	if prev.AgentID != agent.ID {
		// Keys are per agent; the store only finds the agent's own.
		return nil, false, models.Errorf(models.EInternal, "request key lookup crossed agents")
	}
	if prev.Tool != tool || prev.ArgsDigest != digest {
		return nil, false, &models.Error{Code: models.EIdempotencyKeyReuse,
			Message: fmt.Sprintf("request key %q was already used by this agent for other arguments (proposal %s); "+
				"repeat the same write to get that proposal back, or use a new key for a new write", prev.RequestKey, prev.ID),
			Details: map[string]any{"proposal_id": prev.ID}}
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
		s.changed(tenantID, id)
		return s.store.GetProposal(ctx, tenantID, id)
	}
	return p, nil
}

// AgentGet is Get for an agent: it returns the proposal only when the agent
// may read it (models.Agent.MayRead: its own, or any of the tenant's with
// tenant-wide read). ENotFound otherwise, as for an unknown id, so that
// other agents' proposals are not revealed.
func (s *Service) AgentGet(ctx context.Context, agent models.Agent, id string) (*models.Proposal, error) {
	p, err := s.Get(ctx, agent.TenantID, id)
	if err != nil {
		return nil, err
	}
	if !agent.MayRead(p) {
		return nil, models.Errorf(models.ENotFound, "no proposal %q", id)
	}
	return p, nil
}

// AgentList is List for an agent: only its own proposals, unless it may
// read the tenant's (then q.AgentID narrows as usual).
func (s *Service) AgentList(ctx context.Context, agent models.Agent, q ListQuery) (Page, error) {
	if !agent.ReadAll {
		if q.AgentID != "" && q.AgentID != agent.ID {
			return Page{}, nil
		}
		q.AgentID = agent.ID
	}
	return s.List(ctx, agent.TenantID, q)
}

// due reports whether p has something to expire at now.
func (s *Service) due(p *models.Proposal, now time.Time) bool {
	at, ok := dueAt(p)
	return ok && !now.Before(at)
}

// dueAt is when p has something to expire, if it ever has: its window
// while it awaits a decision, its token's lifetime while the token is
// unused (confirmed) or may be used again (failed_retryable).
func dueAt(p *models.Proposal) (time.Time, bool) {
	switch p.Status {
	case models.StatusAwaitingConfirmation:
		return p.ExpiresAt, true
	case models.StatusConfirmed:
		if p.Token != nil && p.Token.Status == models.TokenIssued {
			return p.Token.ExpiresAt, true
		}
	case models.StatusFailedRetryable:
		if p.Token != nil {
			return p.Token.ExpiresAt, true
		}
	}
	return time.Time{}, false
}

// Wait returns the proposal as soon as its revision differs from
// sinceRevision, or when max (capped at MaxWait) elapsed, or when ctx ends.
// It loads the proposal once, and then again only when it was told of a
// change (or the proposal's own expiry came): it never polls the database.
// The proposal returned after a change may be shared with the other
// waiters it woke: callers must not modify it.
func (s *Service) Wait(ctx context.Context, tenantID, id string, sinceRevision int64, max time.Duration) (*models.Proposal, error) {
	// Subscribe before looking, so that a change between the look and the
	// wait still wakes us.
	pk := s.park(ctx, tenantID, id, max, "", "")
	p, err := s.Get(ctx, tenantID, id)
	if err != nil || p.Revision != sinceRevision {
		pk.abandon()
		return p, err
	}
	pk.watch(p)
	return waitOn(ctx, pk, p)
}

// waitOn waits on pk, the long-poll on p: it returns the newer revision of
// p, or p when there is none.
func waitOn(ctx context.Context, pk *Parked, p *models.Proposal) (*models.Proposal, error) {
	q, err := pk.Wait(ctx)
	if q == nil && err == nil {
		return p, nil
	}
	return q, err
}

// WaitChange is Wait for a caller that has just loaded p (e.g. to answer a
// conditional request): it returns a newer revision of p as soon as there is
// one, or p when max (capped at MaxWait) elapsed or ctx ended. It reads only
// p's revision before it waits, to see a change made since p was loaded.
func (s *Service) WaitChange(ctx context.Context, p *models.Proposal, max time.Duration) (*models.Proposal, error) {
	pk, q, err := s.parkChange(ctx, p, max, "", "")
	if pk == nil {
		return q, err
	}
	return waitOn(ctx, pk, p)
}

// parkChange subscribes a long-poll on p and returns it, unstarted, unless
// p changed since it was loaded: then it returns the newer revision. The
// agent's slot is given back when the long-poll ends, or at once when it
// does not begin.
func (s *Service) parkChange(ctx context.Context, p *models.Proposal, max time.Duration, slot, agentID string) (*Parked, *models.Proposal, error) {
	pk := s.park(ctx, p.TenantID, p.ID, max, slot, agentID)
	rev, _, err := s.store.ProposalRevision(ctx, p.TenantID, p.ID)
	if err != nil || rev != p.Revision {
		pk.abandon()
		if err != nil {
			return nil, nil, err
		}
		q, err := s.Get(ctx, p.TenantID, p.ID)
		return nil, q, err
	}
	pk.watch(p)
	return pk, nil, nil
}

// AgentWait is WaitChange on behalf of an agent, within the agent's limit of
// concurrent long-polls, which holds across every instance sharing the
// database. Errors: ERateLimited when the agent already holds as many as
// its limit allows, and those of WaitChange.
func (s *Service) AgentWait(ctx context.Context, agent models.Agent, p *models.Proposal, max time.Duration) (*models.Proposal, error) {
	pk, q, err := s.AgentPark(ctx, agent, p, max)
	if pk == nil {
		return q, err
	}
	return waitOn(ctx, pk, p)
}

// AgentPark begins AgentWait without holding the caller: it takes the
// agent's long-poll slot and returns the long-poll on p, not yet started
// (see Parked: Start it, or Wait on it; either gives nil, not p, when p
// stays unchanged), or, when p already changed since it was loaded, no
// long-poll and the newer revision. The slot is given
// back when the long-poll ends. Errors: those of AgentWait.
func (s *Service) AgentPark(ctx context.Context, agent models.Agent, p *models.Proposal, max time.Duration) (*Parked, *models.Proposal, error) {
	if p.TenantID != agent.TenantID {
		return nil, nil, models.Errorf(models.ENotFound, "no proposal %q", p.ID)
	}
	limits, err := s.AgentLimits(ctx, agent)
	if err != nil {
		return nil, nil, err
	}
	var slot string
	if limits.ConcurrentWaits > 0 {
		if slot, err = s.store.AcquireWait(ctx, agent.ID, limits.ConcurrentWaits, s.clock.Now(), min(max, MaxWait)); err != nil {
			return nil, nil, err
		}
	}
	return s.parkChange(ctx, p, max, slot, agent.ID)
}

// admit is what each new proposal of an agent passes before it is made,
// whatever its kind: a retry under a request key the agent used before gets
// that proposal back (prev), and otherwise one of the agent's proposals per
// minute is taken. It returns the agent's limits for the insert.
func (s *Service) admit(ctx context.Context, agent models.Agent, requestKey string, now time.Time) (prev *models.Proposal, limits models.Limits, err error) {
	if requestKey != "" {
		prev, err := s.store.ProposalByRequestKey(ctx, agent.TenantID, agent.ID, requestKey)
		if err == nil {
			return prev, limits, nil
		}
		if !models.IsCode(err, models.ENotFound) {
			return nil, limits, err
		}
	}
	if limits, err = s.AgentLimits(ctx, agent); err != nil {
		return nil, limits, err
	}
	if limits.ProposalsPerMinute > 0 {
		if err := s.store.TakeProposal(ctx, agent.ID, limits.ProposalsPerMinute, now); err != nil {
			return nil, limits, err
		}
	}
	return nil, limits, nil
}

// AgentLimits returns the limits that hold for the agent: the service's
// defaults with the tenant's and then the agent's overrides applied.
func (s *Service) AgentLimits(ctx context.Context, agent models.Agent) (models.Limits, error) {
	return s.store.EffectiveLimits(ctx, agent.TenantID, agent.ID, s.limits)
}

// recheckAfter is how long a long-poll sleeps before it compares the clock
// with its proposal's own expiry (at, when due) again: until that expiry,
// but at most the recheck interval (an injected clock does not move with
// real time).
func (s *Service) recheckAfter(at time.Time, due bool) time.Duration {
	if !due {
		return s.poll
	}
	return min(max(at.Sub(s.clock.Now()), time.Millisecond), s.poll)
}

// WaitAny returns a channel closed at the next change of any proposal of the
// tenant (the console's live list listens to it). Changes of other tenants'
// proposals never close it.
func (s *Service) WaitAny(tenantID string) <-chan struct{} { return s.changes.waitTenant(tenantID) }

// changed tells this process's waiters of a proposal that it changed.
// Those of other instances hear of it from the database: on PostgreSQL the
// transaction that recorded the change announced it as it committed (see
// store.Change).
func (s *Service) changed(tenantID, id string) { s.changes.notify(tenantID, id) }

// Listen feeds changes made by other instances to this process's waiters
// until ctx ends. On PostgreSQL it LISTENs on one connection of its own and
// wakes exactly the waiters of each announced proposal; when the connection
// is lost it reconnects with backoff and then wakes every waiter once, since
// changes may have been missed meanwhile. On SQLite it watches for writes by
// other processes (the command line) and wakes every waiter once after each.
// Run it beside the server.
func (s *Service) Listen(ctx context.Context) {
	const first, most = 100 * time.Millisecond, 10 * time.Second
	backoff := first
	for {
		listening := false
		err := s.store.ListenChanges(ctx, func() {
			listening = true
			s.changes.wakeEveryone()
		}, func(c store.Change) {
			if c.Source != s.instance {
				s.changes.notify(c.TenantID, c.ID)
			}
		})
		if ctx.Err() != nil {
			return
		}
		if listening {
			backoff = first
		}
		s.log.Warn("proposal change notifications interrupted; reconnecting", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, most)
	}
}

// List returns one page of the tenant's proposals, newest first.
func (s *Service) List(ctx context.Context, tenantID string, q ListQuery) (Page, error) {
	for _, st := range q.Statuses {
		if !st.Valid() {
			return Page{}, models.Errorf(models.EInvalidRequest, "unknown status %q", st)
		}
	}
	if q.AgentName != "" {
		a, err := s.store.AgentByName(ctx, tenantID, q.AgentName)
		if models.IsCode(err, models.ENotFound) || (err == nil && q.AgentID != "" && a.ID != q.AgentID) {
			return Page{}, nil
		}
		if err != nil {
			return Page{}, err
		}
		q.AgentID = a.ID
	}
	if q.ReviewerName != "" {
		u, _, err := s.store.UserCredentials(ctx, tenantID, q.ReviewerName)
		if models.IsCode(err, models.ENotFound) {
			return Page{}, nil
		}
		if err != nil {
			return Page{}, err
		}
		q.ReviewerID = u.ID
	}
	f := store.ListFilter{TenantID: tenantID, AgentID: q.AgentID, Statuses: q.Statuses, Tool: q.Tool, Tier: q.Tier,
		Resource: q.Resource, ReviewerID: q.ReviewerID, CreatedBefore: q.Before, WithDecisions: q.WithDecisions,
		Cursor: q.Cursor, Limit: q.Limit}
	if q.ByTimeLeft {
		f.Order = store.ListExpiring
	}
	items, next, err := s.store.ListProposals(ctx, f)
	if err != nil {
		return Page{}, err
	}
	return Page{Items: items, Next: next}, nil
}

// CountAwaiting counts the tenant's proposals awaiting a decision (some
// may have run out of time since the last sweep).
func (s *Service) CountAwaiting(ctx context.Context, tenantID string) (int, error) {
	return s.store.CountProposals(ctx, tenantID, models.StatusAwaitingConfirmation)
}

// Cancel withdraws an agent's own proposal while it awaits confirmation; a
// second cancel answers the cancelled proposal again (a retry is safe).
// Errors: ENotFound, EProposalExpired, EInvalidState.
func (s *Service) Cancel(ctx context.Context, agent models.Agent, id string) (*models.Proposal, error) {
	if err := s.store.Cancel(ctx, agent.TenantID, agent.ID, id, s.clock.Now()); err != nil {
		return nil, err
	}
	s.changed(agent.TenantID, id)
	return s.store.GetProposal(ctx, agent.TenantID, id)
}

// Sweep expires every proposal and token whose time ran out and returns how
// many proposals it expired.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	refs, err := s.store.ExpireDueRefs(ctx, "", "", s.clock.Now())
	for _, r := range refs {
		s.changed(r.TenantID, r.ID)
	}
	return len(refs), err
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

// registryRecord is the registry as the audit chain records it.
func (s *Service) registryRecord() store.RegistryRecord {
	return store.RegistryRecord{Digest: s.reg.Digest(), Versions: s.reg.PolicyVersions(), Tools: s.reg.ToolDigests()}
}
