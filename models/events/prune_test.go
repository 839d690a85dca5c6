package events_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/store"
)

// outbox is what the tenant's delivery log and the agent's events hold.
type outbox struct {
	events     []models.Event
	deliveries map[string]models.Delivery // by id
	attempts   map[string]int             // delivery id → attempts logged
}

func (e *env) outbox() outbox {
	e.t.Helper()
	evs, err := e.store.EventsAfter(e.ctx, e.tenant, e.agent.ID, "", 500)
	if err != nil {
		e.t.Fatal(err)
	}
	log, err := e.store.DeliveryLog(e.ctx, store.DeliveryFilter{TenantID: e.tenant, Limit: 200})
	if err != nil {
		e.t.Fatal(err)
	}
	o := outbox{events: evs, deliveries: map[string]models.Delivery{}, attempts: map[string]int{}}
	for _, d := range log {
		o.deliveries[d.ID] = d
		at, err := e.store.DeliveryAttempts(e.ctx, e.tenant, d.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		o.attempts[d.ID] = len(at)
	}
	return o
}

func (o outbox) eventIDs() map[string]bool {
	out := map[string]bool{}
	for _, ev := range o.events {
		out[ev.ID] = true
	}
	return out
}

// endpoint registers a tenant-wide webhook endpoint at a receiver that
// answers every request with code.
func (e *env) endpoint(ev *events.Service, code int) *receiver {
	e.t.Helper()
	r := newReceiver(e.t)
	r.answer = func(int) int { return code }
	_, sec, err := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant}, r.URL+"/hook", "")
	if err != nil {
		e.t.Fatal(err)
	}
	r.secret = sec
	return r
}

func TestPruneOutboxDeletesOnlyWhatNothingOwes(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{MaxAttempts: 1})
		e.endpoint(ev, 204)
		// Three settled proposals, each created (two events: created and
		// awaiting confirmation) and cancelled, every event delivered; then
		// one delivery is made pending again.
		var settled []*models.Proposal
		for i := range 3 {
			p := e.propose(fmt.Sprintf("ord_10%02d", i+1), 100)
			if _, err := e.svc.Cancel(e.ctx, e.agent, p.ID); err != nil {
				t.Fatal(err)
			}
			settled = append(settled, p)
		}
		drain(t, ev)
		before := e.outbox()
		if len(before.events) != 9 || len(before.deliveries) != 9 {
			t.Fatalf("outbox before: %d events, %d deliveries", len(before.events), len(before.deliveries))
		}
		var owed models.Delivery
		for _, d := range before.deliveries {
			if d.Event.ProposalID == settled[1].ID && d.Event.Type == models.EventCreated {
				owed = d
			}
		}
		if err := ev.Redeliver(e.ctx, e.demo.Admin.ID, e.tenant, owed.ID); err != nil {
			t.Fatal(err)
		}
		// Events minted after the horizon stay, whatever their deliveries.
		time.Sleep(2 * time.Millisecond)
		horizon := time.Now()
		time.Sleep(2 * time.Millisecond)
		late := e.propose("ord_1004", 100)

		// In batches of two, as the service goes on from each batch's end.
		var total store.OutboxPruned
		after := ""
		for range 10 {
			got, err := e.store.PruneOutbox(e.ctx, after, horizon, 2)
			if err != nil {
				t.Fatal(err)
			}
			total.Add(got)
			if got.Considered < 2 {
				break
			}
			after = got.Through
		}
		// The redelivered delivery is pending, and its update came before
		// the horizon: its event and that event's deliveries stay, nothing
		// else of the settled proposals does.
		if total.Events != 8 || total.Deliveries != 8 || total.Attempts != 8 {
			t.Errorf("pruned %+v, want 8 events, 8 deliveries, 8 attempts", total)
		}
		after1 := e.outbox()
		ids := after1.eventIDs()
		if !ids[owed.Event.ID] {
			t.Errorf("the event a pending delivery owes was pruned")
		}
		if d, ok := after1.deliveries[owed.ID]; !ok || d.Status != models.DeliveryPending || after1.attempts[owed.ID] != 1 {
			t.Errorf("the pending delivery: %+v (present %v), %d attempts logged", d, ok, after1.attempts[owed.ID])
		}
		for _, evt := range after1.events {
			if evt.ID != owed.Event.ID && evt.ProposalID != late.ID {
				t.Errorf("event %s (%s of %s) outlived its retention", evt.ID, evt.Type, evt.ProposalID)
			}
		}
		if len(after1.events) != 1+2 {
			t.Errorf("%d events left, want the owed one and the late proposal's", len(after1.events))
		}
		through, err := e.store.PrunedThrough(e.ctx)
		if err != nil || through != total.Through || through < owed.Event.ID {
			t.Errorf("pruned through %q (%v), want %q", through, err, total.Through)
		}
		// Deleted deliveries are gone for people too.
		for id := range before.deliveries {
			if id == owed.ID {
				continue
			}
			if err := ev.Redeliver(e.ctx, e.demo.Admin.ID, e.tenant, id); !models.IsCode(err, models.ENotFound) {
				t.Errorf("redelivering a pruned delivery: %v", err)
			}
		}
		// Once delivered again, and older than the horizon, it goes too.
		drain(t, ev)
		got, err := e.store.PruneOutbox(e.ctx, "", time.Now().Add(time.Second), 100)
		if err != nil || got.Events != 3 || got.Deliveries != 3 {
			t.Errorf("second prune: %+v (%v), want the owed event and the late one, with a delivery each", got, err)
		}
		if left := e.outbox(); len(left.events) != 0 || len(left.deliveries) != 0 {
			t.Errorf("left: %d events, %d deliveries", len(left.events), len(left.deliveries))
		}
	})
}

