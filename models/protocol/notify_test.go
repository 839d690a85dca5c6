package protocol

import "testing"

func TestNotifierForgetsProposalsNobodyWaitsFor(t *testing.T) {
	n := newNotifier()
	ch1, release1 := n.wait("p1")
	ch2, release2 := n.wait("p1")
	if ch1 != ch2 {
		t.Fatal("two waiters of one proposal should share a channel")
	}
	release1()
	if got := n.pending(); got != 1 {
		t.Fatalf("pending = %d with one waiter left", got)
	}
	release2()
	if got := n.pending(); got != 0 {
		t.Fatalf("pending = %d after every waiter left: the map leaks", got)
	}
	ch, release := n.wait("p2")
	n.notify("p2")
	select {
	case <-ch:
	default:
		t.Fatal("notify did not wake the waiter")
	}
	release() // after notify: must not remove a newer entry or panic
	_, release3 := n.wait("p2")
	release3()
	if got := n.pending(); got != 0 {
		t.Fatalf("pending = %d", got)
	}
}
