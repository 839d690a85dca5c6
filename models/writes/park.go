package writes

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/countersign/countersign/models"
)

// Parked is one long-poll on a proposal, held without a goroutine of its
// own: a subscription to the proposal's changes and one timer, for the
// deadline and the proposal's own expiry. When the proposal changes, falls
// due for expiry, the deadline passes or Stop is called, one of the
// service's few wake-up workers looks at it (the waiters one change woke
// share one load of the proposal) and, once the wait is over, calls the
// function given to Start.
//
// The rules are those of every long-poll of the service (Wait, WaitChange,
// AgentWait are built on Parked): it ends with the first revision that
// differs from the one it waits on, with none when the deadline (at most
// MaxWait) passes or Stop is called, or with the error of a load. It reads
// the database only when it was told of a change or its proposal falls due,
// never to poll.
//
// While it waits it keeps only what it needs to tell a change and the
// proposal's expiry (see watched), not the proposal: a parked long-poll
// is a few hundred bytes.
type Parked struct {
	s   *Service
	k   ref
	ctx context.Context // values of the caller's context, never its end
	end time.Time
	// slot is the agent's long-poll slot, given back when the long-poll
	// ends; "" without one.
	slot, agentID string

	// Only the one worker running the long-poll (or its creator, before
	// Start) touches these.
	w     *waiters
	timer *time.Timer
	// What the long-poll keeps of the proposal: the revision it waits to
	// change, and when the proposal falls due for expiry (dueAt).
	revision int64
	at       time.Time
	due      bool

	mu       sync.Mutex
	done     func(*models.Proposal, error) // set by Start
	woken    *waiters                      // the group whose change woke it
	fired    bool                          // the timer fired
	stopped  bool                          // Stop was called
	queued   bool                          // with the workers, or running
	finished bool
}

// park subscribes a long-poll on the tenant's proposal id; the caller
// loads or checks the proposal next (so that a change between that look and
// the wait still wakes it), calls watch, and then either Starts the
// long-poll or abandons it. slot is the agent's long-poll slot, or "".
func (s *Service) park(ctx context.Context, tenantID, id string, max time.Duration, slot, agentID string) *Parked {
	max = min(max, MaxWait)
	pk := &Parked{s: s, k: ref{tenantID, id}, ctx: context.WithoutCancel(ctx), end: time.Now().Add(max),
		slot: slot, agentID: agentID}
	pk.w = s.changes.subscribe(pk.k, pk)
	return pk
}

// watch sets the revision of p as the one the long-poll waits to change,
// keeping of p only that and when it falls due.
func (pk *Parked) watch(p *models.Proposal) {
	pk.revision = p.Revision
	pk.at, pk.due = dueAt(p)
}

// abandon ends a long-poll that was never started, or is over: it gives
// the slot back and leaves the notifier (in that order, so that once
// Service.Waiting no longer counts it, its slot is free).
func (pk *Parked) abandon() {
	if pk.slot != "" {
		if err := pk.s.store.ReleaseWait(pk.ctx, pk.slot); err != nil {
			pk.s.log.Warn("releasing a long-poll slot", "agent", pk.agentID, "err", err)
		}
	}
	pk.s.changes.unsubscribe(pk.k, pk.w, pk)
}

// Start lets the long-poll run: done is called exactly once, on a worker
// goroutine, when the wait is over, with the newer revision of the
// proposal, with nil when there is none (the deadline passed or Stop was
// called), or with a load's error; the agent's long-poll slot is already
// given back then. done runs while other long-polls wait for the workers,
// so it must not block for long. The long-poll's loads carry ctx's values
// (never its end) instead of those of the context it was made with; a
// caller that returns meanwhile passes a context that keeps no more than
// it needs. Start may be called once.
func (pk *Parked) Start(ctx context.Context, done func(*models.Proposal, error)) {
	pk.ctx = context.WithoutCancel(ctx)
	pk.timer = time.AfterFunc(pk.nextLook(time.Until(pk.end)), pk.fire)
	pk.mu.Lock()
	defer pk.mu.Unlock()
	pk.done = done
	pk.schedule()
}

// Stop ends the long-poll without a newer revision, as if its deadline had
// passed (a shutdown answers every long-poll this way). It does nothing
// once the long-poll is over.
func (pk *Parked) Stop() {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	pk.stopped = true
	pk.schedule()
}

// Wait starts the long-poll and blocks until it is over: it returns what
// Start's done would get. When ctx ends first, it stops the long-poll.
func (pk *Parked) Wait(ctx context.Context) (*models.Proposal, error) {
	type result struct {
		p   *models.Proposal
		err error
	}
	ch := make(chan result, 1)
	pk.Start(ctx, func(p *models.Proposal, err error) { ch <- result{p, err} })
	select {
	case r := <-ch:
		return r.p, r.err
	case <-ctx.Done():
		pk.Stop()
		r := <-ch
		return r.p, r.err
	}
}

