package writes

import (
	"sync"

	"github.com/countersign/countersign/models"
)

// notifier fans proposal changes out to the long-polls and live lists of
// this process. Changes made by other instances reach it through the
// database's change notifications (see Service.Listen).
type notifier struct {
	mu    sync.Mutex
	waits map[ref]*waiters
	// tenants holds one channel per tenant with listeners, closed at the
	// next change of any of that tenant's proposals.
	tenants map[string]chan struct{}
}

// ref names one proposal of one tenant.
type ref struct{ tenant, id string }

// waiters share one channel per proposal, closed at its next change; n
// counts them so that the entry goes when the last one leaves.
//
// Once ch is closed, the waiters it woke share one load of the proposal:
// the first to ask loads it, the others wait for that load and get the
// same result. The load starts after the close, which comes after the
// change was committed, so it sees the change; a thousand waiters on one
// proposal cost one read, not a thousand.
type waiters struct {
	ch   chan struct{}
	n    int
	once sync.Once
	p    *models.Proposal
	err  error
}

// reload returns the proposal as load returns it, loading it once for all
// the waiters of w. Call it only after w.ch was closed.
func (w *waiters) reload(load func() (*models.Proposal, error)) (*models.Proposal, error) {
	w.once.Do(func() { w.p, w.err = load() })
	return w.p, w.err
}

func newNotifier() *notifier {
	return &notifier{waits: map[ref]*waiters{}, tenants: map[string]chan struct{}{}}
}

// wait returns the waiters of the tenant's proposal id, whose channel is
// closed at its next change, and a release the caller must call when it
// stops waiting.
func (n *notifier) wait(tenant, id string) (*waiters, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := ref{tenant, id}
	w, ok := n.waits[k]
	if !ok {
		w = &waiters{ch: make(chan struct{})}
		n.waits[k] = w
	}
	w.n++
	return w, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		w.n--
		if w.n == 0 && n.waits[k] == w {
			delete(n.waits, k)
		}
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
	if w, ok := n.waits[ref{tenant, id}]; ok {
		close(w.ch)
		delete(n.waits, ref{tenant, id})
	}
	if ch, ok := n.tenants[tenant]; ok {
		close(ch)
		delete(n.tenants, tenant)
	}
}

// wakeAll wakes every waiter and listener once, so that each looks at the
// database again: after changes may have been missed (the notification
// connection was lost).
func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, w := range n.waits {
		close(w.ch)
		delete(n.waits, k)
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
		total += w.n
	}
	return total
}

// pending reports how many proposals have waiters (for tests).
func (n *notifier) pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.waits)
}
