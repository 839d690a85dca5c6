package writes_test

import (
	"errors"
	"net/url"
	"testing"

	"github.com/countersign/countersign/internal/dbfault"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// faultEnv is the demo environment with the service's store opened through
// a driver whose commits the returned injector can make fail.
func faultEnv(t *testing.T, kind string) (*env, *dbfault.Injector) {
	t.Helper()
	e := newEnv(t, kind, nil)
	in := &dbfault.Injector{}
	st, err := store.Open(e.dbURL, store.Options{Clock: e.clock, WrapDriver: in.Wrap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.store, e.ledger = st, demoledger.New(st)
	e.tokens = token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	reg := registry.Demo()
	for _, tool := range reg.Tools() {
		e.adapter[tool.Name] = e.ledger
	}
	e.svc = e.newService(reg)
	return e, in
}

// proposalCount counts the tenant's proposals.
func (e *env) proposalCount() int {
	e.t.Helper()
	n, cursor := 0, ""
	for {
		page, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{Cursor: cursor, Limit: 100})
		if err != nil {
			e.t.Fatal(err)
		}
		n += len(page.Items)
		if page.Next == "" {
			return n
		}
		cursor = page.Next
	}
}

// The connection drops at the commit of a new proposal. When the commit
// went through, propose answers the stored proposal; when it did not, it
// answers outcome_uncertain with the request key to retry with, and the
// retry creates exactly one proposal. With or without a key of the agent's.
func TestProposeWhenTheCommitFails(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, faults := faultEnv(t, kind)
		for _, key := range []string{"refund-1001-a", ""} {
			// After the commit: the answer is the proposal, created.
			faults.Arm(dbfault.AfterCommit, "insert into proposals")
			before := e.proposalCount()
			p, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
				Arguments: refundArgs("ord_1001", 1200), RequestKey: key})
			if err != nil || !created {
				t.Fatalf("key %q, committed then lost: created=%v err=%v", key, created, err)
			}
			if faults.Fired() == 0 {
				t.Fatal("no fault was injected")
			}
			if got, err := e.svc.Get(e.ctx, e.tenant, p.ID); err != nil || got.Status != models.StatusAwaitingConfirmation {
				t.Fatalf("stored proposal: %v %v", got, err)
			}
			if got, want := e.proposalCount(), before+1; got != want {
				t.Fatalf("proposals = %d, want %d", got, want)
			}

			// Before the commit: uncertain, and the retry the README
			// prescribes (same request key, the one in details) makes one.
			faults.Arm(dbfault.BeforeCommit, "insert into proposals")
			args := refundArgs("ord_1002", 800)
			k2 := key
			if k2 != "" {
				k2 += "-b"
			}
			_, _, err = e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args, RequestKey: k2})
			wantCode(t, err, models.EOutcomeUncertain)
			var me *models.Error
			if !asError(err, &me) || me.Details["request_key"] == "" {
				t.Fatalf("outcome_uncertain without a request_key to retry with: %v", err)
			}
			retryKey := me.Details["request_key"].(string)
			if k2 != "" && retryKey != k2 {
				t.Fatalf("retry key = %q, want the agent's %q", retryKey, k2)
			}
			p2, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args, RequestKey: retryKey})
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			again, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args, RequestKey: retryKey})
			if err != nil || created || again.ID != p2.ID {
				t.Fatalf("second retry: created=%v err=%v id %s vs %s", created, err, again.ID, p2.ID)
			}
			if got, want := e.proposalCount(), before+2; got != want {
				t.Fatalf("proposals = %d, want %d (a duplicate was created)", got, want)
			}
		}
	})
}

