package models

// Status is a proposal's state. The strings are part of the API and are never
// merged: declined is not cancelled, unknown is not failed.
type Status string

// Proposal states (SPEC section 3).
const (
	StatusProposed             Status = "proposed"
	StatusRejected             Status = "rejected"
	StatusAwaitingConfirmation Status = "awaiting_confirmation"
	StatusDeclined             Status = "declined"
	StatusCancelled            Status = "cancelled"
	StatusExpired              Status = "expired"
	StatusConfirmed            Status = "confirmed"
	StatusRevoked              Status = "revoked"
	StatusExecuting            Status = "executing"
	StatusSucceeded            Status = "succeeded"
	StatusFailedRetryable      Status = "failed_retryable"
	StatusFailedTerminal       Status = "failed_terminal"
	StatusUnknown              Status = "unknown"
	// StatusSuperseded ends a proposal that a reviewer edited instead of
	// declining: a new version (a counter-proposal) replaced it, and no
	// token is ever issued for it.
	StatusSuperseded Status = "superseded"
)

// transitions is the whole state machine: from → allowed targets.
var transitions = map[Status][]Status{
	StatusProposed:             {StatusRejected, StatusAwaitingConfirmation},
	StatusAwaitingConfirmation: {StatusDeclined, StatusCancelled, StatusExpired, StatusConfirmed, StatusSuperseded},
	StatusConfirmed:            {StatusRevoked, StatusExecuting, StatusExpired},
	StatusExecuting:            {StatusSucceeded, StatusFailedRetryable, StatusFailedTerminal, StatusUnknown},
	StatusFailedRetryable:      {StatusExecuting, StatusRevoked, StatusExpired},
	StatusUnknown:              {StatusExecuting, StatusSucceeded, StatusFailedTerminal},
}

// AllStatuses lists every state in lifecycle order.
var AllStatuses = []Status{
	StatusProposed, StatusRejected, StatusAwaitingConfirmation, StatusDeclined,
	StatusCancelled, StatusExpired, StatusConfirmed, StatusRevoked, StatusExecuting,
	StatusSucceeded, StatusFailedRetryable, StatusFailedTerminal, StatusUnknown, StatusSuperseded,
}

// HistoryStatuses lists, in lifecycle order, the states a proposal is in
// once it has left the reviewers' queue (or never entered it): every state
// but proposed and awaiting confirmation. The console's history shows them.
var HistoryStatuses = func() []Status {
	var out []Status
	for _, s := range AllStatuses {
		if s != StatusProposed && s != StatusAwaitingConfirmation {
			out = append(out, s)
		}
	}
	return out
}()

// Valid reports whether s is one of the defined states.
func (s Status) Valid() bool {
	for _, v := range AllStatuses {
		if v == s {
			return true
		}
	}
	return false
}

// CanTransition reports whether the state machine allows from → to.
func CanTransition(from, to Status) bool {
	for _, t := range transitions[from] {
		if t == to {
			return true
		}
	}
	return false
}

// Sources returns every state from which to may be reached. Stores use it to
// build conditional updates (`… WHERE status IN (sources)`), so that the state
// machine is enforced by the database atomically, not by a prior read.
func Sources(to Status) []Status {
	var out []Status
	for _, from := range AllStatuses {
		if CanTransition(from, to) {
			out = append(out, from)
		}
	}
	return out
}

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return len(transitions[s]) == 0 }

// Pending reports whether s waits for a reviewer.
func (s Status) Pending() bool { return s == StatusAwaitingConfirmation }

// Executable reports whether redeeming the token of a proposal in s can
// start an execution or report the one it started: s is confirmed, or
// executing and every state reachable from there. In every other state the
// proposal waits for a person or ended without a write that ran (declined,
// cancelled, expired, revoked, rejected, superseded), and execute has
// nothing to do.
func (s Status) Executable() bool {
	switch s {
	case StatusConfirmed, StatusExecuting, StatusSucceeded, StatusFailedRetryable, StatusFailedTerminal, StatusUnknown:
		return true
	}
	return false
}

// TokenStatus is the consumption state of a confirmation token (SPEC section 5).
type TokenStatus string

// Token consumption states.
const (
	TokenIssued   TokenStatus = "issued"
	TokenConsumed TokenStatus = "consumed"
	TokenRevoked  TokenStatus = "revoked"
	TokenExpired  TokenStatus = "expired"
)

// Confirmation is what a risk tier requires before a token is issued.
type Confirmation string

// Confirmation kinds.
const (
	ConfirmClick    Confirmation = "click"
	ConfirmWebAuthn Confirmation = "webauthn"
)

// SideEffect is a tool's declared side-effect level. The registry decides it,
// never the tool's name.
type SideEffect string

// Side-effect levels.
const (
	SideEffectNone         SideEffect = "none"
	SideEffectReversible   SideEffect = "reversible"
	SideEffectIrreversible SideEffect = "irreversible"
	SideEffectExternal     SideEffect = "external"
)

// Role is a console user's role within a tenant.
type Role string

// Roles.
const (
	RoleReviewer Role = "reviewer"
	RoleAdmin    Role = "admin"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleReviewer || r == RoleAdmin }
