package events

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// One scope's slots are its own: an agent whose endpoints fill its share
// leaves a slot to another agent of its tenant, to the tenant-wide
// endpoints, and to an agent of another tenant with the same endpoint
// layout; a tenant-wide scope full in one tenant leaves another tenant's.
func TestScopeBoundsAreApart(t *testing.T) {
	t.Parallel()
	ch := models.ChannelWebhook
	f := newInFlight()
	agentA := func(i int) store.DueDelivery {
		return store.DueDelivery{ID: fmt.Sprint("a", i), TenantID: "ten_1", Agent: "agt_a", Target: fmt.Sprint("whep_a", i%8)}
	}
	for i := range scopeCap(ch, 0) {
		if !f.reserve(ch, agentA(i)) {
			t.Fatalf("attempt %d of the agent's share refused", i)
		}
	}
	// A ninth endpoint's first attempt, the agent's seventeenth: refused
	// although neither the endpoint, the tenant nor the channel is full.
	if f.reserve(ch, store.DueDelivery{ID: "a-extra", TenantID: "ten_1", Agent: "agt_a", Target: "whep_a9"}) {
		t.Fatal("an agent took more than its share")
	}
	room := f.free(ch)
	if len(room.scopes) != 1 || room.scopes[0] != (models.EndpointScope{TenantID: "ten_1", AgentID: "agt_a"}) {
		t.Errorf("full scopes %+v", room.scopes)
	}
	others := []store.DueDelivery{
		{ID: "b", TenantID: "ten_1", Agent: "agt_b", Target: "whep_b"},
		{ID: "w", TenantID: "ten_1", Target: "whep_w"},
		{ID: "x", TenantID: "ten_2", Agent: "agt_x", Target: "whep_x"},
	}
	for _, d := range others {
		if !f.reserve(ch, d) {
			t.Errorf("%+v refused beside a full agent", d)
		}
	}
	// Releasing one of the agent's attempts gives the slot back once the
	// others of its tenant hold none (while they hold two, its share is
	// half of the 30 they leave).
	f.release(ch, agentA(0))
	if f.reserve(ch, agentA(0)) {
		t.Error("an agent took 16 attempts while the others of its tenant held 2")
	}
	for _, d := range others {
		f.release(ch, d)
	}
	if !f.reserve(ch, agentA(0)) {
		t.Error("a released slot was not given back")
	}

	// Tenant-wide scopes of two tenants.
	g := newInFlight()
	for i := range scopeCap(ch, 0) {
		if !g.reserve(ch, store.DueDelivery{ID: fmt.Sprint("w", i), TenantID: "ten_1", Target: fmt.Sprint("whep_w", i)}) {
			t.Fatalf("tenant-wide attempt %d refused", i)
		}
	}
	if g.reserve(ch, store.DueDelivery{ID: "w-extra", TenantID: "ten_1", Target: "whep_w99"}) {
		t.Error("the tenant-wide endpoints took more than their share")
	}
	if !g.reserve(ch, store.DueDelivery{ID: "v", TenantID: "ten_2", Target: "whep_v"}) {
		t.Error("another tenant's tenant-wide endpoint refused")
	}
	// Notifications have no scope bound beyond their tenant's.
	n := newInFlight()
	for i := range tenantCap(models.ChannelEmail) {
		if !n.reserve(models.ChannelEmail, store.DueDelivery{ID: fmt.Sprint("m", i), TenantID: "ten_1", Target: models.ChannelEmail}) {
			t.Fatalf("e-mail attempt %d refused", i)
		}
	}
	if got := n.free(models.ChannelEmail).scopes; len(got) != 0 {
		t.Errorf("a notification channel reported full scopes %+v", got)
	}
}

