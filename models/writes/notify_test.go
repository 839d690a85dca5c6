package writes

import "testing"

func TestNotifierForgetsProposalsNobodyWaitsFor(t *testing.T) {
	t.Parallel()
	n := newNotifier()
	w1, release1 := n.wait("t1", "p1")
	w2, release2 := n.wait("t1", "p1")
	if w1.ch != w2.ch {
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
	w, release := n.wait("t1", "p2")
	n.notify("t1", "p2")
	select {
	case <-w.ch:
	default:
		t.Fatal("notify did not wake the waiter")
	}
	release() // after notify: must not remove a newer entry or panic
	_, release3 := n.wait("t1", "p2")
	release3()
	if got := n.pending(); got != 0 {
		t.Fatalf("pending = %d", got)
	}
}

func TestNotifierKeepsTenantsApart(t *testing.T) {
	t.Parallel()
	n := newNotifier()
	a, b := n.waitTenant("ten_a"), n.waitTenant("ten_b")
	pa, release := n.wait("ten_a", "prop_1")
	defer release()
	// The same id under another tenant is another proposal.
	n.notify("ten_b", "prop_1")
	select {
	case <-a:
		t.Fatal("a change of tenant B woke tenant A's listeners")
	case <-pa.ch:
		t.Fatal("a change of tenant B woke a waiter of tenant A")
	default:
	}
	select {
	case <-b:
	default:
		t.Fatal("tenant B's listener was not woken")
	}
	n.notify("ten_a", "prop_1")
	for name, ch := range map[string]<-chan struct{}{"listener": a, "waiter": pa.ch} {
		select {
		case <-ch:
		default:
			t.Fatalf("tenant A's %s was not woken", name)
		}
	}
	if len(n.tenants) != 0 {
		t.Errorf("%d tenant channels left after every listener was woken", len(n.tenants))
	}
}
