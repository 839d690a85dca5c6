package writes

import (
	"sync"

	"github.com/countersign/countersign/models"
)

// notifier fans proposal changes out to the long-polls and live lists of
// this process. Changes made by other instances reach it through the
// database's change notifications (see Service.Listen).
//
// A long-poll is not a goroutine here: it is a waker the notifier calls
// back, which costs a few hundred bytes while it waits (see Parked).
type notifier struct {
	mu    sync.Mutex
	waits map[ref]*waiters
	// tenants holds one channel per tenant with listeners, closed at the
	// next change of any of that tenant's proposals.
	tenants map[string]chan struct{}
}

// ref names one proposal of one tenant.
type ref struct{ tenant, id string }

// A waker is told once, by a call of wake with the group it was in, that
// its proposal changed. wake is called with the notifier's lock held: it
// must only take note and return, never call back into the notifier.
type waker interface {
	wake(w *waiters)
}

// waiters are the wakers of one proposal until its next change; at that
// change the group leaves the notifier whole, and every member is woken.
//
// The members a change woke share one load of the proposal: the first to
// ask loads it, the others wait for that load and get the same result. The
// load starts after the wake, which comes after the change was committed,
// so it sees the change; a thousand waiters on one proposal cost one read,
// not a thousand.
type waiters struct {
	// one is a member; more holds the others, made only for a second
	// (most proposals have one long-poll at most).
	one  waker
	more map[waker]struct{}
	once sync.Once
	p    *models.Proposal
	err  error
}

// reload returns the proposal as load returns it, loading it once for all
// the members of w. Call it only after w's members were woken.
func (w *waiters) reload(load func() (*models.Proposal, error)) (*models.Proposal, error) {
	w.once.Do(func() { w.p, w.err = load() })
	return w.p, w.err
}

func newNotifier() *notifier {
	return &notifier{waits: map[ref]*waiters{}, tenants: map[string]chan struct{}{}}
}

// subscribe adds m to the waiters of the proposal k and returns the group,
// which the caller hands back to unsubscribe when it stops waiting.
func (n *notifier) subscribe(k ref, m waker) *waiters {
	n.mu.Lock()
	defer n.mu.Unlock()
	w, ok := n.waits[k]
	if !ok {
		w = &waiters{}
		n.waits[k] = w
	}
	switch {
	case w.one == nil:
		w.one = m
	case w.more == nil:
		w.more = map[waker]struct{}{m: {}}
	default:
		w.more[m] = struct{}{}
	}
	return w
}

// unsubscribe removes m from w, and w from the notifier when it was the
// last member. A group a change already woke is no longer in the notifier;
// leaving it changes nothing there.
func (n *notifier) unsubscribe(k ref, w *waiters, m waker) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w.one == m {
		w.one = nil
	} else {
		delete(w.more, m)
	}
	if w.len() == 0 && n.waits[k] == w {
		delete(n.waits, k)
	}
}

// waitTenant returns a channel closed at the next change of any proposal of
// the tenant, and of no other tenant.
func (n *notifier) waitTenant(tenant string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.tenants[tenant]
	if !ok {
		ch = make(chan struct{})
		n.tenants[tenant] = ch
	}
	return ch
}

// notify wakes the waiters of the tenant's proposal id and the tenant's
// listeners.
func (n *notifier) notify(tenant, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := ref{tenant, id}
	if w, ok := n.waits[k]; ok {
		delete(n.waits, k)
		w.wakeAll()
	}
	if ch, ok := n.tenants[tenant]; ok {
		close(ch)
		delete(n.tenants, tenant)
	}
}

// wakeAll wakes every member of w; the notifier's lock is held.
func (w *waiters) wakeAll() {
	if w.one != nil {
		w.one.wake(w)
	}
	for m := range w.more {
		m.wake(w)
	}
}

// len is how many members w has; the notifier's lock is held.
func (w *waiters) len() int {
	if w.one != nil {
		return 1 + len(w.more)
	}
	return len(w.more)
}

// wakeEveryone wakes every waiter and listener once, so that each looks at
// the database again: after changes may have been missed (the notification
// connection was lost).
func (n *notifier) wakeEveryone() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, w := range n.waits {
		delete(n.waits, k)
		w.wakeAll()
	}
	for t, ch := range n.tenants {
		close(ch)
		delete(n.tenants, t)
	}
}

// waiting reports how many long-polls wait for a change.
func (n *notifier) waiting() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	total := 0
	for _, w := range n.waits {
		total += w.len()
	}
	return total
}

// pending reports how many proposals have waiters (for tests).
func (n *notifier) pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.waits)
}
