package events_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/store"
)

func TestSignatureMatchesTheStandardWebhooksExample(t *testing.T) {
	t.Parallel()
	// The example of the Standard Webhooks specification.
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"test": 2432232314}`)
	at := time.Unix(1614265330, 0)
	got, err := events.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", at, body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature = %s, want %s", got, want)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,bm9ub3RoZXJzaWduYXR1cmU= "+got)
	if err := events.Verify(secret, h, body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Errorf("a valid second signature was refused: %v", err)
	}
	if err := events.Verify(secret, h, []byte(`{"test": 2432232315}`), at, 5*time.Minute); err != events.ErrSignature {
		t.Errorf("tampered body: %v", err)
	}
	if err := events.Verify(secret, h, body, at.Add(6*time.Minute), 5*time.Minute); err != events.ErrTimestamp {
		t.Errorf("stale timestamp: %v", err)
	}
	h.Set("webhook-id", "msg_other")
	if err := events.Verify(secret, h, body, at, 5*time.Minute); err != events.ErrSignature {
		t.Errorf("another id with the same signature: %v", err)
	}
	if err := events.Verify("whsec_"+strings.Repeat("A", 44), h, body, at, 5*time.Minute); err != events.ErrSignature {
		t.Errorf("another secret: %v", err)
	}
}

func TestWebhooksAreSignedAndScoped(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{})
		r := newReceiver(t)
		if _, _, err := ev.RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, "ftp://127.0.0.1/x", ""); !models.IsCode(err, models.EInvalidRequest) {
			t.Fatalf("ftp endpoint: %v", err)
		}
		ep, sec, err := ev.RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, r.URL+"/hook", "mine")
		if err != nil {
			t.Fatal(err)
		}
		r.secret = sec
		if !strings.HasPrefix(sec, "whsec_") || ep.AgentID != e.agent.ID {
			t.Fatalf("endpoint %+v secret %q", ep, sec)
		}
		// Another agent's proposals never reach this endpoint.
		other, err := e.store.CreateAgent(e.ctx, e.tenant, "other", "", "sha256:o")
		if err != nil {
			t.Fatal(err)
		}
		p := e.propose("ord_1001", 100)
		saved := e.agent
		e.agent = other
		e.propose("ord_1002", 100)
		e.agent = saved
		drain(t, ev)

		got := r.messages()
		if len(got) != 2 {
			t.Fatalf("received %d messages, want 2", len(got))
		}
		for i, m := range got {
			if m.Verified != nil {
				t.Errorf("message %d does not verify: %v", i, m.Verified)
			}
			var b events.Body
			if err := json.Unmarshal(m.Body, &b); err != nil {
				t.Fatal(err)
			}
			if b.Data.EventID != m.ID || b.Data.ProposalID != p.ID || b.Data.AgentID != e.agent.ID || b.Data.TenantID != e.tenant {
				t.Errorf("message %d: %+v (id %s)", i, b, m.ID)
			}
		}
		// Deliveries run concurrently: receivers order by revision, not
		// by arrival.
		types := map[string]string{}
		for _, m := range got {
			var b events.Body
			_ = json.Unmarshal(m.Body, &b)
			types[b.Type] = b.Data.Status
		}
		if len(types) != 2 || types["proposal.created"] != "awaiting_confirmation" || types["proposal.awaiting_confirmation"] != "awaiting_confirmation" {
			t.Errorf("types %v", types)
		}
		log, _ := ev.Deliveries(e.ctx, e.tenant, ep.ID, 10)
		for _, d := range log {
			if d.Status != models.DeliverySucceeded || d.Attempts != 1 || d.LastCode != http.StatusNoContent {
				t.Errorf("delivery log: %+v", d)
			}
		}
	})
}

func TestRetryAfter500KeepsTheWebhookID(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		clock := models.NewFixedClock(time.Now().UTC())
		e := newEnv(t, dbURL(t, kind), clock)
		ev := e.events(events.Config{RetryBase: time.Second, MaxAttempts: 3})
		r := newReceiver(t)
		r.now = clock.Now
		r.answer = func(n int) int {
			if n < 2 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		}
		ep, sec, err := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant}, r.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		r.secret = sec
		p := e.propose("ord_1001", 100)
		if _, err := e.svc.Cancel(e.ctx, e.agent, p.ID); err != nil {
			t.Fatal(err)
		}
		// Once an attempt to the endpoint failed, it is probed with one
		// attempt at a time until one succeeds, and attempts run while
		// the round still claims: the deliveries due at one moment may
		// take up to one round each, so each step drains them.
		// created, awaiting, cancelled: three deliveries; the first two
		// attempts fail with 500 and wait for the backoff.
		if n := drain(t, ev); n != 3 {
			t.Fatalf("first rounds attempted %d, want 3", n)
		}
		clock.Set(clock.Now().Add(999 * time.Millisecond))
		if n, _ := ev.DispatchOnce(e.ctx); n != 0 {
			t.Fatalf("a failed delivery was retried before its backoff (%d)", n)
		}
		clock.Set(clock.Now().Add(time.Millisecond))
		if n := drain(t, ev); n != 2 {
			t.Fatalf("retry rounds attempted %d, want 2", n)
		}
		log, _ := ev.Deliveries(e.ctx, e.tenant, ep.ID, 10)
		for _, d := range log {
			if d.Status != models.DeliverySucceeded {
				t.Errorf("not delivered: %+v", d)
			}
		}
		ids := map[string]int{}
		for _, m := range r.messages() {
			if m.Verified != nil {
				t.Error(m.Verified)
			}
			ids[m.ID]++
		}
		if len(ids) != 3 || len(r.messages()) != 5 {
			t.Fatalf("%d messages with ids %v; want 5 messages for 3 events", len(r.messages()), ids)
		}
		log, _ = ev.Deliveries(e.ctx, e.tenant, ep.ID, 10)
		retried := 0
		for _, d := range log {
			if d.Attempts == 2 {
				retried++
				at, err := ev.Attempts(e.ctx, e.tenant, d.ID)
				if err != nil || len(at) != 2 || at[0].StatusCode != 500 || at[0].Error == "" || at[1].StatusCode != 200 {
					t.Errorf("attempt log: %+v %v", at, err)
				}
			}
		}
		if retried != 2 {
			t.Errorf("%d deliveries needed a second attempt, want 2", retried)
		}
		// Another tenant cannot read or redeliver the log.
		if _, err := ev.Attempts(e.ctx, "ten_other", log[0].ID); !models.IsCode(err, models.ENotFound) {
			t.Errorf("foreign attempts: %v", err)
		}
		if err := ev.Redeliver(e.ctx, e.demo.Admin.ID, "ten_other", log[0].ID); !models.IsCode(err, models.ENotFound) {
			t.Errorf("foreign redeliver: %v", err)
		}
		// Redeliver sends it again, with the same id.
		if err := ev.Redeliver(e.ctx, e.demo.Admin.ID, e.tenant, log[0].ID); err != nil {
			t.Fatal(err)
		}
		drain(t, ev)
		msgs := r.messages()
		if last := msgs[len(msgs)-1]; last.ID != log[0].Event.ID || len(msgs) != 6 {
			t.Errorf("redelivery sent %d messages, last id %s, want %s", len(msgs), last.ID, log[0].Event.ID)
		}
	})
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dbURL(t, "sqlite"), models.SystemClock{})
	ev := e.events(events.Config{RetryBase: time.Millisecond, MaxAttempts: 2})
	r := newReceiver(t)
	r.answer = func(int) int { return http.StatusServiceUnavailable }
	ep, sec, _ := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant}, r.URL, "")
	r.secret = sec
	e.propose("ord_1001", 100)
	for range 50 {
		drain(t, ev)
		time.Sleep(5 * time.Millisecond)
	}
	log, _ := ev.Deliveries(e.ctx, e.tenant, ep.ID, 10)
	for _, d := range log {
		if d.Status != models.DeliveryFailed || d.Attempts != 2 || d.LastCode != 503 {
			t.Errorf("delivery %+v", d)
		}
	}
	if len(r.messages()) != 4 {
		t.Errorf("%d attempts for two deliveries with two attempts each", len(r.messages()))
	}
}

// A dispatcher that claimed a delivery and died before sending it leaves
// it to the next instance once the claim's lease ran out; a delivery
// nobody attempted before a restart goes out after it.
func TestDeliveryAfterRestart(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		url := dbURL(t, kind)
		clock := models.NewFixedClock(time.Now().UTC())
		r := newReceiver(t)
		r.now = clock.Now

		first := newEnv(t, url, clock)
		ev1 := first.events(events.Config{Timeout: time.Second})
		_, sec, err := ev1.RegisterEndpoint(first.ctx, first.demo.Admin.ID, models.EndpointScope{TenantID: first.tenant}, r.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		r.secret = sec
		first.propose("ord_1001", 100)
		// The first instance claims one delivery, then stops before
		// sending it (as if killed).
		due, err := first.store.DueDeliveries(first.ctx, store.DueFilter{Channel: models.ChannelWebhook}, clock.Now(), 1)
		if err != nil || len(due) != 1 {
			t.Fatalf("due: %v %v", due, err)
		}
		claimed, err := first.store.ClaimDelivery(first.ctx, due[0].ID, clock.Now(), 21*time.Second)
		if err != nil || claimed == nil {
			t.Fatalf("claim: %v %v", claimed, err)
		}
		if err := ev1.Redeliver(first.ctx, first.demo.Admin.ID, first.tenant, claimed.ID); !models.IsCode(err, models.EInvalidState) {
			t.Errorf("redeliver during an attempt: %v", err)
		}
		first.store.Close()

		second := newEnv(t, url, clock)
		ev2 := second.events(events.Config{Timeout: time.Second})
		drain(t, ev2)
		got := r.messages()
		if len(got) != 1 || got[0].ID == claimed.Event.ID {
			t.Fatalf("after restart: %d messages (claimed one must wait for its lease)", len(got))
		}
		clock.Set(clock.Now().Add(21 * time.Second))
		drain(t, ev2)
		got = r.messages()
		if len(got) != 2 || got[1].ID != claimed.Event.ID || got[1].Verified != nil {
			t.Fatalf("the abandoned delivery did not go out after its lease: %+v", got)
		}
	})
}

// Two dispatchers over one PostgreSQL database send every delivery exactly
// once between them.
func TestTwoDispatchersOnePostgresNoDuplicates(t *testing.T) {
	t.Parallel()
	url := dbURL(t, "postgres")
	a := newEnv(t, url, models.SystemClock{})
	b := newEnv(t, url, models.SystemClock{})
	r := newReceiver(t)
	evA, evB := a.events(events.Config{}), b.events(events.Config{})
	_, sec, err := evA.RegisterEndpoint(a.ctx, a.demo.Admin.ID, models.EndpointScope{TenantID: a.tenant}, r.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	r.secret = sec
	for i := range 20 {
		a.propose("ord_1001", int64(100+i))
	}
	var wg sync.WaitGroup
	for _, ev := range []*events.Service{evA, evB, evA, evB} {
		wg.Go(func() {
			for range 200 {
				if n, err := ev.DispatchOnce(a.ctx); err != nil {
					t.Error(err)
					return
				} else if n == 0 {
					backlog, _ := ev.Backlog(a.ctx)
					if backlog[models.ChannelWebhook] == 0 {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	ids := map[string]int{}
	for _, m := range r.messages() {
		if m.Verified != nil {
			t.Error(m.Verified)
		}
		ids[m.ID]++
	}
	if len(ids) != 40 {
		t.Errorf("%d distinct events received, want 40", len(ids))
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("event %s received %d times", id, n)
		}
	}
}
