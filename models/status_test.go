package models

import "testing"

func TestStateMachine(t *testing.T) {
	allowed := []struct{ from, to Status }{
		{StatusProposed, StatusRejected},
		{StatusProposed, StatusAwaitingConfirmation},
		{StatusAwaitingConfirmation, StatusConfirmed},
		{StatusAwaitingConfirmation, StatusDeclined},
		{StatusAwaitingConfirmation, StatusCancelled},
		{StatusAwaitingConfirmation, StatusExpired},
		{StatusAwaitingConfirmation, StatusSuperseded},
		{StatusConfirmed, StatusExecuting},
		{StatusConfirmed, StatusRevoked},
		{StatusConfirmed, StatusExpired},
		{StatusExecuting, StatusUnknown},
		{StatusFailedRetryable, StatusExecuting},
		{StatusUnknown, StatusExecuting},
		{StatusUnknown, StatusSucceeded},
		{StatusUnknown, StatusFailedTerminal},
	}
	for _, c := range allowed {
		if !CanTransition(c.from, c.to) {
			t.Errorf("%s → %s should be allowed", c.from, c.to)
		}
	}
	forbidden := []struct{ from, to Status }{
		{StatusAwaitingConfirmation, StatusExecuting}, // never execute without a confirmation
		{StatusDeclined, StatusConfirmed},
		{StatusSucceeded, StatusExecuting}, // never a second write
		{StatusUnknown, StatusFailedRetryable},
		{StatusRevoked, StatusConfirmed},
		{StatusExpired, StatusConfirmed},
		{StatusConfirmed, StatusSucceeded},
		{StatusSuperseded, StatusConfirmed}, // an edited original never gets a token
		{StatusConfirmed, StatusSuperseded}, // nor is a confirmed write edited
	}
	for _, c := range forbidden {
		if CanTransition(c.from, c.to) {
			t.Errorf("%s → %s must be forbidden", c.from, c.to)
		}
	}
	for _, s := range []Status{StatusSucceeded, StatusDeclined, StatusCancelled, StatusExpired, StatusRevoked, StatusRejected, StatusFailedTerminal, StatusSuperseded} {
		if !s.Terminal() {
			t.Errorf("%s should be terminal", s)
		}
	}
	got := Sources(StatusExecuting)
	want := map[Status]bool{StatusConfirmed: true, StatusFailedRetryable: true, StatusUnknown: true}
	if len(got) != len(want) {
		t.Fatalf("Sources(executing) = %v", got)
	}
	for _, s := range got {
		if !want[s] {
			t.Errorf("unexpected source %s", s)
		}
	}
}

// TestExecutable: execute has something to do exactly in confirmed and in
// executing and what the state machine reaches from executing without a
// new confirmation, except expired and revoked: reached after
// failed_retryable they end a write that wrote nothing, and reached from
// confirmed they end one that never ran, so they stay out.
func TestExecutable(t *testing.T) {
	reach := map[Status]bool{StatusExecuting: true}
	for changed := true; changed; {
		changed = false
		for _, from := range AllStatuses {
			if !reach[from] {
				continue
			}
			for _, to := range AllStatuses {
				if CanTransition(from, to) && !reach[to] && to != StatusExpired && to != StatusRevoked {
					reach[to], changed = true, true
				}
			}
		}
	}
	reach[StatusConfirmed] = true
	for _, s := range AllStatuses {
		if got := s.Executable(); got != reach[s] {
			t.Errorf("%s: Executable %v, want %v", s, got, reach[s])
		}
	}
}
