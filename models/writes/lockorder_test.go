package writes_test

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// Two instances on one PostgreSQL: instance B's background pass takes up a
// queued proposal (store.Reconsider) while an administrator on instance A
// adds another of its approvers to the group (store.SetGroupMember →
// regroup: lock the proposal's row, then INSERT its queue row). While
// Reconsider deleted the queue row before locking the proposal, the two
// took the same two locks in opposite orders and PostgreSQL aborted one
// with a deadlock (40P01): the administrator's change failed as
// "unavailable", or the confirmation was put off. Both now lock the
// proposal first; the change succeeds and the proposal is confirmed.
func TestGroupChangeAndTheBackgroundPassLockInOneOrder(t *testing.T) {
	t.Parallel()
	var biz *outage
	e, u := groupEnv(t, "postgres", func(e *env) {
		biz = &outage{Ledger: e.ledger}
		e.adapter["refund_order"] = biz
	})
	hank, ivy := e.user("hank", models.RoleReviewer), e.user("ivy", models.RoleReviewer)
	p := e.propose("ord_2002", 30000)
	for _, r := range []models.User{u["carol"], hank, ivy} {
		if _, err := e.stepUpConfirm(r, p); err != nil {
			t.Fatal(err)
		}
	}
	// hank joins security while the business system is down: queued.
	biz.down.Store(true)
	if out, err := e.svc.SetGroupMember(e.ctx, e.admin, "security", "hank", true); err != nil || out.Pending != 1 {
		t.Fatalf("outcome %+v, %v", out, err)
	}
	biz.down.Store(false)
	e.clock.Advance(2 * time.Second)

	// Instance B, whose statements we can pause.
	var armed atomic.Bool
	rLocked, sInserting := make(chan struct{}), make(chan struct{})
	var rOnce, sOnce sync.Once
	st, err := store.Open(e.dbURL, store.Options{Clock: e.clock, OnStatement: func(q string) {
		if !armed.Load() {
			return
		}
		if strings.HasPrefix(q, `UPDATE "proposals" SET "status"`) {
			rOnce.Do(func() {
				close(rLocked) // the queue row is deleted (locked) by now
				select {
				case <-sInserting:
					time.Sleep(200 * time.Millisecond) // A is now waiting on the queue row
				case <-time.After(5 * time.Second):
				}
			})
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tokens := token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	b, err := writes.New(e.ctx, writes.Config{Store: st, Registry: e.svc.Registry(), Tokens: tokens,
		Adapters: e.adapter, Clock: e.clock, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Instance A sees its own INSERT of the queue row.
	stA, err := store.Open(e.dbURL, store.Options{Clock: e.clock, OnStatement: func(q string) {
		if armed.Load() && strings.HasPrefix(q, `INSERT INTO "reconsiderations"`) {
			sOnce.Do(func() { close(sInserting) })
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stA.Close() })
	tokA := token.New(stA, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	a, err := writes.New(e.ctx, writes.Config{Store: stA, Registry: e.svc.Registry(), Tokens: tokA,
		Adapters: e.adapter, Clock: e.clock, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	armed.Store(true)
	var wg sync.WaitGroup
	var changeErr error
	var change writes.GroupOutcome
	wg.Go(func() {
		if _, err := b.Reconsider(e.ctx); err != nil {
			t.Log("reconsider:", err)
		}
	})
	select {
	case <-rLocked:
	case <-time.After(20 * time.Second):
		t.Fatal("the background pass never locked the proposal")
	}
	wg.Go(func() { change, changeErr = a.SetGroupMember(e.ctx, e.admin, "security", "ivy", true) })
	wg.Wait()

	got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	queued, _, _ := e.svc.QueuedConfirmation(e.ctx, e.tenant, p.ID)
	t.Logf("change %+v err %v; proposal %s; queued next %v", change, changeErr, got.Status, queued)
	if changeErr != nil {
		t.Errorf("the administrator's group change failed: %v", changeErr)
	}
	if got.Status != models.StatusConfirmed {
		t.Errorf("the complete proposal was not confirmed by either: %s", got.Status)
	}
}
