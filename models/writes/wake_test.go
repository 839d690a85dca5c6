package writes_test

import (
	"context"
	"database/sql"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, to watch the listener

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// TestWaitAnyIsPerTenant: the console's live list of one tenant is not woken
// by another tenant's changes (not even as timing).
func TestWaitAnyIsPerTenant(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		other, err := e.store.CreateTenant(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		own, foreign := e.svc.WaitAny(e.tenant), e.svc.WaitAny(other.ID)
		p := e.propose("ord_1001", 100)
		e.confirm(p)
		select {
		case <-own:
		default:
			t.Fatal("the tenant's own listener was not woken")
		}
		select {
		case <-foreign:
			t.Fatal("another tenant's listener was woken by this tenant's change")
		default:
		}
	})
}

// instance is a second service process over the env's database, with a
// store of its own whose statements it counts.
type instance struct {
	svc        *writes.Service
	statements atomic.Int64
}

func (e *env) instance(poll time.Duration) *instance {
	e.t.Helper()
	return e.limitedInstance(poll, models.Limits{})
}

func (e *env) limitedInstance(poll time.Duration, limits models.Limits) *instance {
	e.t.Helper()
	in := &instance{}
	st, err := store.Open(e.dbURL, store.Options{Clock: e.clock, OnStatement: func(string) { in.statements.Add(1) }})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	tokens := token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	in.svc, err = writes.New(e.ctx, writes.Config{Store: st, Registry: registry.Demo(), Tokens: tokens,
		Adapters: e.adapter, Clock: e.clock, ExecutionLease: 10 * time.Second, PollInterval: poll, Limits: limits})
	if err != nil {
		e.t.Fatal(err)
	}
	return in
}

// listen runs the instance's change listener for the rest of the test and,
// on PostgreSQL, returns once it listens.
func (e *env) listen(in *instance) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	before := e.listeners()
	go func() { defer close(done); in.svc.Listen(ctx) }()
	if e.dbKind == "postgres" {
		e.eventually("the listener to connect", func() bool { return len(e.listeners()) > len(before) })
	}
}

// listeners returns the backend ids of the change listeners connected to
// the env's PostgreSQL database (none on SQLite).
func (e *env) listeners() []int {
	e.t.Helper()
	if e.dbKind != "postgres" {
		return nil
	}
	db, err := sql.Open("pgx", e.dbURL)
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(e.ctx, `SELECT pid FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database() ORDER BY pid`, store.ListenerApplicationName)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			e.t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

func (e *env) terminate(pids []int) {
	e.t.Helper()
	db, err := sql.Open("pgx", e.dbURL)
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	for _, pid := range pids {
		if _, err := db.ExecContext(e.ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			e.t.Fatal(err)
		}
	}
}

// eventually waits (up to 20 s) for cond, checking it every 20 ms.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("gave up waiting for %s", what)
}

// waitAsync starts a long-poll on in for p and returns its result.
func (e *env) waitAsync(in *instance, p *models.Proposal) <-chan *models.Proposal {
	out := make(chan *models.Proposal, 1)
	go func() {
		got, err := in.svc.Wait(e.ctx, e.tenant, p.ID, p.Revision, writes.MaxWait)
		if err != nil {
			e.t.Errorf("wait: %v", err)
		}
		out <- got
	}()
	return out
}

func (e *env) woken(ch <-chan *models.Proposal, want models.Status) {
	e.t.Helper()
	select {
	case got := <-ch:
		if got == nil || got.Status != want {
			e.t.Fatalf("long-poll returned %+v, want %s", got, want)
		}
	case <-time.After(20 * time.Second):
		// Far beyond any notification; the long-poll itself lasts 60 s.
		e.t.Fatal("the long-poll was not woken by the change")
	}
}

