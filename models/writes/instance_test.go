package writes_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// secondInstance is another server over e's database (its own store, pool
// and instance id) with the same registry, adapters and clock.
func secondInstance(t *testing.T, e *env) *writes.Service {
	t.Helper()
	return instanceObserved(t, e, nil)
}

// instanceObserved is secondInstance telling obs of its calls.
func instanceObserved(t *testing.T, e *env, obs writes.Observer) *writes.Service {
	t.Helper()
	st, err := store.Open(e.dbURL, store.Options{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tokens := token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	svc, err := writes.New(e.ctx, writes.Config{Store: st, Registry: e.svc.Registry(), Tokens: tokens,
		Adapters: e.adapter, Clock: e.clock, PollInterval: 20 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// Instance A consumes a token and dies before it calls the business
// system, holding a long lease. While A's heartbeat is fresh nobody touches
// the execution; once it is older than the instance timeout — long before
// the lease runs out — instance B's reconciler (two of them racing) claims
// it and the write happens exactly once.
func TestCrashedInstanceIsRecoveredWithinSeconds(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		a, biz := httpEnv(t, kind, 2*time.Second)
		b := secondInstance(t, a)
		if a.svc.Instance() == "" || a.svc.Instance() == b.Instance() {
			t.Fatalf("instances %q and %q", a.svc.Instance(), b.Instance())
		}
		p := a.confirm(a.propose("ord_1001", 700))
		now := a.clock.Now()
		_, consumed, err := a.store.ConsumeToken(a.ctx, store.Consume{TenantID: a.tenant, AgentID: a.agent.ID,
			ProposalID: p.ID, JTI: p.Token.JTI, Now: now,
			Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey, DownstreamKey: a.downstreamKey(p), Operation: p.Tool,
				ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(time.Hour)}})
		if err != nil || !consumed {
			t.Fatalf("consume: %v %v", consumed, err)
		}
		reconcileB := func() int {
			t.Helper()
			if err := b.Heartbeat(a.ctx); err != nil {
				t.Fatal(err)
			}
			n, err := b.Reconcile(a.ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		// A is alive (it keeps beating) for longer than the instance
		// timeout: its execution is left alone.
		for range 3 {
			a.clock.Advance(writes.DefaultInstanceTimeout - time.Second)
			if err := a.svc.Heartbeat(a.ctx); err != nil {
				t.Fatal(err)
			}
			if n := reconcileB(); n != 0 {
				t.Fatalf("B reconciled %d executions of a live instance", n)
			}
		}
		// A crashes: no more heartbeats. Just inside the timeout, still left.
		a.clock.Advance(writes.DefaultInstanceTimeout - time.Millisecond)
		if n := reconcileB(); n != 0 || biz.ExecuteCalls(a.downstreamKey(p)) != 0 {
			t.Fatal("B took over before A's heartbeat was stale")
		}
		a.clock.Advance(time.Millisecond)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { b.Reconcile(a.ctx) })
		}
		wg.Wait()
		got, err := b.Get(a.ctx, a.tenant, p.ID)
		if err != nil || got.Status != models.StatusSucceeded {
			t.Fatalf("after B's reconcile: %v %v", got.Status, err)
		}
		if w, calls := biz.Writes(a.downstreamKey(p)), biz.ExecuteCalls(a.downstreamKey(p)); w != 1 || calls != 1 {
			t.Fatalf("writes=%d execute calls=%d, want 1 and 1", w, calls)
		}
		if got.Execution.Attempts != 2 {
			t.Errorf("attempts = %d, want 2 (A's and B's)", got.Execution.Attempts)
		}
		if elapsed := a.clock.Now().Sub(now); elapsed >= time.Hour {
			t.Fatalf("recovered only after %s, when the lease had run out anyway", elapsed)
		}
	})
}

// An execution held by a live instance is not claimable even through the
// already-consumed path of another instance: presenting the token again at
// B while A works reports it and sends nothing.
func TestLiveOwnerKeepsItsExecution(t *testing.T) {
	t.Parallel()
	e, biz := httpEnv(t, "sqlite", 2*time.Second)
	b := secondInstance(t, e)
	p := e.confirm(e.propose("ord_1001", 300))
	now := e.clock.Now()
	if _, _, err := e.store.ConsumeToken(e.ctx, store.Consume{TenantID: e.tenant, AgentID: e.agent.ID,
		ProposalID: p.ID, JTI: p.Token.JTI, Now: now,
		Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey, DownstreamKey: e.downstreamKey(p), Operation: p.Tool,
			ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(writes.DefaultInstanceTimeout - time.Second)
	if err := e.svc.Heartbeat(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(writes.DefaultInstanceTimeout - time.Second)
	_, err := b.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	wantCode(t, err, models.EAlreadyConsumed)
	if n, _ := b.Reconcile(e.ctx); n != 0 || biz.ExecuteCalls(e.downstreamKey(p)) != 0 {
		t.Fatal("a live instance's execution was taken over")
	}
}

// An agent presenting its token again after the instance that redeemed it
// died gets the execution settled then and there, by the instance it asks.
func TestTokenPresentedAgainAfterTheOwnerDied(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		a, biz := httpEnv(t, kind, 2*time.Second)
		b := secondInstance(t, a)
		p := a.confirm(a.propose("ord_1001", 250))
		now := a.clock.Now()
		if _, _, err := a.store.ConsumeToken(a.ctx, store.Consume{TenantID: a.tenant, AgentID: a.agent.ID,
			ProposalID: p.ID, JTI: p.Token.JTI, Now: now,
			Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey, DownstreamKey: a.downstreamKey(p), Operation: p.Tool,
				ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		a.clock.Advance(writes.DefaultInstanceTimeout)
		if err := b.Heartbeat(a.ctx); err != nil {
			t.Fatal(err)
		}
		_, err := b.Execute(a.ctx, a.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EAlreadyConsumed)
		var me *models.Error
		if !asError(err, &me) || me.Details["execution_status"] != models.StatusSucceeded {
			t.Fatalf("details = %v, want the execution settled as succeeded", me)
		}
		if w := biz.Writes(a.downstreamKey(p)); w != 1 {
			t.Fatalf("writes = %d, want 1", w)
		}
	})
}

// After the database was out of reach for longer than the instance
// timeout, every instance's heartbeat is stale until its next beat. An
// attempt begun in that moment — A redeems a token, or claims a retry, as
// soon as the database answers again — must not look abandoned: the
// transaction that makes A the owner renews A's heartbeat, so B's
// reconciler, which came back first, leaves the attempt alone until A
// really falls silent, and the business system sees one request.
func TestAnAttemptBegunAfterAnOutageIsNotTakenOver(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		for _, begin := range []string{"consume", "retry"} {
			t.Run(begin, func(t *testing.T) {
				a, biz := httpEnv(t, kind, 2*time.Second)
				b := secondInstance(t, a)
				p := a.confirm(a.propose("ord_1001", 700))
				key := a.downstreamKey(p)
				var exe string
				if begin == "retry" {
					biz.FailNextExecutes(1)
					ex, err := a.svc.Execute(a.ctx, a.agent, p.ID, p.Token.Compact)
					if err != nil || ex.Status != models.StatusFailedRetryable {
						t.Fatalf("first execute: %v %v", ex.Status, err)
					}
					exe = ex.ID
				}
				calls := biz.ExecuteCalls(key)
				// The outage: no heartbeat of either instance is renewed.
				a.clock.Advance(writes.DefaultInstanceTimeout + time.Second)
				if err := b.Heartbeat(a.ctx); err != nil {
					t.Fatal(err)
				}
				now := a.clock.Now()
				switch begin {
				case "consume":
					_, consumed, err := a.store.ConsumeToken(a.ctx, store.Consume{TenantID: a.tenant, AgentID: a.agent.ID,
						ProposalID: p.ID, JTI: p.Token.JTI, Now: now,
						Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey, DownstreamKey: key,
							Operation: p.Tool, ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(time.Hour)}})
					if err != nil || !consumed {
						t.Fatalf("consume: %v %v", consumed, err)
					}
				case "retry":
					if _, ok, err := a.store.ClaimRetry(a.ctx, a.tenant, exe, now, now.Add(time.Hour)); err != nil || !ok {
						t.Fatalf("claim retry: %v %v", ok, err)
					}
				}
				// A's attempt is on its way to the business system: B leaves it.
				if n, err := b.Reconcile(a.ctx); err != nil || n != 0 || biz.ExecuteCalls(key) != calls {
					t.Fatalf("B reconciled %d executions (%v) and sent %d requests: it took over an attempt begun just now",
						n, err, biz.ExecuteCalls(key)-calls)
				}
				// A dies right after: once its renewed heartbeat is stale, B takes over.
				a.clock.Advance(writes.DefaultInstanceTimeout)
				if err := b.Heartbeat(a.ctx); err != nil {
					t.Fatal(err)
				}
				if n, err := b.Reconcile(a.ctx); err != nil || n != 1 {
					t.Fatalf("B reconciled %d executions (%v), want the one of the dead instance", n, err)
				}
				got, err := b.Get(a.ctx, a.tenant, p.ID)
				if err != nil || got.Status != models.StatusSucceeded || biz.Writes(key) != 1 {
					t.Fatalf("after B's reconcile: %v %v, writes %d", got.Status, err, biz.Writes(key))
				}
			})
		}
	})
}

// reconcileTally counts the reconcile events it is told of, apart by
// whether the instance made an attempt.
type reconcileTally struct {
	mu                   sync.Mutex
	attempts, notClaimed int
}

func (r *reconcileTally) Observe(_ context.Context, ev writes.Event) {
	if ev.Op != writes.OpReconcile {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Outcome == writes.OutcomeNotClaimed {
		r.notClaimed++
	} else {
		r.attempts++
	}
}

// Two instances reconciling the same crashed executions at once each list
// them all, and one of them claims each first. Only the claims won are
// reported as attempts (they are what the reconcile metric counts): as many
// as the business system was asked about, not one per instance.
func TestALostClaimIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	a, biz := httpEnv(t, "sqlite", 2*time.Second)
	var tally reconcileTally
	b1, b2 := instanceObserved(t, a, &tally), instanceObserved(t, a, &tally)
	const crashed = 12
	var keys, props []string
	for i := range crashed {
		order := fmt.Sprintf("ord_%d", 2000+i)
		biz.AddResource(order, "Order …"+order[4:], 19900)
		p := a.confirm(a.propose(order, 100))
		now := a.clock.Now()
		_, consumed, err := a.store.ConsumeToken(a.ctx, store.Consume{TenantID: a.tenant, AgentID: a.agent.ID,
			ProposalID: p.ID, JTI: p.Token.JTI, Now: now,
			Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey, DownstreamKey: a.downstreamKey(p),
				Operation: p.Tool, ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(time.Second)}})
		if err != nil || !consumed {
			t.Fatalf("consume: %v %v", consumed, err)
		}
		keys, props = append(keys, a.downstreamKey(p)), append(props, p.ID)
	}
	a.clock.Advance(writes.DefaultInstanceTimeout + time.Second)
	for round := 0; round < 5 && tally.notClaimed == 0; round++ {
		for _, b := range []*writes.Service{b1, b2} {
			if err := b.Heartbeat(a.ctx); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, b := range []*writes.Service{b1, b2} {
			wg.Go(func() {
				<-start
				if _, err := b.Reconcile(a.ctx); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	claimed := 0
	for i, id := range props {
		got, err := b1.Get(a.ctx, a.tenant, id)
		if err != nil || got.Execution == nil {
			t.Fatalf("%s: %v", id, err)
		}
		if w := biz.Writes(keys[i]); w != 1 || got.Status != models.StatusSucceeded {
			t.Errorf("%s: %s (%s %s), written %d times", id, got.Status, got.Execution.ErrorCode, got.Execution.ErrorMessage, w)
		}
		claimed += got.Execution.Attempts - 1 // the first was the crashed instance's
	}
	if tally.attempts != claimed {
		t.Errorf("%d reconcile attempts reported (and %d lost claims), for %d claims won",
			tally.attempts, tally.notClaimed, claimed)
	}
}