// The connection drops at the commit that consumes the token. After the
// commit the execute goes on and writes once; before it, the answer is
// outcome_uncertain and presenting the same token again writes once.
func TestExecuteWhenTheConsumeCommitFails(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, faults := faultEnv(t, kind)
		refunded := e.order("ord_1001").RefundedMinor

		p := e.confirm(e.propose("ord_1001", 500))
		faults.Arm(dbfault.AfterCommit, "update tokens")
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil || ex.Status != models.StatusSucceeded {
			t.Fatalf("committed then lost: %+v %v", ex, err)
		}
		if faults.Fired() != 1 {
			t.Fatalf("faults fired = %d, want 1", faults.Fired())
		}

		p = e.confirm(e.propose("ord_1001", 300))
		faults.Arm(dbfault.BeforeCommit, "update tokens")
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EOutcomeUncertain)
		ex, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil || ex.Status != models.StatusSucceeded {
			t.Fatalf("retry with the same token: %+v %v", ex, err)
		}
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EAlreadyConsumed)
		if got, want := e.order("ord_1001").RefundedMinor, refunded+800; got != want {
			t.Fatalf("refunded = %d, want %d", got, want)
		}
	})
}

// The business system answered but recording its answer fails: the token
// is consumed, so execute answers the execution (still executing), not an
// error; the reconciler settles it from the business system's record
// without a second write.
//
// The demo ledger keeps its data in countersign's database, so its writes
// commit with the consumption and have no outcome to record apart; here it
// stands for a business system elsewhere (an HTTP one), whose outcome is
// recorded in a transaction of its own.
func TestExecuteWhenRecordingTheOutcomeFails(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, faults := faultEnv(t, kind)
		for _, tool := range registry.Demo().Tools() {
			e.adapter[tool.Name] = elsewhere{e.ledger}
		}
		e.svc = e.newService(registry.Demo())
		refunded := e.order("ord_1001").RefundedMinor
		p := e.confirm(e.propose("ord_1001", 400))
		faults.Arm(dbfault.BeforeCommit, "update executions")
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil {
			t.Fatalf("execute of a consumed token answered an error: %v", err)
		}
		if ex.Status != models.StatusExecuting || ex.ID == "" {
			t.Fatalf("execution = %+v, want it executing", ex)
		}
		e.clock.Advance(writes.DefaultAdapterTimeout + writes.DefaultLeaseMargin)
		if n, err := e.svc.Reconcile(e.ctx); err != nil || n != 1 {
			t.Fatalf("reconcile: n=%d err=%v", n, err)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || got.Status != models.StatusSucceeded {
			t.Fatalf("after reconcile: %v %v", got.Status, err)
		}
		if got, want := e.order("ord_1001").RefundedMinor, refunded+400; got != want {
			t.Fatalf("refunded = %d, want %d", got, want)
		}
	})
}

func asError(err error, target **models.Error) bool { return errors.As(err, target) }

// elsewhere is the demo ledger seen as a business system outside
// countersign's database: only the adapter contract, so its writes are
// not made in the consuming transaction.
type elsewhere struct{ models.Adapter }

