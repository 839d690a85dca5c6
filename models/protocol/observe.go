package protocol

import (
	"context"
	"time"

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
)

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
	// Err is the call's error; models.ErrorCode(Err) is its code.
	Err error
	// Start is when the call began and Duration how long it took (the
	// wall clock, whatever the service's clock says). Now is the service
	// clock at the end, the basis of ages such as time to decision.
	Start    time.Time
	Duration time.Duration
	Now      time.Time
}

// Observer is told the result of every propose, confirm, decline, execute
// and reconcile. Metrics are built on it, so they report what the protocol
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

// observe tells the observer, if any, about a call that began at start.
func (s *Service) observe(ctx context.Context, ev Event, start time.Time) {
	if s.observer == nil {
		return
	}
	ev.Start, ev.Duration, ev.Now = start, time.Since(start), s.clock.Now()
	s.observer.Observe(ctx, ev)
}

// Waiting is how many long-polls in this process wait for a change.
func (s *Service) Waiting() int { return s.changes.waiting() }

// Propose is propose, observed. See propose for what it guarantees and
// the errors it returns.
func (s *Service) Propose(ctx context.Context, agent models.Agent, in ProposeInput) (*models.Proposal, bool, error) {
	start := time.Now()
	p, created, err := s.propose(ctx, agent, in)
	s.observe(ctx, Event{Op: OpPropose, Proposal: p, Created: created, Err: err}, start)
	return p, created, err
}

// Confirm is confirm, observed. See confirm for what it checks and the
// errors it returns.
func (s *Service) Confirm(ctx context.Context, in ConfirmInput) (*models.Proposal, error) {
	start := time.Now()
	p, err := s.confirm(ctx, in)
	s.observe(ctx, Event{Op: OpConfirm, Proposal: p, Err: err}, start)
	return p, err
}

// Decline is decline, observed. See decline for what it checks and the
// errors it returns.
func (s *Service) Decline(ctx context.Context, in DeclineInput) (*models.Proposal, error) {
	start := time.Now()
	p, err := s.decline(ctx, in)
	s.observe(ctx, Event{Op: OpDecline, Proposal: p, Err: err}, start)
	return p, err
}

// Execute is execute, observed. See execute for what it guarantees and
// the errors it returns.
func (s *Service) Execute(ctx context.Context, agent models.Agent, proposalID, compact string) (*models.Execution, error) {
	start := time.Now()
	e, err := s.execute(ctx, agent, proposalID, compact)
	s.observe(ctx, Event{Op: OpExecute, Execution: e, Err: err}, start)
	return e, err
}

// reconcile is reconcileOne, observed.
func (s *Service) reconcile(ctx context.Context, e models.Execution) error {
	start := time.Now()
	err := s.reconcileOne(ctx, e)
	s.observe(ctx, Event{Op: OpReconcile, Execution: &e, Err: err}, start)
	return err
}
