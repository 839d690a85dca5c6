package writes

import "testing"

// testWaker counts its wakes and keeps the group of the last.
type testWaker struct {
	n    int
	last *waiters
}

func (m *testWaker) wake(w *waiters) { m.n++; m.last = w }

func TestNotifierForgetsProposalsNobodyWaitsFor(t *testing.T) {
	t.Parallel()
	n := newNotifier()
	k1, k2 := ref{"t1", "p1"}, ref{"t1", "p2"}
	m1, m2 := &testWaker{}, &testWaker{}
	w1 := n.subscribe(k1, m1)
	w2 := n.subscribe(k1, m2)
	if w1 != w2 {
		t.Fatal("two waiters of one proposal should share a group")
	}
	n.unsubscribe(k1, w1, m1)
	if got := n.pending(); got != 1 {
		t.Fatalf("pending = %d with one waiter left", got)
	}
	n.unsubscribe(k1, w2, m2)
	if got := n.pending(); got != 0 {
		t.Fatalf("pending = %d after every waiter left: the map leaks", got)
	}
	m := &testWaker{}
	w := n.subscribe(k2, m)
	n.notify("t1", "p2")
	if m.n != 1 || m.last != w {
		t.Fatalf("notify woke the waiter %d times (group %p, want %p)", m.n, m.last, w)
	}
	n.unsubscribe(k2, w, m) // after notify: must not remove a newer entry or panic
	m3 := &testWaker{}
	w3 := n.subscribe(k2, m3)
	n.unsubscribe(k2, w, m3) // leaving the woken group leaves the new one alone
	if got := n.pending(); got != 1 {
		t.Fatalf("pending = %d: leaving a woken group removed the new one", got)
	}
	n.unsubscribe(k2, w3, m3)
	if got := n.pending(); got != 0 {
		t.Fatalf("pending = %d", got)
	}
	n.notify("t1", "p2")
	if m3.n != 0 {
		t.Fatal("a waiter that left was woken")
	}
}

func TestNotifierKeepsTenantsApart(t *testing.T) {
	t.Parallel()
	n := newNotifier()
	a, b := n.waitTenant("ten_a"), n.waitTenant("ten_b")
	pa := &testWaker{}
	n.subscribe(ref{"ten_a", "prop_1"}, pa)
	// The same id under another tenant is another proposal.
	n.notify("ten_b", "prop_1")
	select {
	case <-a:
		t.Fatal("a change of tenant B woke tenant A's listeners")
	default:
	}
	if pa.n != 0 {
		t.Fatal("a change of tenant B woke a waiter of tenant A")
	}
	select {
	case <-b:
	default:
		t.Fatal("tenant B's listener was not woken")
	}
	n.notify("ten_a", "prop_1")
	select {
	case <-a:
	default:
		t.Fatal("tenant A's listener was not woken")
	}
	if pa.n != 1 {
		t.Fatalf("tenant A's waiter was woken %d times, want 1", pa.n)
	}
	if len(n.tenants) != 0 || n.pending() != 0 {
		t.Errorf("%d tenant channels and %d proposals left after every one was woken", len(n.tenants), n.pending())
	}
}

// TestNotifierWakesEveryMemberOnce: whichever member leaves first (the one
// kept apart or one of the others), every member still there is woken once
// and none that left.
func TestNotifierWakesEveryMemberOnce(t *testing.T) {
	t.Parallel()
	for leaving := range 3 {
		n := newNotifier()
		k := ref{"t1", "p1"}
		ms := []*testWaker{{}, {}, {}}
		var w *waiters
		for _, m := range ms {
			w = n.subscribe(k, m)
		}
		if got, want := n.waiting(), 3; got != want {
			t.Fatalf("waiting = %d, want %d", got, want)
		}
		n.unsubscribe(k, w, ms[leaving])
		if got, want := n.waiting(), 2; got != want {
			t.Fatalf("after one left: waiting = %d, want %d", got, want)
		}
		late := &testWaker{}
		n.subscribe(k, late)
		n.notify("t1", "p1")
		for i, m := range ms {
			want := 1
			if i == leaving {
				want = 0
			}
			if m.n != want {
				t.Errorf("member %d (member %d left) woken %d times, want %d", i, leaving, m.n, want)
			}
		}
		if late.n != 1 {
			t.Errorf("a member that came after one left was woken %d times, want 1", late.n)
		}
		if got := n.waiting(); got != 0 {
			t.Errorf("waiting = %d after the change", got)
		}
	}
}