// proxyEnv is the demo environment on PostgreSQL with the service's store
// connected through a TCP proxy that can cut a connection at COMMIT.
func proxyEnv(t *testing.T) (*env, *dbfault.PGProxy) {
	t.Helper()
	e := newEnv(t, "postgres", nil)
	u, err := url.Parse(e.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := dbfault.NewPGProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	st, err := store.Open(u.String(), store.Options{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.store, e.ledger = st, demoledger.New(st)
	e.tokens = token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	reg := registry.Demo()
	for _, tool := range reg.Tools() {
		e.adapter[tool.Name] = e.ledger
	}
	e.svc = e.newService(reg)
	return e, proxy
}

// The same faults on a real PostgreSQL connection: the proxy forwards the
// COMMIT and cuts the connection before its answer, or cuts it before the
// COMMIT reaches the server.
func TestPostgresConnectionCutAtCommit(t *testing.T) {
	t.Parallel()
	e, proxy := proxyEnv(t)
	refunded := e.order("ord_1001").RefundedMinor

	proxy.Arm(dbfault.AfterCommit, "insert into proposals")
	before := e.proposalCount()
	p, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
		Arguments: refundArgs("ord_1001", 600), RequestKey: "pg-cut-after"})
	if err != nil || !created || proxy.Fired() != 1 {
		t.Fatalf("propose, committed then cut: created=%v err=%v fired=%d", created, err, proxy.Fired())
	}
	proxy.Arm(dbfault.BeforeCommit, "insert into proposals")
	_, _, err = e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
		Arguments: refundArgs("ord_1002", 600), RequestKey: "pg-cut-before"})
	wantCode(t, err, models.EOutcomeUncertain)
	if _, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
		Arguments: refundArgs("ord_1002", 600), RequestKey: "pg-cut-before"}); err != nil || !created {
		t.Fatalf("retry after a cut before commit: created=%v err=%v", created, err)
	}
	if got, want := e.proposalCount(), before+2; got != want {
		t.Fatalf("proposals = %d, want %d", got, want)
	}

	p = e.confirm(p)
	proxy.Arm(dbfault.AfterCommit, "update tokens")
	ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	if err != nil || ex.Status != models.StatusSucceeded {
		t.Fatalf("execute, consumed then cut: %+v %v", ex, err)
	}
	p2 := e.confirm(e.propose("ord_1001", 200))
	proxy.Arm(dbfault.BeforeCommit, "update tokens")
	_, err = e.svc.Execute(e.ctx, e.agent, p2.ID, p2.Token.Compact)
	wantCode(t, err, models.EOutcomeUncertain)
	if ex, err := e.svc.Execute(e.ctx, e.agent, p2.ID, p2.Token.Compact); err != nil || ex.Status != models.StatusSucceeded {
		t.Fatalf("retry with the same token: %+v %v", ex, err)
	}
	if got, want := proxy.Fired(), 4; got != want {
		t.Fatalf("connections cut = %d, want %d", got, want)
	}
	if got, want := e.order("ord_1001").RefundedMinor, refunded+800; got != want {
		t.Fatalf("refunded = %d, want %d", got, want)
	}
}

// Cancelling, with the connection lost at commit: after the commit the
// answer is the cancelled proposal; before it, outcome_uncertain, and
// cancelling again cancels.
func TestCancelWhenTheCommitFails(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, faults := faultEnv(t, kind)
		p := e.propose("ord_1001", 100)
		faults.Arm(dbfault.AfterCommit, "update proposals")
		got, err := e.svc.Cancel(e.ctx, e.agent, p.ID)
		if err != nil || got.Status != models.StatusCancelled || faults.Fired() != 1 {
			t.Fatalf("committed then lost: %v %v (fired %d)", got, err, faults.Fired())
		}
		p = e.propose("ord_1002", 100)
		faults.Arm(dbfault.BeforeCommit, "update proposals")
		_, err = e.svc.Cancel(e.ctx, e.agent, p.ID)
		wantCode(t, err, models.EOutcomeUncertain)
		if got, err := e.svc.Cancel(e.ctx, e.agent, p.ID); err != nil || got.Status != models.StatusCancelled {
			t.Fatalf("cancel again: %v %v", got, err)
		}
	})
}

// A reviewer's approval, with the connection lost at commit: after the
// commit the answer is the confirmed proposal with its token; before it,
// outcome_uncertain, and approving again confirms it once.
func TestConfirmWhenTheCommitFails(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, faults := faultEnv(t, kind)
		p := e.propose("ord_1001", 100)
		faults.Arm(dbfault.AfterCommit, "insert into decisions")
		got := e.confirm(p)
		if faults.Fired() != 1 || got.Token == nil {
			t.Fatalf("committed then lost: fired %d, token %v", faults.Fired(), got.Token)
		}
		p = e.propose("ord_1002", 100)
		faults.Arm(dbfault.BeforeCommit, "insert into decisions")
		_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EOutcomeUncertain)
		if got := e.confirm(p); got.Status != models.StatusConfirmed || len(got.Decisions) != 1 {
			t.Fatalf("approve again: %s with %d decisions", got.Status, len(got.Decisions))
		}
	})
}
