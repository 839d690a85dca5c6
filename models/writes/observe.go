package writes

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/models"
)

// Op names a protocol call an Observer is told about.
type Op string

// Observed operations.
const (
	OpPropose   Op = "propose"
	OpConfirm   Op = "confirm"
	OpDecline   Op = "decline"
	OpExecute   Op = "execute"
	OpReconcile Op = "reconcile"
	// OpReconsider confirms (or not) a proposal a change of group
	// membership completed; Event.Outcome says what became of it.
	OpReconsider Op = "reconsider"
)

// OutcomeNotClaimed is an OpReconcile's Outcome when nothing was attempted:
// another instance claimed the execution first, or settled it meanwhile.
const OutcomeNotClaimed = "not_claimed"

// Event is the result of one protocol call, as the caller got it.
type Event struct {
	Op Op
	// Proposal is the proposal after the call (nil when the call failed
	// before it was read). For OpPropose, Created tells a new proposal from
	// a replay of the same request key.
	Proposal *models.Proposal
	Created  bool
	// Execution is the execution after OpExecute, or the one OpReconcile
	// worked on.
	Execution *models.Execution
	// Outcome, for OpReconsider, is what became of the proposal:
	// "confirmed", "unchanged" (decided, expired or no longer complete
	// meanwhile), "dropped" (its target changed since the preview) or
	// "put_off" (to be tried again; Err says why). For OpReconcile it is
	// OutcomeNotClaimed when another instance had claimed the execution,
	// and empty when this one made the attempt.
	Outcome string
	// Err is the call's error; models.ErrorCode(Err) is its code.
	Err error
	// Start is when the call began and Duration how long it took (the
	// wall clock, whatever the service's clock says). Now is the service
	// clock at the end, the basis of ages such as time to decision.
	Start    time.Time
	Duration time.Duration
	Now      time.Time
}

// Observer is told the result of every propose, confirm, decline, execute,
// reconcile and reconsider. Metrics are built on it, so they report what the protocol
// decided and never decide anything themselves. Observe must be quick and
// must not block: it runs on the caller's path.
type Observer interface {
	Observe(ctx context.Context, ev Event)
}

// Observers calls each of its members in turn.
type Observers []Observer

// Observe implements Observer.
func (o Observers) Observe(ctx context.Context, ev Event) {
	for _, x := range o {
		x.Observe(ctx, ev)
	}
}

// Span attribute keys.
const (
	AttrProposalID  = attribute.Key("countersign.proposal_id")
	AttrExecutionID = attribute.Key("countersign.execution_id")
	AttrTool        = attribute.Key("countersign.tool")
	AttrTenantID    = attribute.Key("countersign.tenant_id")
	AttrStatus      = attribute.Key("countersign.status")
	AttrErrorCode   = attribute.Key("countersign.error_code")
)

// call is one observed protocol call: its span and its start.
type call struct {
	s     *Service
	ctx   context.Context
	span  trace.Span
	start time.Time
}

// begin starts the span "countersign.<op>"; the call's work runs in the
// returned context, so adapters it calls see the span.
func (s *Service) begin(ctx context.Context, op Op, attrs ...attribute.KeyValue) (context.Context, *call) {
	ctx, span := s.tracer.Start(ctx, "countersign."+string(op), trace.WithAttributes(attrs...))
	return ctx, &call{s: s, ctx: ctx, span: span, start: time.Now()}
}

// end records the result on the span, ends it and tells the observer.
func (c *call) end(ev Event) {
	if p := ev.Proposal; p != nil {
		c.span.SetAttributes(AttrProposalID.String(p.ID), AttrTool.String(p.Tool), AttrTenantID.String(p.TenantID),
			AttrStatus.String(string(p.Status)))
	}
	if e := ev.Execution; e != nil {
		c.span.SetAttributes(AttrExecutionID.String(e.ID), AttrProposalID.String(e.ProposalID), AttrTool.String(e.Operation))
		if ev.Op == OpExecute {
			c.span.SetAttributes(AttrStatus.String(string(e.Status)))
		}
	}
	if ev.Err != nil {
		code := models.ErrorCode(ev.Err)
		c.span.SetAttributes(AttrErrorCode.String(string(code)))
		c.span.SetStatus(codes.Error, string(code))
	}
	c.span.End()
	if c.s.observer != nil {
		ev.Start, ev.Duration, ev.Now = c.start, time.Since(c.start), c.s.clock.Now()
		c.s.observer.Observe(c.ctx, ev)
	}
}

// Waiting is how many long-polls in this process wait for a change.
func (s *Service) Waiting() int { return s.changes.waiting() }

// Propose is propose, traced and observed. See propose for what it
// guarantees and the errors it returns.
func (s *Service) Propose(ctx context.Context, agent models.Agent, in ProposeInput) (*models.Proposal, bool, error) {
	ctx, c := s.begin(ctx, OpPropose, AttrTool.String(in.Tool), AttrTenantID.String(agent.TenantID))
	p, created, err := s.propose(ctx, agent, in)
	c.end(Event{Op: OpPropose, Proposal: p, Created: created, Err: err})
	return p, created, err
}

// Confirm is confirm, traced and observed. See confirm for what it checks
// and the errors it returns.
func (s *Service) Confirm(ctx context.Context, in ConfirmInput) (*models.Proposal, error) {
	ctx, c := s.begin(ctx, OpConfirm, AttrProposalID.String(in.ProposalID))
	p, err := s.confirm(ctx, in)
	c.end(Event{Op: OpConfirm, Proposal: p, Err: err})
	return p, err
}

// Decline is decline, traced and observed. See decline for what it checks
// and the errors it returns.
func (s *Service) Decline(ctx context.Context, in DeclineInput) (*models.Proposal, error) {
	ctx, c := s.begin(ctx, OpDecline, AttrProposalID.String(in.ProposalID))
	p, err := s.decline(ctx, in)
	c.end(Event{Op: OpDecline, Proposal: p, Err: err})
	return p, err
}

// Execute is execute, traced and observed. See execute for what it
// guarantees and the errors it returns.
func (s *Service) Execute(ctx context.Context, agent models.Agent, proposalID, compact string) (*models.Execution, error) {
	ctx, c := s.begin(ctx, OpExecute, AttrProposalID.String(proposalID), AttrTenantID.String(agent.TenantID))
	e, err := s.execute(ctx, agent, proposalID, compact)
	c.end(Event{Op: OpExecute, Execution: e, Err: err})
	return e, err
}

// reconcile is reconcileOne, traced and observed.
func (s *Service) reconcile(ctx context.Context, e models.Execution) error {
	ctx, c := s.begin(ctx, OpReconcile, AttrProposalID.String(e.ProposalID), AttrExecutionID.String(e.ID),
		AttrTenantID.String(e.TenantID))
	err := s.reconcileOne(ctx, e)
	if errors.Is(err, errNotClaimed) {
		c.end(Event{Op: OpReconcile, Execution: &e, Outcome: OutcomeNotClaimed})
		return nil
	}
	c.end(Event{Op: OpReconcile, Execution: &e, Err: err})
	return err
}
