package writes_test

import (
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// TestRetryStopsAtExp: a failed_retryable execution is retried with the
// same key one millisecond before the token's exp, and refused at exp
// exactly, before anything reaches the business system.
func TestRetryStopsAtExp(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 1000))
		key := e.downstreamKey(p)
		exp := p.Token.ExpiresAt
		biz.FailNextExecutes(2)
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil || ex.Status != models.StatusFailedRetryable {
			t.Fatalf("first attempt: %+v %v", ex, err)
		}
		e.clock.Set(exp.Add(-time.Millisecond))
		ex, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil || ex.Status != models.StatusFailedRetryable || ex.Attempts != 2 {
			t.Fatalf("retry at exp-1ms: %+v %v", ex, err)
		}
		if got := biz.ExecuteCalls(key); got != 2 {
			t.Fatalf("execute calls = %d, want 2", got)
		}
		e.clock.Set(exp)
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ETokenExpired)
		e.clock.Advance(20 * time.Second)
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ETokenExpired)
		if got := biz.ExecuteCalls(key); got != 2 {
			t.Fatalf("execute calls after exp = %d, want still 2", got)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || got.Status != models.StatusExpired || got.Execution.Status != models.StatusFailedTerminal ||
			got.Execution.ErrorCode != string(models.ETokenExpired) || got.Revocable(e.clock.Now()) {
			t.Fatalf("after the refused retry: %s, execution %+v (%v)", got.Status, got.Execution, err)
		}
		// The background work does not retry it either.
		if _, err := e.svc.Reconcile(e.ctx); err != nil {
			t.Fatal(err)
		}
		if got := biz.ExecuteCalls(key); got != 2 || biz.TotalWrites() != 0 {
			t.Fatalf("calls %d, writes %d after reconcile", got, biz.TotalWrites())
		}
	})
}

// TestRevokeFailedRetryable: an administrator revokes a confirmation whose
// execution is failed_retryable; the retry never reaches the business
// system, also when many retries race the revocation.
func TestRevokeFailedRetryable(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 1000))
		key := e.downstreamKey(p)
		biz.FailNextExecutes(1)
		if ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err != nil || ex.Status != models.StatusFailedRetryable {
			t.Fatalf("first attempt: %+v %v", ex, err)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || !got.Revocable(e.clock.Now()) {
			t.Fatalf("a failed_retryable confirmation is not revocable: %v", err)
		}
		_, err = e.svc.Revoke(e.ctx, e.alice, p.ID)
		wantCode(t, err, models.EForbidden)

		var wg sync.WaitGroup
		var revokeErr error
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i == 10 {
					_, revokeErr = e.svc.Revoke(e.ctx, e.admin, p.ID)
					return
				}
				e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			}()
		}
		wg.Wait()
		calls := biz.ExecuteCalls(key)
		switch {
		case revokeErr == nil:
			if calls != 1 || biz.TotalWrites() != 0 {
				t.Fatalf("revoked, yet the business system saw %d calls and %d writes", calls, biz.TotalWrites())
			}
			r, err := e.svc.Get(e.ctx, e.tenant, p.ID)
			if err != nil || r.Status != models.StatusRevoked || r.Token.Status != models.TokenRevoked ||
				r.Execution.Status != models.StatusFailedTerminal || r.Execution.ErrorCode != string(models.ERevoked) {
				t.Fatalf("after revoke: %+v %+v %v", r, r.Execution, err)
			}
			_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			wantCode(t, err, models.ERevoked)
			if biz.ExecuteCalls(key) != 1 {
				t.Fatal("a revoked retry reached the business system")
			}
		default:
			// A retry claimed it first and succeeded: revoking came too late.
			wantCode(t, revokeErr, models.EInvalidState)
			if calls != 2 || biz.Writes(key) != 1 {
				t.Fatalf("calls %d, writes %d", calls, biz.Writes(key))
			}
		}
	})
}

// TestRevokeFailedRetryableAlone checks the revoke path deterministically.
func TestRevokeFailedRetryableAlone(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 1000))
		biz.FailNextExecutes(1)
		if ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err != nil || ex.Status != models.StatusFailedRetryable {
			t.Fatalf("first attempt: %+v %v", ex, err)
		}
		r, err := e.svc.Revoke(e.ctx, e.admin, p.ID)
		if err != nil || r.Status != models.StatusRevoked {
			t.Fatalf("revoke: %v %v", r, err)
		}
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ERevoked)
		_, err = e.svc.Revoke(e.ctx, e.admin, p.ID)
		wantCode(t, err, models.EInvalidState)
		if got := biz.ExecuteCalls(e.downstreamKey(p)); got != 1 {
			t.Fatalf("execute calls = %d, want 1", got)
		}
	})
}