// Each scope takes half of what the others of its tenant leave: one
// agent's stalled endpoints take 16 of the tenant's 32, a second agent's 8,
// the tenant-wide endpoints then 4, and so on down to one attempt while
// any slot is left; and when the first agent's attempts end, the second
// may grow again.
func TestEachScopeHalvesWhatIsLeft(t *testing.T) {
	t.Parallel()
	ch := models.ChannelWebhook
	f := newInFlight()
	fill := func(agent string) int {
		n := 0
		for f.reserve(ch, store.DueDelivery{ID: fmt.Sprint(agent, n), TenantID: "ten_1", Agent: agent, Target: fmt.Sprint("whep_", agent, n)}) {
			n++
		}
		return n
	}
	for i, want := range []int{16, 8, 4, 2, 1, 1, 0} {
		agent := fmt.Sprint("agt_", i)
		if i == 2 {
			agent = "" // the tenant-wide endpoints
		}
		if got := fill(agent); got != want {
			t.Errorf("scope %d (%q) took %d attempts, want %d", i, agent, got, want)
		}
	}
	if f.tenant[[2]string{ch, "ten_1"}] != tenantCap(ch) {
		t.Errorf("the tenant holds %d attempts, want all %d", f.tenant[[2]string{ch, "ten_1"}], tenantCap(ch))
	}
	// Full: every scope with attempts in flight, and any new one, is
	// reported full or its tenant is.
	room := f.free(ch)
	if len(room.tenants) != 1 || room.tenants[0] != "ten_1" {
		t.Errorf("full tenants %v", room.tenants)
	}
	// The first agent's attempts end: the second agent (8 held, 16 left by
	// the others) may take up to half of the 24 the others now leave.
	for n := range 16 {
		f.release(ch, store.DueDelivery{ID: fmt.Sprint("agt_0", n), TenantID: "ten_1", Agent: "agt_0", Target: fmt.Sprint("whep_agt_0", n)})
	}
	room = f.free(ch)
	for _, sc := range room.scopes {
		if sc.AgentID == "agt_1" {
			t.Errorf("the second agent is reported full with %d of 32 held by the others", 8)
		}
	}
	n := 0
	for f.reserve(ch, store.DueDelivery{ID: fmt.Sprint("more", n), TenantID: "ten_1", Agent: "agt_1", Target: fmt.Sprint("whep_more", n)}) {
		n++
	}
	// Others hold 8 (4+2+1+1): half of the 24 they leave is 12.
	if n != 4 {
		t.Errorf("the second agent grew by %d attempts, want 4 (to 12)", n)
	}
	// Another tenant's scopes are apart.
	if !f.reserve(ch, store.DueDelivery{ID: "x", TenantID: "ten_2", Agent: "agt_x", Target: "whep_x"}) {
		t.Error("another tenant's agent refused")
	}
}