// TestIdleWaitReadsNothing: a long-poll on an unchanged proposal reads the
// database once and then nothing until the change, which wakes it. The
// change is made by the same instance, and by another one: on PostgreSQL
// it arrives by LISTEN/NOTIFY, on SQLite (another process such as the
// command line) by the process's one PRAGMA data_version watcher, which
// runs whatever the number of waiters and is not counted here.
func TestIdleWaitReadsNothing(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		a := e.instance(20 * time.Millisecond) // many expiry re-checks meanwhile
		e.listen(a)
		for _, decider := range []*writes.Service{a.svc, e.svc} {
			e.idleWaitWokenBy(a, decider)
		}
	})
}

func (e *env) idleWaitWokenBy(a *instance, decider *writes.Service) {
	t := e.t
	p := e.propose("ord_1001", 100)
	base := a.statements.Load()
	got := e.waitAsync(a, p)
	// The long-poll loads the proposal, then falls silent (under the old
	// per-waiter polling it never did). On SQLite the proposal, written
	// through another connection, makes the watcher wake it once more
	// within one watch interval: wait longer than that.
	e.eventually("the long-poll to load the proposal and go idle", func() bool {
		n := a.statements.Load()
		time.Sleep(store.ForeignWriteInterval + 100*time.Millisecond)
		return n > base && a.statements.Load() == n
	})
	idle := a.statements.Load()
	time.Sleep(400 * time.Millisecond) // twenty re-check intervals
	if n := a.statements.Load() - idle; n != 0 {
		t.Fatalf("an idle long-poll ran %d statements in 400 ms", n)
	}
	if _, err := decider.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)}); err != nil {
		t.Fatal(err)
	}
	e.woken(got, models.StatusConfirmed)
}

// TestWaitWakesAcrossInstances: a long-poll on instance A, whose expiry
// re-check is an hour, is woken by decisions on instance B, also when A's
// notification connection is killed just before the decision.
func TestWaitWakesAcrossInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "postgres", nil)
	a := e.instance(time.Hour)
	e.listen(a)

	p := e.propose("ord_1001", 100)
	e.woken(func() <-chan *models.Proposal {
		ch := e.waitAsync(a, p)
		time.Sleep(50 * time.Millisecond)
		e.confirm(p)
		return ch
	}(), models.StatusConfirmed)

	// The listener is killed while the waiter sleeps; the decision comes
	// at once, maybe before the listener is back. The waiter wakes either
	// way: by the notification, or by the re-check after reconnecting.
	q := e.propose("ord_1002", 100)
	ch := e.waitAsync(a, q)
	time.Sleep(50 * time.Millisecond)
	old := e.listeners()
	e.terminate(old)
	if _, err := e.svc.Decline(e.ctx, writes.DeclineInput{Reviewer: e.alice, ProposalID: q.ID, DigestSeen: q.ArgsDigest,
		Reason: "not this one"}); err != nil {
		t.Fatal(err)
	}
	e.woken(ch, models.StatusDeclined)
	e.eventually("the listener to reconnect", func() bool {
		now := e.listeners()
		return len(now) == 1 && !slices.Contains(old, now[0])
	})

	// Reconnected, it hears the next change.
	r := e.propose("ord_1003", 100)
	ch = e.waitAsync(a, r)
	time.Sleep(50 * time.Millisecond)
	e.confirm(r)
	e.woken(ch, models.StatusConfirmed)
}