func TestPruneFollowsTheRetention(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		forever := e.events(events.Config{})
		e.endpoint(forever, 204)
		p := e.propose("ord_1001", 100)
		drain(t, forever)
		time.Sleep(60 * time.Millisecond)
		if got, err := forever.Prune(e.ctx); err != nil || got != (store.OutboxPruned{}) {
			t.Fatalf("without a retention: pruned %+v (%v)", got, err)
		}
		// Retention counts from the delivery's last change too: an attempt
		// within it keeps the event.
		brief := e.events(events.Config{Retention: 50 * time.Millisecond, RetryBase: time.Hour})
		failing := e.endpoint(brief, 503)
		if _, err := e.svc.Cancel(e.ctx, e.agent, p.ID); err != nil {
			t.Fatal(err)
		}
		drain(t, brief) // the cancel's two deliveries: one succeeds, one waits for its retry
		if n := len(failing.messages()); n != 1 {
			t.Fatalf("the failing endpoint got %d requests", n)
		}
		got, err := brief.Prune(e.ctx)
		if err != nil || got.Events != 2 || got.Deliveries != 2 {
			t.Fatalf("pruned %+v (%v), want the creation's two events and their deliveries", got, err)
		}
		if left := e.outbox(); len(left.events) != 1 || len(left.deliveries) != 2 {
			t.Fatalf("left %d events and %d deliveries, want the cancellation's, with a retry owed", len(left.events), len(left.deliveries))
		}
	})
}

// TestPruneRacesRedeliveries prunes from two stores over one database (two
// instances) while people redeliver the same deliveries: a redelivery that
// succeeded keeps its delivery pending, with its attempt log and its
// event; one that lost the race finds no delivery; nothing else fails.
func TestPruneRacesRedeliveries(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		url := dbURL(t, kind)
		e := newEnv(t, url, models.SystemClock{})
		ev := e.events(events.Config{})
		e.endpoint(ev, 204)
		for i := range 20 {
			e.propose("ord_1001", int64(100+i))
		}
		drain(t, ev)
		before := e.outbox()
		if len(before.deliveries) != 40 {
			t.Fatalf("%d deliveries", len(before.deliveries))
		}
		other, err := store.Open(url, store.Options{Clock: e.clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { other.Close() })
		horizon := time.Now().Add(time.Hour)
		var (
			wg          sync.WaitGroup
			mu          sync.Mutex
			redelivered = map[string]bool{}
			failures    []error
			start       = make(chan struct{})
		)
		fail := func(err error) {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		}
		for _, st := range []*store.Store{e.store, other} {
			wg.Go(func() {
				<-start
				after := ""
				for {
					got, err := st.PruneOutbox(e.ctx, after, horizon, 3)
					if err != nil {
						fail(fmt.Errorf("prune: %w", err))
						return
					}
					if got.Considered < 3 {
						return
					}
					after = got.Through
				}
			})
		}
		for id := range before.deliveries {
			wg.Go(func() {
				<-start
				err := ev.Redeliver(e.ctx, e.demo.Admin.ID, e.tenant, id)
				switch {
				case err == nil:
					mu.Lock()
					redelivered[id] = true
					mu.Unlock()
				case !models.IsCode(err, models.ENotFound):
					fail(fmt.Errorf("redeliver %s: %w", id, err))
				}
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(failures...); err != nil {
			t.Fatal(err)
		}
		// A redelivery that came after the prune's read of its batch left
		// it pending; one before the batch was read kept it from the batch.
		after := e.outbox()
		ids := after.eventIDs()
		for id, d := range before.deliveries {
			got, kept := after.deliveries[id]
			switch {
			case redelivered[id] && (!kept || got.Status != models.DeliveryPending || after.attempts[id] != before.attempts[id] || !ids[d.Event.ID]):
				t.Errorf("delivery %s was redelivered, then: kept %v, status %s, %d of %d attempts, event kept %v",
					id, kept, got.Status, after.attempts[id], before.attempts[id], ids[d.Event.ID])
			case !redelivered[id] && kept:
				t.Errorf("delivery %s was neither redelivered nor pruned: %+v", id, got)
			}
		}
		if len(after.events) != len(redelivered) {
			t.Errorf("%d events left for %d redeliveries", len(after.events), len(redelivered))
		}
		t.Logf("%d of %d deliveries redelivered before they were pruned", len(redelivered), len(before.deliveries))
	})
}