// wake is the notifier's call: the proposal changed.
func (pk *Parked) wake(w *waiters) {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	pk.woken = w
	pk.schedule()
}

// fire is the timer's call.
func (pk *Parked) fire() {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	pk.fired = true
	pk.schedule()
}

// schedule hands the long-poll to the workers unless it is with them
// already, over, or not started; pk.mu is held.
func (pk *Parked) schedule() {
	if pk.done == nil || pk.queued || pk.finished {
		return
	}
	pk.queued = true
	pk.s.wakeups.add(pk)
}

// run is a worker's turn: it handles what happened since the last turn
// until nothing is left, or the long-poll is over.
func (pk *Parked) run() {
	for {
		pk.mu.Lock()
		woken, fired, stopped := pk.woken, pk.fired, pk.stopped
		pk.woken, pk.fired = nil, false
		if woken == nil && !fired && !stopped {
			pk.queued = false
			pk.mu.Unlock()
			return
		}
		pk.mu.Unlock()
		if p, err, over := pk.step(woken, stopped); over {
			pk.finish(p, err)
			return
		}
	}
}

// step looks at the proposal after a wake (woken is the group the change
// woke), a timer or Stop, and reports whether the long-poll is over, with
// the newer revision (nil: none) or err; otherwise it re-arms the timer.
func (pk *Parked) step(woken *waiters, stopped bool) (*models.Proposal, error, bool) {
	s := pk.s
	if stopped {
		return nil, nil, true
	}
	if woken == nil {
		left := time.Until(pk.end)
		if left <= 0 {
			return nil, nil, true
		}
		if !pk.due || s.clock.Now().Before(pk.at) {
			// No database read: nothing can have changed unseen.
			pk.timer.Reset(pk.nextLook(left))
			return nil, nil, false
		}
	}
	// Subscribe again before loading, so that a change during the load
	// still wakes the long-poll.
	s.changes.unsubscribe(pk.k, pk.w, pk)
	pk.w = s.changes.subscribe(pk.k, pk)
	if woken != nil {
		// The waiters woken with this one share one load that began
		// after the change was committed.
		q, err := woken.reload(func() (*models.Proposal, error) { return s.Get(pk.ctx, pk.k.tenant, pk.k.id) })
		if err != nil || q.Revision != pk.revision {
			return q, err, true
		}
		// Woken without a new revision (every waiter is woken after a
		// lost notification connection): the shared load may have begun
		// before the new subscription, so look once more.
	}
	q, err := s.Get(pk.ctx, pk.k.tenant, pk.k.id)
	if err != nil || q.Revision != pk.revision {
		return q, err, true
	}
	pk.watch(q)
	left := time.Until(pk.end)
	if left <= 0 {
		return nil, nil, true
	}
	pk.timer.Reset(pk.nextLook(left))
	return nil, nil, false
}

// nextLook is when the long-poll looks again without being woken: at its
// deadline, or earlier to compare the clock with the proposal's expiry.
func (pk *Parked) nextLook(left time.Duration) time.Duration {
	return max(min(left, pk.s.recheckAfter(pk.at, pk.due)), 0)
}

// finish ends the long-poll: timer, subscription and slot go, then done
// is told.
func (pk *Parked) finish(p *models.Proposal, err error) {
	pk.mu.Lock()
	pk.finished = true
	done := pk.done
	pk.mu.Unlock()
	pk.timer.Stop()
	pk.abandon()
	done(p, err)
}

// wakeups runs the long-polls that have something to look at on a few
// goroutines, started as work comes and gone when there is none: thousands
// of parked long-polls cost no goroutine, and a change that wakes all of
// them at once runs them on as many goroutines as there are CPUs to keep
// busy, not thousands.
type wakeups struct {
	mu      sync.Mutex
	queue   []*Parked
	running int
	max     int
}

func newWakeups() *wakeups {
	// Loads wait on the database; a few more workers than CPUs keep both
	// busy.
	return &wakeups{max: max(4*runtime.GOMAXPROCS(0), 8)}
}

func (q *wakeups) add(pk *Parked) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, pk)
	if q.running < q.max {
		q.running++
		go q.work()
	}
}

func (q *wakeups) work() {
	for {
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.queue = nil // let a burst's backing array go
			q.running--
			q.mu.Unlock()
			return
		}
		pk := q.queue[0]
		q.queue[0] = nil
		q.queue = q.queue[1:]
		q.mu.Unlock()
		pk.run()
	}
}