// TestWaitersOfOneProposalShareOneLoad: the long-polls of one proposal
// woken by one change read it once between them, not once each. The change
// comes from another instance, as on PostgreSQL by NOTIFY and on SQLite by
// the foreign-write watcher, which wakes every waiter of the process.
func TestWaitersOfOneProposalShareOneLoad(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		a := e.instance(time.Hour)
		e.listen(a)
		wake := func(n int) int64 {
			p := e.propose("ord_1001", 100)
			got := make([]<-chan *models.Proposal, n)
			for i := range got {
				got[i] = e.waitAsync(a, p)
			}
			e.eventually("the long-polls to park and fall silent", func() bool {
				s := a.statements.Load()
				time.Sleep(store.ForeignWriteInterval + 100*time.Millisecond)
				return a.svc.Waiting() == n && a.statements.Load() == s
			})
			base := a.statements.Load()
			e.confirm(p)
			for _, ch := range got {
				e.woken(ch, models.StatusConfirmed)
			}
			return a.statements.Load() - base
		}
		one := wake(1)
		many := wake(50)
		if one == 0 {
			t.Fatal("waking one long-poll read nothing")
		}
		// Fifty separate loads would cost fifty times one; sharing costs
		// one load (a second may start when the change arrives in two
		// notifications).
		if many > 2*one {
			t.Fatalf("waking 50 long-polls of one proposal ran %d statements, one alone %d: each loads it", many, one)
		}
	})
}

// TestChangesAreAnnouncedAsTheyCommit: on PostgreSQL the transaction that
// records a change announces it, so a change is announced when, and only
// when, it commits. An execute whose transaction recorded its events and
// then failed (the audit append refused by a trigger) announces nothing: a
// change committed after it is heard and it never is. Presented again, the
// same token executes and is announced once, by this instance; a store
// without a registered instance (the command line) is heard too.
func TestChangesAreAnnouncedAsTheyCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "postgres", nil)
	heard := make(chan store.Change, 100)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	t.Cleanup(func() { cancel(); <-done })
	listening := make(chan struct{})
	go func() {
		done <- e.store.ListenChanges(ctx, func() { close(listening) }, func(c store.Change) { heard <- c })
	}()
	<-listening
	next := func() store.Change {
		t.Helper()
		select {
		case c := <-heard:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no change announced")
			return store.Change{}
		}
	}
	exec := func(q string) {
		t.Helper()
		if err := e.store.Gorm().Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TABLE refuse_audit (on_ boolean)`)
	exec(`CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
	  BEGIN IF EXISTS (SELECT 1 FROM refuse_audit) THEN RAISE EXCEPTION 'audit refused'; END IF; RETURN NEW; END $$`)
	exec(`CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_entries FOR EACH ROW EXECUTE FUNCTION refuse_audit()`)

	p := e.confirm(e.propose("ord_1001", 300))
	for range 2 { // created, confirmed
		if c := next(); c.ID != p.ID || c.TenantID != e.tenant || c.Source != e.svc.Instance() {
			t.Fatalf("announced %+v, want %s of tenant %s from instance %s", c, p.ID, e.tenant, e.svc.Instance())
		}
	}
	exec(`INSERT INTO refuse_audit VALUES (true)`)
	before := e.trail(p)
	if _, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err == nil {
		t.Fatal("the execute committed although its audit entry was refused")
	}
	if after := e.trail(p); after != before {
		t.Fatalf("the refused execute left %+v (before %+v)", after, before)
	}
	exec(`DELETE FROM refuse_audit`)
	// Changes committed after the failed one are heard first, so that one
	// was never announced; the last by a store that registered no instance.
	cli, err := store.Open(e.dbURL, store.Options{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	q := e.propose("ord_1002", 100)
	if c := next(); c.ID != q.ID {
		t.Fatalf("after the failed execute, heard %+v; want the creation of %s", c, q.ID)
	}
	if err := cli.Cancel(e.ctx, e.tenant, e.agent.ID, q.ID, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if c := next(); c.ID != q.ID || c.Source != "" {
		t.Fatalf("after the failed execute, heard %+v; want the command line's cancellation", c)
	}
	if ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err != nil || ex.Status != models.StatusSucceeded {
		t.Fatalf("the same token again: %+v %v", ex, err)
	}
	if c := next(); c.ID != p.ID || c.Source != e.svc.Instance() {
		t.Fatalf("announced %+v, want the execute of %s", c, p.ID)
	}
	select {
	case c := <-heard:
		t.Fatalf("one execute announced twice: then %+v", c)
	case <-time.After(300 * time.Millisecond):
	}
}
