package protocol

import "sync"

// notifier wakes long-polls in this process as soon as a proposal changes.
// Changes made by other instances are seen by the pollers' periodic check.
type notifier struct {
	mu    sync.Mutex
	waits map[string]chan struct{}
	any   chan struct{}
}

func newNotifier() *notifier {
	return &notifier{waits: map[string]chan struct{}{}, any: make(chan struct{})}
}

// wait returns a channel closed at the next change of proposal id.
func (n *notifier) wait(id string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.waits[id]
	if !ok {
		ch = make(chan struct{})
		n.waits[id] = ch
	}
	return ch
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
	if ch, ok := n.waits[id]; ok {
		close(ch)
		delete(n.waits, id)
	}
	close(n.any)
	n.any = make(chan struct{})
}