// However many attempts race for the slots, the bounds hold: of 96
// attempts at once in one tenant, 80 to one agent's 8 endpoints (24 by the
// endpoints' bound) and 8 each to another agent's and to the tenant-wide
// endpoints, no scope takes more than its share when alone, the tenant no
// more than its half (and it counts exactly the attempts granted), every
// scope refused in the race is still refused once it is over (its share
// only shrinks while the others hold theirs), and then every slot comes
// back.
func TestScopeBoundUnderRace(t *testing.T) {
	t.Parallel()
	ch := models.ChannelWebhook
	f := newInFlight()
	agents := []string{"agt_a", "agt_b", ""}
	for round := range 20 {
		var (
			ready, done sync.WaitGroup
			hold        = make(chan struct{})
			got         [3]atomic.Int64
			refused     [3]atomic.Bool
		)
		for g := range 96 {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				s := 0
				if g >= 80 {
					s = 1 + g%2
				}
				d := store.DueDelivery{ID: fmt.Sprint(round, "-", g), TenantID: "ten_1", Agent: agents[s],
					Target: fmt.Sprintf("whep_%d_%d", s, g%8)}
				ok := f.reserve(ch, d)
				if ok {
					got[s].Add(1)
				} else {
					refused[s].Store(true)
				}
				ready.Done()
				<-hold
				if ok {
					f.release(ch, d)
				}
			}()
		}
		ready.Wait()
		total := got[0].Load() + got[1].Load() + got[2].Load()
		if total > int64(tenantCap(ch)) {
			t.Errorf("round %d: the tenant had %d attempts at once, more than %d", round, total, tenantCap(ch))
		}
		f.mu.Lock()
		held := f.tenant[[2]string{ch, "ten_1"}]
		f.mu.Unlock()
		if int64(held) != total {
			t.Errorf("round %d: the tenant counts %d attempts, %d were granted", round, held, total)
		}
		for s := range agents {
			own := got[s].Load()
			if most := int64(scopeCap(ch, 0)); own > most {
				t.Errorf("round %d: scope %q had %d attempts at once, more than %d", round, agents[s], own, most)
			}
			if refused[s].Load() && f.reserve(ch, store.DueDelivery{ID: "late", TenantID: "ten_1", Agent: agents[s], Target: "whep_late"}) {
				t.Errorf("round %d: scope %q was refused in the race and granted after it with nothing released", round, agents[s])
			}
		}
		close(hold)
		done.Wait()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.channel[ch] != 0 || len(f.target) != 0 || len(f.tenant) != 0 || len(f.scope) != 0 {
		t.Errorf("slots left taken: %v %v %v %v", f.channel, f.target, f.tenant, f.scope)
	}
}

// A webhook endpoint whose last attempt failed has one attempt in flight
// at a time, and is reported full with one; a success gives it its three
// back; a failure nothing has followed for failingFor is forgotten; and a
// notification channel is never narrowed (its target is the channel).
func TestFailedTargetIsProbed(t *testing.T) {
	t.Parallel()
	ch := models.ChannelWebhook
	f := newInFlight()
	at := func(target string, i int) store.DueDelivery {
		return store.DueDelivery{ID: fmt.Sprint(target, i), TenantID: "ten_1", Agent: "agt_a", Target: target}
	}
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	f.settle(ch, at("whep_x", 0), false, t0)
	if !f.reserve(ch, at("whep_x", 1)) {
		t.Fatal("a failed endpoint's probe refused")
	}
	if f.reserve(ch, at("whep_x", 2)) {
		t.Error("a failed endpoint got a second attempt beside its probe")
	}
	if got := f.free(ch).targets; len(got) != 1 || got[0] != "whep_x" {
		t.Errorf("full targets %v, want the failed endpoint", got)
	}
	f.settle(ch, at("whep_x", 1), true, t0.Add(time.Second))
	f.release(ch, at("whep_x", 1))
	for i := range targetCap(ch) {
		if !f.reserve(ch, at("whep_x", 10+i)) {
			t.Fatalf("attempt %d refused after the endpoint answered", i)
		}
	}
	for i := range targetCap(ch) {
		f.release(ch, at("whep_x", 10+i))
	}

	f.settle(ch, at("whep_y", 0), false, t0.Add(2*time.Minute))
	f.settle(ch, at("whep_z", 0), false, t0.Add(2*time.Minute+failingFor))
	f.mu.Lock()
	_, y := f.failing[[2]string{ch, "whep_y"}]
	_, z := f.failing[[2]string{ch, "whep_z"}]
	f.mu.Unlock()
	if y || !z {
		t.Errorf("after %s: the older failure kept %v, the newer %v; want it forgotten and the newer kept", failingFor, y, z)
	}

	n := newInFlight()
	n.settle(models.ChannelEmail, store.DueDelivery{ID: "m", TenantID: "ten_1", Target: models.ChannelEmail}, false, t0)
	for i := range 2 {
		if !n.reserve(models.ChannelEmail, store.DueDelivery{ID: fmt.Sprint("m", i), TenantID: "ten_1", Target: models.ChannelEmail}) {
			t.Fatalf("e-mail attempt %d refused after a failure", i)
		}
	}
}
