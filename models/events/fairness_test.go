package events_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/store"
)

// scopeShare is how many webhook attempts one endpoint scope (an agent's
// own endpoints, or the tenant-wide ones) may have in flight on one
// server: half of its tenant's half of the 64.
const scopeShare = 16

// An agent whose endpoints all stall takes its share of its organization's
// webhook attempts and no more: another agent's endpoint, and the
// tenant-wide one, get their events while every one of the stalled
// attempts is still held.
func TestStalledAgentLeavesOtherAgentsServed(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{Timeout: time.Minute})
		other, err := e.store.CreateAgent(e.ctx, e.tenant, "agent-b", "", "sha256:b")
		if err != nil {
			t.Fatal(err)
		}
		stalled := newStallingReceiver(t)
		stalledIDs := map[string]bool{}
		for i := range models.MaxAgentWebhookEndpoints {
			ep, _, err := ev.RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID},
				fmt.Sprintf("%s/a%d", stalled.URL, i), "")
			if err != nil {
				t.Fatal(err)
			}
			stalledIDs[ep.ID] = true
		}
		b := e.receiving(ev, other.ID, models.EndpointScope{TenantID: e.tenant, AgentID: other.ID})
		wide := e.receiving(ev, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant})
		// Three proposals: six events, six deliveries to each of the
		// agent's eight endpoints, of which three each (24) could be in
		// flight by the endpoints' own bound.
		for i := range 3 {
			e.propose("ord_1001", int64(100+i))
		}
		stop := run(ev)
		defer stop()
		defer close(stalled.release)

		waitFor(t, 20*time.Second, "the stalled agent's endpoints were not attempted up to its share", func() bool {
			n, _, _ := stalled.counts()
			return n >= scopeShare
		})
		waitFor(t, 20*time.Second, "the tenant-wide endpoint did not get the stalled agent's events", func() bool { return len(wide.messages()) == 6 })
		// The other agent proposes while the first one's attempts are held.
		e.proposeAs(other, "ord_1002", 100, "x")
		waitFor(t, 20*time.Second, "the other agent's events waited for the stalled agent's endpoints", func() bool {
			return len(b.messages()) == 2 && len(wide.messages()) == 8
		})
		// None of the stalled attempts ended before the others' deliveries
		// arrived, and there were never more than the share.
		if now, most, total := stalled.counts(); now != scopeShare || most != scopeShare || total != scopeShare {
			t.Errorf("the stalled agent's endpoints hold %d attempts (at most %d at once, %d in all), want %d, none ended",
				now, most, total, scopeShare)
		}
		for _, m := range append(b.messages(), wide.messages()...) {
			if m.Verified != nil {
				t.Error(m.Verified)
			}
		}
		// The attempts that could not take a slot were neither made nor
		// counted: every one of the agent's deliveries that is not in
		// flight has had no attempt.
		log, err := e.store.DeliveryLog(e.ctx, store.DeliveryFilter{TenantID: e.tenant, Channel: models.ChannelWebhook, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		attempted, waiting := 0, 0
		for _, d := range log {
			if !stalledIDs[d.Target] {
				continue
			}
			if d.Status != models.DeliveryPending {
				t.Errorf("delivery %s to a stalled endpoint is %s", d.ID, d.Status)
			}
			switch d.Attempts {
			case 0:
				waiting++
			case 1:
				attempted++
			default:
				t.Errorf("delivery %s: %d attempts", d.ID, d.Attempts)
			}
		}
		if attempted != scopeShare || attempted+waiting != 6*models.MaxAgentWebhookEndpoints {
			t.Errorf("%d deliveries attempted and %d waiting, want %d attempted of %d", attempted, waiting,
				scopeShare, 6*models.MaxAgentWebhookEndpoints)
		}
	})
}

// The tenant-wide endpoints are a scope of their own: when they all stall
// they take their share, and an agent's own endpoint still gets its
// events. (Without the scope's bound they fill the organization's half of
// the server's attempts and the agent's endpoint gets nothing.)
func TestStalledTenantWideEndpointsLeaveAgentsServed(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{Timeout: time.Minute})
		stalled := newStallingReceiver(t)
		for i := range models.MaxTenantWebhookEndpoints {
			if _, _, err := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant},
				fmt.Sprintf("%s/w%d", stalled.URL, i), ""); err != nil {
				t.Fatal(err)
			}
		}
		own := e.receiving(ev, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID})
		// Three proposals: 96 deliveries to the 16 tenant-wide endpoints,
		// 48 of which could be in flight by the endpoints' own bound.
		for i := range 3 {
			e.propose("ord_1001", int64(100+i))
		}
		stop := run(ev)
		defer stop()
		defer close(stalled.release)
		waitFor(t, 20*time.Second, "the tenant-wide endpoints were not attempted up to their share", func() bool {
			n, _, _ := stalled.counts()
			return n >= scopeShare
		})
		waitFor(t, 20*time.Second, "the agent's endpoint did not get the first six events", func() bool { return len(own.messages()) == 6 })
		e.propose("ord_1002", 100)
		waitFor(t, 20*time.Second, "the agent's events waited for the stalled tenant-wide endpoints", func() bool { return len(own.messages()) == 8 })
		if now, most, total := stalled.counts(); now != scopeShare || most != scopeShare || total != scopeShare {
			t.Errorf("the tenant-wide endpoints hold %d attempts (at most %d at once, %d in all), want %d, none ended",
				now, most, total, scopeShare)
		}
	})
}