// consumeUnsent consumes p's token as an execute does and sends nothing,
// as a process that died right after the consumption would leave it (the
// execution's lease 10s from now), and returns the downstream key.
func (e *env) consumeUnsent(p *models.Proposal) string {
	e.t.Helper()
	key := e.downstreamKey(p)
	now := e.clock.Now()
	_, consumed, err := e.store.ConsumeToken(e.ctx, store.Consume{TenantID: e.tenant, AgentID: e.agent.ID,
		ProposalID: p.ID, JTI: p.Token.JTI, Now: now,
		Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey, DownstreamKey: key,
			Operation: p.Tool, ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(10 * time.Second)}})
	if err != nil || !consumed {
		e.t.Fatalf("consume: %v %v", consumed, err)
	}
	return key
}

// TestReconcilerDoesNotSendAfterExp: a process consumed the token and died
// before sending; the reconciler first runs after the token's exp. The
// business system never saw the write, and sending it now would be a write
// after expiry: nothing is sent, the execution stays unknown (and is asked
// about again later).
func TestReconcilerDoesNotSendAfterExp(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 700))
		key := e.consumeUnsent(p)
		e.clock.Set(p.Token.ExpiresAt)
		if n, err := e.svc.Reconcile(e.ctx); err != nil || n != 1 {
			t.Fatalf("reconcile: %d %v", n, err)
		}
		if got := biz.ExecuteCalls(key); got != 0 {
			t.Fatalf("the reconciler sent the write after exp (%d calls)", got)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || got.Status != models.StatusUnknown || got.Execution.ErrorCode != "not_sent_after_expiry" {
			t.Fatalf("after reconcile: %+v %v", got.Execution, err)
		}
	})
}

// TestConcurrentRetriesSendOnce: many redemptions of a failed_retryable
// execution at once (two service instances on PostgreSQL) claim one retry:
// the business system sees exactly one more call.
func TestConcurrentRetriesSendOnce(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 1000))
		key := e.downstreamKey(p)
		biz.FailNextExecutes(1)
		if ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err != nil || ex.Status != models.StatusFailedRetryable {
			t.Fatalf("first attempt: %+v %v", ex, err)
		}
		services := []*env{e}
		if kind == "postgres" {
			second := &env{t: t, ctx: e.ctx, clock: e.clock, dbURL: e.dbURL}
			second.openStore()
			second.adapter = e.adapter
			second.svc = second.newService(e.svc.Registry())
			services = append(services, second)
		}
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := services[i%len(services)]
				s.svc.Execute(s.ctx, e.agent, p.ID, p.Token.Compact)
			}()
		}
		wg.Wait()
		if calls, writes := biz.ExecuteCalls(key), biz.Writes(key); calls != 2 || writes != 1 {
			t.Fatalf("execute calls %d, writes %d; want 2 and 1", calls, writes)
		}
	})
}

// TestFailedRetryableExpiresWithItsToken: nobody retries; at the token's
// exp the sweep settles the execution (failed_terminal, token_expired) and
// the proposal (expired), and no later redemption reaches the business
// system.
func TestFailedRetryableExpiresWithItsToken(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 1000))
		biz.FailNextExecutes(1)
		if ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err != nil || ex.Status != models.StatusFailedRetryable {
			t.Fatalf("first attempt: %+v %v", ex, err)
		}
		e.clock.Set(p.Token.ExpiresAt.Add(-time.Millisecond))
		if n, err := e.svc.Sweep(e.ctx); err != nil || n != 0 {
			t.Fatalf("sweep before exp: %d %v", n, err)
		}
		e.clock.Set(p.Token.ExpiresAt)
		if n, err := e.svc.Sweep(e.ctx); err != nil || n != 1 {
			t.Fatalf("sweep at exp: %d %v", n, err)
		}
		got, err := e.store.GetProposal(e.ctx, e.tenant, p.ID)
		if err != nil || got.Status != models.StatusExpired || got.Execution.Status != models.StatusFailedTerminal ||
			got.Execution.ErrorCode != string(models.ETokenExpired) {
			t.Fatalf("after the sweep: %s, execution %+v (%v)", got.Status, got.Execution, err)
		}
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ETokenExpired)
		_, err = e.svc.Revoke(e.ctx, e.admin, p.ID)
		wantCode(t, err, models.EInvalidState)
		if got := biz.ExecuteCalls(e.downstreamKey(p)); got != 1 {
			t.Fatalf("execute calls = %d, want 1", got)
		}
	})
}
