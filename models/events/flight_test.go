package events

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

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
	for i := range scopeCap(ch) {
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
	for _, d := range []store.DueDelivery{
		{ID: "b", TenantID: "ten_1", Agent: "agt_b", Target: "whep_b"},
		{ID: "w", TenantID: "ten_1", Target: "whep_w"},
		{ID: "x", TenantID: "ten_2", Agent: "agt_x", Target: "whep_x"},
	} {
		if !f.reserve(ch, d) {
			t.Errorf("%+v refused beside a full agent", d)
		}
	}
	// Releasing one of the agent's attempts gives the slot back.
	f.release(ch, agentA(0))
	if !f.reserve(ch, agentA(0)) {
		t.Error("a released slot was not given back")
	}

	// Tenant-wide scopes of two tenants.
	g := newInFlight()
	for i := range scopeCap(ch) {
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

// However many attempts race for the slots, no scope has more than its
// share and the tenant no more than its half: of 96 attempts at once in
// one tenant, 80 to one agent's 8 endpoints (24 by the endpoints' bound)
// and 8 each to another agent's and to the tenant-wide endpoints, the
// first agent gets exactly its 16 and the others all theirs, and then
// every slot comes back.
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
				}
				ready.Done()
				<-hold
				if ok {
					f.release(ch, d)
				}
			}()
		}
		ready.Wait()
		for s, want := range []int64{int64(scopeCap(ch)), 8, 8} {
			if n := got[s].Load(); n != want {
				t.Errorf("round %d: scope %q had %d attempts at once, want %d", round, agents[s], n, want)
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