// Each scope takes at most half of what the others of its organization
// leave: when one agent's endpoints stall and then a second agent's do too,
// the second takes half of the 16 the first left, and the organization's
// other agents and its tenant-wide endpoints keep a quarter of its
// attempts. (With a fixed half per scope the two together held all 32 and
// the third agent's events waited for their attempts to time out.)
func TestTwoStalledAgentsLeaveAQuarter(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{Timeout: time.Minute})
		second, err := e.store.CreateAgent(e.ctx, e.tenant, "agent-b", "", "sha256:b")
		if err != nil {
			t.Fatal(err)
		}
		third, err := e.store.CreateAgent(e.ctx, e.tenant, "agent-c", "", "sha256:c")
		if err != nil {
			t.Fatal(err)
		}
		stalledA, stalledB := newStallingReceiver(t), newStallingReceiver(t)
		for _, s := range []struct {
			agent models.Agent
			url   string
		}{{e.agent, stalledA.URL}, {second, stalledB.URL}} {
			for i := range models.MaxAgentWebhookEndpoints {
				if _, _, err := ev.RegisterEndpoint(e.ctx, s.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: s.agent.ID},
					fmt.Sprintf("%s/e%d", s.url, i), ""); err != nil {
					t.Fatal(err)
				}
			}
		}
		c := e.receiving(ev, third.ID, models.EndpointScope{TenantID: e.tenant, AgentID: third.ID})
		wide := e.receiving(ev, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant})
		stop := run(ev)
		defer stop()
		defer close(stalledB.release)
		defer close(stalledA.release)

		// The first agent's three proposals: 48 deliveries to its stalled
		// endpoints, 24 of which the endpoints' own bound would allow.
		for i := range 3 {
			e.propose("ord_1001", int64(100+i))
		}
		waitFor(t, 20*time.Second, "the first stalled agent did not take its half", func() bool {
			n, _, _ := stalledA.counts()
			return n >= scopeShare
		})
		for i := range 3 {
			e.proposeAs(second, "ord_1002", int64(100+i), "x")
		}
		waitFor(t, 20*time.Second, "the second stalled agent did not take half of what was left", func() bool {
			n, _, _ := stalledB.counts()
			return n >= scopeShare/2
		})
		waitFor(t, 20*time.Second, "the tenant-wide endpoint did not get the stalled agents' events", func() bool { return len(wide.messages()) == 12 })
		e.proposeAs(third, "ord_1003", 100, "x")
		waitFor(t, 20*time.Second, "the third agent's events waited for the stalled agents' endpoints", func() bool {
			return len(c.messages()) == 2 && len(wide.messages()) == 14
		})
		for _, s := range []struct {
			name string
			r    *stallingReceiver
			want int
		}{{"first", stalledA, scopeShare}, {"second", stalledB, scopeShare / 2}} {
			if now, most, total := s.r.counts(); now != s.want || most != s.want || total != s.want {
				t.Errorf("the %s stalled agent's endpoints hold %d attempts (at most %d at once, %d in all), want %d, none ended",
					s.name, now, most, total, s.want)
			}
		}
		for _, m := range append(c.messages(), wide.messages()...) {
			if m.Verified != nil {
				t.Error(m.Verified)
			}
		}
	})
}

// An endpoint whose last attempt failed gets one attempt at a time until
// one succeeds: a receiver that stalls, or fails, after its first attempts
// holds one of the dispatcher's slots instead of three, and an answer from
// it gives it all three back.
func TestFailingEndpointGetsOneAttemptAtATime(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{Timeout: time.Minute})
		var (
			mu             sync.Mutex
			arrived, now   int
			most           [4]int // by phase: 1 fails, 2 probes, 3 after the probe succeeded
			fail, ok, free = make(chan struct{}), make(chan struct{}), make(chan struct{})
		)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			_, _ = io.Copy(io.Discard, req.Body)
			mu.Lock()
			arrived++
			ph := 1
			switch {
			case arrived == 4:
				ph = 2
			case arrived > 4:
				ph = 3
			}
			now++
			most[ph] = max(most[ph], now)
			mu.Unlock()
			defer func() { mu.Lock(); now--; mu.Unlock() }()
			wait := map[int]chan struct{}{1: fail, 2: ok, 3: free}[ph]
			select {
			case <-wait:
			case <-req.Context().Done():
				return
			}
			if ph == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		if _, _, err := ev.RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, srv.URL, ""); err != nil {
			t.Fatal(err)
		}
		// Three proposals: six deliveries to the one endpoint.
		for i := range 3 {
			e.propose("ord_1001", int64(100+i))
		}
		stop := run(ev)
		defer stop()
		defer close(free)
		count := func() (int, int) { mu.Lock(); defer mu.Unlock(); return arrived, now }
		waitFor(t, 20*time.Second, "the endpoint did not get its three attempts", func() bool { a, _ := count(); return a >= 3 })
		close(fail)
		waitFor(t, 20*time.Second, "no attempt followed the failed ones", func() bool { a, _ := count(); return a >= 4 })
		// Three deliveries are due and the endpoint has two slots of its
		// three free, but it failed: nothing more starts while the one
		// attempt is held.
		time.Sleep(300 * time.Millisecond)
		if a, _ := count(); a != 4 {
			t.Errorf("%d attempts reached the endpoint while its probe was held, want 4", a)
		}
		close(ok)
		// The probe succeeded: the two deliveries still due start together.
		waitFor(t, 20*time.Second, "the endpoint did not get its slots back after a success", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return most[3] >= 2
		})
		mu.Lock()
		defer mu.Unlock()
		if most[1] != 3 || most[2] != 1 {
			t.Errorf("at most %d attempts at once before the failure and %d after it, want 3 and 1", most[1], most[2])
		}
	})
}
