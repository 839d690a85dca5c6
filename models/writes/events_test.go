package writes_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// eventTypes returns the types of every event of proposal id, in order, and
// checks what each event must carry.
func (e *env) eventTypes(t *testing.T, id string) []string {
	t.Helper()
	evs, err := e.store.EventsAfter(e.ctx, e.tenant, e.agent.ID, "", 500)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var rev int64
	for _, ev := range evs {
		if ev.ProposalID != id {
			continue
		}
		if ev.TenantID != e.tenant || ev.AgentID != e.agent.ID || !ev.Status.Valid() {
			t.Errorf("event %s lacks its scope or status: %+v", ev.Type, ev)
		}
		if ev.Revision < rev {
			t.Errorf("event %s has revision %d after %d", ev.Type, ev.Revision, rev)
		}
		rev = ev.Revision
		if strings.Contains(string(ev.Data), "eyJ") {
			t.Errorf("event %s carries something like a token: %s", ev.Type, ev.Data)
		}
		out = append(out, string(ev.Type))
	}
	return out
}

func wantEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
}

// Every state change leaves exactly one event, written with the change.
func TestEveryStateChangeLeavesAnEvent(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1001", 19900)
		c := e.confirm(p)
		if _, err := e.svc.Execute(e.ctx, e.agent, p.ID, c.Token.Compact); err != nil {
			t.Fatal(err)
		}
		// A replay changes nothing and so records nothing.
		_, err := e.svc.Execute(e.ctx, e.agent, p.ID, c.Token.Compact)
		if err == nil {
			t.Fatal("replay accepted")
		}
		wantEvents(t, e.eventTypes(t, p.ID), "proposal.created", "proposal.awaiting_confirmation",
			"proposal.decision", "proposal.confirmed", "execution.executing", "execution.succeeded")
		final, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		evs, _ := e.store.EventsAfter(e.ctx, e.tenant, e.agent.ID, "", 500)
		if last := evs[len(evs)-1]; last.Revision != final.Revision || last.Status != models.StatusSucceeded {
			t.Errorf("last event: revision %d status %s; proposal: %d %s", last.Revision, last.Status, final.Revision, final.Status)
		}
		// The demo ledger writes in the consuming transaction, where the
		// proposal moves to its outcome in one UPDATE; its events still
		// tell each step, with the revision and status it had.
		byType := map[models.EventType]models.Event{}
		for _, ev := range evs {
			if ev.ProposalID == p.ID {
				byType[ev.Type] = ev
			}
		}
		confirmed, executing, succeeded := byType["proposal.confirmed"], byType["execution.executing"], byType["execution.succeeded"]
		if executing.Status != models.StatusExecuting || executing.Revision != confirmed.Revision+1 ||
			succeeded.Revision != confirmed.Revision+2 || final.Revision != confirmed.Revision+2 {
			t.Errorf("confirmed at revision %d; executing event %s at %d, succeeded at %d; proposal at %d",
				confirmed.Revision, executing.Status, executing.Revision, succeeded.Revision, final.Revision)
		}
		if !strings.Contains(string(executing.Data), final.Execution.ID) || !strings.Contains(string(succeeded.Data), final.Execution.ID) {
			t.Errorf("execution events %s and %s do not name execution %s", executing.Data, succeeded.Data, final.Execution.ID)
		}

		d := e.propose("ord_1014", 100)
		if _, err := e.svc.Decline(e.ctx, writes.DeclineInput{Reviewer: e.alice, ProposalID: d.ID, DigestSeen: d.ArgsDigest, Reason: "no"}); err != nil {
			t.Fatal(err)
		}
		wantEvents(t, e.eventTypes(t, d.ID), "proposal.created", "proposal.awaiting_confirmation", "proposal.decision", "proposal.declined")

		q := e.propose("ord_1015", 100)
		if _, err := e.svc.Cancel(e.ctx, e.agent, q.ID); err != nil {
			t.Fatal(err)
		}
		// A second cancel succeeds and records no second event.
		if _, err = e.svc.Cancel(e.ctx, e.agent, q.ID); err != nil {
			t.Fatal(err)
		}
		wantEvents(t, e.eventTypes(t, q.ID), "proposal.created", "proposal.awaiting_confirmation", "proposal.cancelled")

		r := e.confirm(e.propose("ord_1016", 100))
		if _, err := e.svc.Revoke(e.ctx, e.admin, r.ID); err != nil {
			t.Fatal(err)
		}
		wantEvents(t, e.eventTypes(t, r.ID), "proposal.created", "proposal.awaiting_confirmation",
			"proposal.decision", "proposal.confirmed", "proposal.revoked")

		x := e.propose("ord_1007", 1000)
		y := e.confirm(e.propose("ord_1008", 1000))
		e.clock.Set(y.Token.ExpiresAt.Add(x.Tier.TTL))
		if n, err := e.svc.Sweep(e.ctx); err != nil || n != 2 {
			t.Fatalf("sweep = %d, %v; want 2", n, err)
		}
		if n, _ := e.svc.Sweep(e.ctx); n != 0 {
			t.Fatalf("second sweep expired %d", n)
		}
		wantEvents(t, e.eventTypes(t, x.ID), "proposal.created", "proposal.awaiting_confirmation", "proposal.expired")
		wantEvents(t, e.eventTypes(t, y.ID), "proposal.created", "proposal.awaiting_confirmation",
			"proposal.decision", "proposal.confirmed", "proposal.expired")
	})
}

