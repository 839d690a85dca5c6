package models

import (
	"strings"
	"testing"
	"time"
)

// A decision and the confirmation it completed, in the same second: the
// token's issue time is whole seconds, earlier than the decision's, yet
// the approval comes first, as it happened.
func TestTimelineDecisionBeforeConfirmationInOneSecond(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 20, 41, 40, 0, time.UTC)
	decided := t0.Add(700 * time.Millisecond)
	p := &Proposal{AgentName: "bot", CreatedAt: t0.Add(-time.Minute), Status: StatusConfirmed,
		Decisions: []Decision{
			{UserName: "bob", Kind: DecisionApprove, CreatedAt: t0.Add(300 * time.Millisecond)},
			{UserName: "alice", Kind: DecisionApprove, CreatedAt: decided},
		},
		Token: &Token{IssuedAt: decided.Truncate(time.Second)}}
	var got []string
	for _, e := range p.Timeline() {
		got = append(got, string(e.Kind)+":"+e.Who)
	}
	if got, want := strings.Join(got, " "), "proposed:bot approved:bob approved:alice confirmed:"; got != want {
		t.Errorf("timeline = %s, want %s", got, want)
	}
}
