package protocol

import "sync"

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
type waiters struct {
	ch chan struct{}
	n  int
}

func newNotifier() *notifier {
	return &notifier{waits: map[ref]*waiters{}, tenants: map[string]chan struct{}{}}
}

// wait returns a channel closed at the next change of the tenant's proposal
// id, and a release the caller must call when it stops waiting.
func (n *notifier) wait(tenant, id string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := ref{tenant, id}
	w, ok := n.waits[k]
	if !ok {
		w = &waiters{ch: make(chan struct{})}
		n.waits[k] = w
	}
	w.n++
	return w.ch, func() {
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
