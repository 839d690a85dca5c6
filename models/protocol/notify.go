package protocol

import "sync"

// notifier wakes long-polls in this process as soon as a proposal changes.
// Changes made by other instances are seen by the pollers' periodic check.
type notifier struct {
	mu    sync.Mutex
	waits map[string]*waiters
	any   chan struct{}
}

// waiters share one channel per proposal, closed at its next change; n
// counts them so that the entry goes when the last one leaves.
type waiters struct {
	ch chan struct{}
	n  int
}

func newNotifier() *notifier {
	return &notifier{waits: map[string]*waiters{}, any: make(chan struct{})}
}

// wait returns a channel closed at the next change of proposal id, and a
// release the caller must call when it stops waiting.
func (n *notifier) wait(id string) (<-chan struct{}, func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w, ok := n.waits[id]
	if !ok {
		w = &waiters{ch: make(chan struct{})}
		n.waits[id] = w
	}
	w.n++
	return w.ch, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		w.n--
		if w.n == 0 && n.waits[id] == w {
			delete(n.waits, id)
		}
	}
}

// waitAny returns a channel closed at the next change of any proposal.
func (n *notifier) waitAny() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.any
}

func (n *notifier) notify(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w, ok := n.waits[id]; ok {
		close(w.ch)
		delete(n.waits, id)
	}
	close(n.any)
	n.any = make(chan struct{})
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