// A quorum proposal records one decision event per approver and one
// confirmation; a rejected proposal records its rejection.
func TestQuorumAndRejectionEvents(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		p := e.propose("ord_2002", 300000)
		for _, u := range []models.User{e.alice, bob} {
			in := writes.ConfirmInput{Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
				Evidence: steppedUp(u, p.ID, p.ArgsDigest, []string{"pwd", "webauthn"}, []byte(`{"test":"assertion"}`))}
			if _, err := e.svc.Confirm(e.ctx, in); err != nil {
				t.Fatal(err)
			}
		}
		wantEvents(t, e.eventTypes(t, p.ID), "proposal.created", "proposal.awaiting_confirmation",
			"proposal.decision", "proposal.decision", "proposal.confirmed")

		_, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1001", 99999999)})
		wantCode(t, err, models.EBusinessRule)
		var me *models.Error
		if !errors.As(err, &me) {
			t.Fatal(err)
		}
		id := me.Details["proposal_id"].(string)
		wantEvents(t, e.eventTypes(t, id), "proposal.created", "proposal.rejected")
	})
}

// Deliveries are created with the event, for the endpoints that may see it
// and, while a proposal awaits a person, for each notification channel.
func TestDeliveriesFollowTheEndpointsScope(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		other, err := e.store.CreateAgent(e.ctx, e.tenant, "other-agent", "", "sha256:other")
		if err != nil {
			t.Fatal(err)
		}
		own, _ := e.store.CreateWebhookEndpoint(e.ctx, e.agent.ID, models.WebhookEndpoint{TenantID: e.tenant, AgentID: e.agent.ID, URL: "http://127.0.0.1:1/own"}, "whsec_x")
		foreign, _ := e.store.CreateWebhookEndpoint(e.ctx, other.ID, models.WebhookEndpoint{TenantID: e.tenant, AgentID: other.ID, URL: "http://127.0.0.1:1/other"}, "whsec_y")
		wide, _ := e.store.CreateWebhookEndpoint(e.ctx, models.ActorSystem, models.WebhookEndpoint{TenantID: e.tenant, URL: "http://127.0.0.1:1/all"}, "whsec_z")
		p := e.propose("ord_1001", 100)
		log, err := e.store.DeliveryLog(e.ctx, store.DeliveryFilter{TenantID: e.tenant, Limit: 200})
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, d := range log {
			if d.Event.ProposalID != p.ID || d.Status != models.DeliveryPending {
				t.Errorf("unexpected delivery %+v", d)
			}
			per[d.Target]++
		}
		if per[own.ID] != 2 || per[wide.ID] != 2 || per[foreign.ID] != 0 || len(per) != 2 {
			t.Errorf("deliveries per endpoint = %v", per)
		}
		if err := e.store.DisableWebhookEndpoint(e.ctx, other.ID, models.EndpointScope{TenantID: e.tenant, AgentID: other.ID}, own.ID, start); !models.IsCode(err, models.ENotFound) {
			t.Errorf("another agent disabled the endpoint: %v", err)
		}
		if err := e.store.DisableWebhookEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, own.ID, start); err != nil {
			t.Fatal(err)
		}
		log, _ = e.store.DeliveryLog(e.ctx, store.DeliveryFilter{TenantID: e.tenant, Target: own.ID})
		for _, d := range log {
			if d.Status != models.DeliveryFailed {
				t.Errorf("delivery to a disabled endpoint still %s", d.Status)
			}
		}
		backlog, err := e.store.DeliveryBacklog(e.ctx)
		if err != nil || backlog[models.ChannelWebhook] != 2 {
			t.Errorf("backlog = %v, %v; want 2 webhooks", backlog, err)
		}
	})
}

// Racing deciders and sweepers record each change once: the event is
// written only by the conditional UPDATE that won.
func TestRacesRecordOneEventPerChange(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1001", 100)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				_, _ = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
			})
		}
		wg.Wait()
		wantEvents(t, e.eventTypes(t, p.ID), "proposal.created", "proposal.awaiting_confirmation",
			"proposal.decision", "proposal.confirmed")

		q := e.propose("ord_1002", 100)
		e.clock.Set(q.ExpiresAt)
		for i := range 20 {
			wg.Go(func() {
				if i%2 == 0 {
					_, _ = e.svc.Sweep(e.ctx)
				} else {
					_, _ = e.svc.Get(e.ctx, e.tenant, q.ID)
				}
			})
		}
		wg.Wait()
		wantEvents(t, e.eventTypes(t, q.ID), "proposal.created", "proposal.awaiting_confirmation", "proposal.expired")
	})
}
