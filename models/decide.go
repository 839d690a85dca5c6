package models

// Verdict is what one recorded decision does to its proposal.
type Verdict int

const (
	// VerdictAwaiting: the tier needs more approvals; the proposal keeps
	// awaiting confirmation.
	VerdictAwaiting Verdict = iota
	// VerdictDeclined: a reviewer declined; the proposal is declined,
	// whatever approvals it had.
	VerdictDeclined
	// VerdictConfirmed: the tier's approvals are complete; the proposal is
	// confirmed (a mandate proposal grants its mandate).
	VerdictConfirmed
)

// String names the verdict for logs and test failures.
func (v Verdict) String() string {
	switch v {
	case VerdictDeclined:
		return "declined"
	case VerdictConfirmed:
		return "confirmed"
	default:
		return "awaiting"
	}
}

// Decide is the decision rule. p is an awaiting proposal as it stands once
// the decision of kind was recorded (its Decisions include it); groups maps
// a user id to the reviewer groups the user is in, read in the same
// transaction (nil when the tier names no groups). A decline ends the
// proposal at once; otherwise it is confirmed exactly when ApprovalsMet:
// enough distinct, unvoided approvals (one person counts once, however
// often they approve; a disabled reviewer's approvals are voided) and
// every approver-group factor met.
//
// Who may decide at all (self-approval, the editor of a counter-proposal,
// separation of duties, a disabled account) and whether the proposal still
// awaits a decision are checked before the decision is recorded; Decide
// only says what the recorded decisions add up to. The store calls it
// inside the transaction that records the decision and applies its
// verdict with a conditional UPDATE.
func Decide(p *Proposal, kind DecisionKind, groups map[string][]string) Verdict {
	if kind == DecisionDecline {
		return VerdictDeclined
	}
	if met, _ := ApprovalsMet(p, groups); met {
		return VerdictConfirmed
	}
	return VerdictAwaiting
}
