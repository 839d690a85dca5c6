package writes_test

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/adaptertest"
	"github.com/countersign/countersign/models/writes"
)

// leaseEnv is httpEnv with the service rebuilt for an adapter timeout, a
// lease margin and a longest lease.
func leaseEnv(t *testing.T, kind string, timeout, margin, maxLease time.Duration) (*env, *adaptertest.Server) {
	t.Helper()
	e, biz := httpEnv(t, kind, timeout)
	svc, err := writes.New(e.ctx, writes.Config{Store: e.store, Registry: e.svc.Registry(), Tokens: e.tokens,
		Adapters: e.adapter, Clock: e.clock, ExecutionLease: maxLease, LeaseMargin: margin,
		PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e, biz
}

// A tool whose adapter may take longer than the longest lease allows is
// refused at start, with a message naming the tool and both durations.
func TestRegistryNeedingALongerLeaseIsRefused(t *testing.T) {
	t.Parallel()
	e, _ := httpEnv(t, "sqlite", 40*time.Second)
	_, err := writes.New(e.ctx, writes.Config{Store: e.store, Registry: e.svc.Registry(), Tokens: e.tokens,
		Adapters: e.adapter, Clock: e.clock, ExecutionLease: 30 * time.Second, LeaseMargin: 5 * time.Second})
	if err == nil {
		t.Fatal("a 40s adapter timeout was accepted under a 30s lease")
	}
	for _, want := range []string{"refund_order", "40s", "30s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// Timeout plus margin exactly at the limit is fine.
	if _, err := writes.New(e.ctx, writes.Config{Store: e.store, Registry: e.svc.Registry(), Tokens: e.tokens,
		Adapters: e.adapter, Clock: e.clock, ExecutionLease: 45 * time.Second, LeaseMargin: 5 * time.Second}); err != nil {
		t.Fatalf("40s + 5s under a 45s limit: %v", err)
	}
}

// A business system slower than the attempt's lease would have been under
// a fixed lease: the attempt times out, the token is consumed, and the
// answer is the execution (unknown), never an error. While the attempt is
// in flight the reconciler — even with the clock past the adapter's timeout
// — does not send the write again; afterwards it only asks.
func TestSlowBusinessSystemIsNeverSentTwiceWhileInFlight(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		const timeout, margin = time.Second, 500 * time.Millisecond
		e, biz := leaseEnv(t, kind, timeout, margin, time.Minute)
		p := e.confirm(e.propose("ord_1001", 5000))
		biz.SetExecuteDelay(3 * time.Second) // applies the write, answers long after the timeout

		type answer struct {
			ex  *models.Execution
			err error
		}
		done := make(chan answer, 1)
		go func() {
			ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			done <- answer{ex, err}
		}()
		waitUntil(t, "the write reaches the business system", func() bool { return biz.ExecuteCalls(e.downstreamKey(p)) == 1 })
		// The server clock moves past the adapter's timeout but stays within
		// timeout + margin: the attempt still owns the execution.
		e.clock.Advance(timeout + margin - time.Millisecond)
		for range 3 {
			if n, err := e.svc.Reconcile(e.ctx); err != nil || n != 0 {
				t.Fatalf("reconcile during the attempt: n=%d err=%v", n, err)
			}
			// Redeeming again while in flight reports it, sends nothing.
			_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			wantCode(t, err, models.EAlreadyConsumed)
		}
		var a answer
		select {
		case a = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("execute did not answer")
		}
		if a.err != nil {
			t.Fatalf("execute of a consumed token answered an error: %v", a.err)
		}
		if got, want := a.ex.Status, models.StatusUnknown; got != want {
			t.Fatalf("status = %s, want %s", got, want)
		}
		if got := biz.ExecuteCalls(e.downstreamKey(p)); got != 1 {
			t.Fatalf("execute calls while in flight = %d, want 1", got)
		}
		biz.SetExecuteDelay(0)
		e.clock.Advance(time.Minute)
		if _, err := e.svc.Reconcile(e.ctx); err != nil {
			t.Fatal(err)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || got.Status != models.StatusSucceeded {
			t.Fatalf("after reconcile: %v %v", got.Status, err)
		}
		if w, calls := biz.Writes(e.downstreamKey(p)), biz.ExecuteCalls(e.downstreamKey(p)); w != 1 || calls != 1 {
			t.Fatalf("writes=%d execute calls=%d, want 1 and 1", w, calls)
		}
	})
}

// The lease taken at consumption is the tool's adapter timeout plus the
// margin, however long the longest lease allowed.
func TestLeaseIsDerivedFromTheAdapterTimeout(t *testing.T) {
	t.Parallel()
	e, biz := leaseEnv(t, "sqlite", 2*time.Second, time.Second, time.Hour)
	p := e.confirm(e.propose("ord_1001", 100))
	now := e.clock.Now()
	biz.SetExecuteDelay(500 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		done <- err
	}()
	waitUntil(t, "the write reaches the business system", func() bool { return biz.ExecuteCalls(e.downstreamKey(p)) == 1 })
	got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
	if err != nil || got.Execution == nil {
		t.Fatalf("get: %v", err)
	}
	if got, want := got.Execution.LeaseUntil, now.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("lease until %s, want %s (timeout 2s + margin 1s)", got, want)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond every few milliseconds for up to 10 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
