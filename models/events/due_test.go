package events_test

import (
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/store"
)

// DueDeliveries leaves out the deliveries to a full scope and only those:
// an agent's own endpoints, or a tenant's tenant-wide ones, each apart,
// and names each delivery's scope.
func TestDueDeliveriesLeaveOutFullScopes(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{})
		other, err := e.store.CreateAgent(e.ctx, e.tenant, "agent-b", "", "sha256:b")
		if err != nil {
			t.Fatal(err)
		}
		a, _, err := ev.RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, "https://a.example.com/", "")
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := ev.RegisterEndpoint(e.ctx, other.ID, models.EndpointScope{TenantID: e.tenant, AgentID: other.ID}, "https://b.example.com/", "")
		if err != nil {
			t.Fatal(err)
		}
		wide, _, err := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant}, "https://wide.example.com/", "")
		if err != nil {
			t.Fatal(err)
		}
		e.propose("ord_1001", 100)
		e.proposeAs(other, "ord_1002", 100, "x")
		scopes := map[string]string{a.ID: e.agent.ID, b.ID: other.ID, wide.ID: ""}
		list := func(except ...models.EndpointScope) map[string]int {
			t.Helper()
			due, err := e.store.DueDeliveries(e.ctx, store.DueFilter{Channel: models.ChannelWebhook, ExceptScopes: except},
				time.Now().Add(time.Second), 100)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, d := range due {
				if want, ok := scopes[d.Target]; !ok || d.Agent != want || d.TenantID != e.tenant {
					t.Errorf("delivery %s to %s listed in scope %+v", d.ID, d.Target, d.Scope())
				}
				got[d.Target]++
			}
			return got
		}
		check := func(what string, got map[string]int, want map[string]int) {
			t.Helper()
			for _, id := range []string{a.ID, b.ID, wide.ID} {
				if got[id] != want[id] {
					t.Errorf("%s: %d deliveries to %s listed, want %d", what, got[id], id, want[id])
				}
			}
		}
		check("nothing full", list(), map[string]int{a.ID: 2, b.ID: 2, wide.ID: 4})
		check("the first agent full", list(models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}),
			map[string]int{b.ID: 2, wide.ID: 4})
		check("the tenant-wide endpoints full", list(models.EndpointScope{TenantID: e.tenant}),
			map[string]int{a.ID: 2, b.ID: 2})
		check("another tenant's tenant-wide endpoints full", list(models.EndpointScope{TenantID: "ten_other"}),
			map[string]int{a.ID: 2, b.ID: 2, wide.ID: 4})
		check("both agents full", list(models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID},
			models.EndpointScope{TenantID: e.tenant, AgentID: other.ID}), map[string]int{wide.ID: 4})
	})
}
