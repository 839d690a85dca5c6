package events_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
)

// An agent may register a few endpoints, not a thousand: each is sent
// every event of its proposals. The bound holds however many registrations
// race (several instances over one PostgreSQL database).
func TestEndpointsPerScopeAreBounded(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{})
		agent := models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			ok, full int
			first    string
		)
		for i := range 3 * models.MaxAgentWebhookEndpoints {
			wg.Go(func() {
				ep, _, err := ev.RegisterEndpoint(e.ctx, agent.AgentID, agent, fmt.Sprintf("https://hooks.example.com/%d", i), "")
				mu.Lock()
				defer mu.Unlock()
				var me *models.Error
				switch {
				case err == nil:
					ok++
					first = ep.ID
				case errors.As(err, &me) && me.Code == models.EInvalidRequest && me.Details["limit"] == "webhook_endpoints" &&
					len(me.Fields) == 1 && me.Fields[0].Pointer == "/url":
					full++
				default:
					t.Errorf("registration %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if ok != models.MaxAgentWebhookEndpoints || full != 2*models.MaxAgentWebhookEndpoints {
			t.Fatalf("%d registered, %d refused; want %d and %d", ok, full, models.MaxAgentWebhookEndpoints, 2*models.MaxAgentWebhookEndpoints)
		}
		// A deleted endpoint makes room.
		if err := ev.DisableEndpoint(e.ctx, agent.AgentID, agent, first); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ev.RegisterEndpoint(e.ctx, agent.AgentID, agent, "https://hooks.example.com/again", ""); err != nil {
			t.Fatalf("after a deletion: %v", err)
		}
		// Another agent, and the tenant's own endpoints, count apart.
		other, err := e.store.CreateAgent(e.ctx, e.tenant, "other", "", "sha256:o")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ev.RegisterEndpoint(e.ctx, other.ID, models.EndpointScope{TenantID: e.tenant, AgentID: other.ID}, "https://hooks.example.com/0", ""); err != nil {
			t.Fatalf("another agent: %v", err)
		}
		tenant := models.EndpointScope{TenantID: e.tenant}
		for i := range models.MaxTenantWebhookEndpoints {
			if _, _, err := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, tenant, fmt.Sprintf("https://all.example.com/%d", i), ""); err != nil {
				t.Fatalf("tenant-wide endpoint %d: %v", i, err)
			}
		}
		if _, _, err := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, tenant, "https://all.example.com/more", ""); !models.IsCode(err, models.EInvalidRequest) {
			t.Fatalf("one tenant-wide endpoint too many: %v", err)
		}
	})
}

// The same URL registered twice in one scope would receive every event
// twice, with the same webhook-id and two secrets: the second registration
// is refused, naming the first, even when both race.
func TestDuplicateEndpointIsRefused(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{})
		agent := models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			made []string
			errs []error
		)
		for range 6 {
			wg.Go(func() {
				ep, _, err := ev.RegisterEndpoint(e.ctx, agent.AgentID, agent, "https://hooks.example.com/same", "")
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					made = append(made, ep.ID)
				} else {
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		if len(made) != 1 || len(errs) != 5 {
			t.Fatalf("%d endpoints for one URL (errors %v), want 1", len(made), errs)
		}
		for _, err := range errs {
			var me *models.Error
			if !errors.As(err, &me) || me.Code != models.EAlreadyExists || me.Details["endpoint_id"] != made[0] {
				t.Errorf("duplicate: %v, want already_exists naming %s", err, made[0])
			}
		}
		// The URL as CheckURL writes it is what counts.
		for _, same := range []string{" https://hooks.example.com/same", "https://Hooks.Example.COM/same", "https://hooks.example.com:443/same",
			"HTTPS://hooks.example.com:443/same"} {
			if _, _, err := ev.RegisterEndpoint(e.ctx, agent.AgentID, agent, same, ""); !models.IsCode(err, models.EAlreadyExists) {
				t.Errorf("the same URL written %q: %v", same, err)
			}
		}
		for raw, want := range map[string]string{"https://A.example:8443": "https://a.example:8443/", "http://b.example:80/x?q=1": "http://b.example/x?q=1",
			"http://[2001:DB8::1]:80/h": "http://[2001:db8::1]/h"} {
			if got, err := events.CheckURL(raw); err != nil || got != want {
				t.Errorf("CheckURL(%q) = %q, %v; want %q", raw, got, err, want)
			}
		}
		// The tenant's own endpoints are another scope; a deleted
		// endpoint's URL may be registered again (with a new secret).
		if _, _, err := ev.RegisterEndpoint(e.ctx, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant}, "https://hooks.example.com/same", ""); err != nil {
			t.Errorf("tenant-wide: %v", err)
		}
		if err := ev.DisableEndpoint(e.ctx, agent.AgentID, agent, made[0]); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ev.RegisterEndpoint(e.ctx, agent.AgentID, agent, "https://hooks.example.com/same", ""); err != nil {
			t.Errorf("after deleting it: %v", err)
		}
	})
}
