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
