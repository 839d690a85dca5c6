package models

import "time"

// TimelineKind names one step in a proposal's life.
type TimelineKind string

// Timeline steps.
const (
	StepProposed  TimelineKind = "proposed"
	StepApproved  TimelineKind = "approved"
	StepDeclined  TimelineKind = "declined"
	StepConfirmed TimelineKind = "confirmed" // the token was issued
	StepRedeemed  TimelineKind = "redeemed"  // the token was used to execute
	StepExecuted  TimelineKind = "executed"  // the business system answered
	StepSettled   TimelineKind = "settled"   // expired, cancelled, revoked, rejected…
)

// TimelineEvent is one step: when, what, by whom (a reviewer's or agent's
// name, "" for the system) and its detail (a reason, a status).
type TimelineEvent struct {
	At     time.Time
	Kind   TimelineKind
	Who    string
	Detail string
	// Decision is the decision behind an approved or declined step.
	Decision *Decision
}

// Timeline returns what happened to p in the order it happened, from what
// the proposal records: its creation, every decision (in the order they
// were recorded), the token's issue and use, the execution, and how it
// ended when it ended otherwise. The order is that of the proposal's
// life, never of the times alone: the times come from records of
// different precision (a token's issue time is whole seconds, as in its
// iat claim), so a decision and the confirmation it completed can carry
// times in the wrong order within one second.
func (p *Proposal) Timeline() []TimelineEvent {
	out := []TimelineEvent{{At: p.CreatedAt, Kind: StepProposed, Who: p.AgentName}}
	for i := range p.Decisions {
		d := &p.Decisions[i]
		k := StepApproved
		if d.Kind == DecisionDecline {
			k = StepDeclined
		}
		out = append(out, TimelineEvent{At: d.CreatedAt, Kind: k, Who: d.UserName, Detail: d.Reason, Decision: d})
	}
	if t := p.Token; t != nil {
		out = append(out, TimelineEvent{At: t.IssuedAt, Kind: StepConfirmed})
		if t.ConsumedAt != nil {
			out = append(out, TimelineEvent{At: *t.ConsumedAt, Kind: StepRedeemed, Who: p.AgentName})
		}
	}
	if e := p.Execution; e != nil && e.CompletedAt != nil {
		out = append(out, TimelineEvent{At: *e.CompletedAt, Kind: StepExecuted, Detail: string(e.Status)})
	}
	switch p.Status {
	case StatusExpired, StatusCancelled, StatusRevoked, StatusRejected:
		at := p.UpdatedAt
		if p.Status == StatusExpired && p.Token == nil {
			at = p.ExpiresAt
		}
		out = append(out, TimelineEvent{At: at, Kind: StepSettled, Detail: string(p.Status)})
	}
	return out
}
