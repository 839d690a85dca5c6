package writes_test

import (
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// TestAgentsReadOnlyTheirOwn: an agent reads, lists and cancels only its own
// proposals; tenant-wide read lets it read and list the tenant's (never
// another tenant's), and still not cancel or redeem them.
func TestAgentsReadOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1013", 100)
		sibling, err := e.store.CreateAgent(e.ctx, e.tenant, "sibling", "", "sha256:sibling")
		if err != nil {
			t.Fatal(err)
		}
		own, _, err := e.svc.Propose(e.ctx, sibling, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1014", 100)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.AgentGet(e.ctx, sibling, p.ID)
		wantCode(t, err, models.ENotFound)
		if _, err := e.svc.AgentGet(e.ctx, sibling, own.ID); err != nil {
			t.Fatalf("own proposal: %v", err)
		}
		for _, q := range []writes.ListQuery{{}, {AgentID: e.agent.ID}} {
			page, err := e.svc.AgentList(e.ctx, sibling, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range page.Items {
				if it.AgentID != sibling.ID {
					t.Fatalf("list %+v shows another agent's proposal %s", q, it.ID)
				}
			}
		}
		_, err = e.svc.Cancel(e.ctx, sibling, p.ID)
		wantCode(t, err, models.ENotFound)

		reader, err := e.store.SetAgentReadAll(e.ctx, e.tenant, sibling.ID, true)
		if err != nil || !reader.ReadAll {
			t.Fatalf("grant: %+v %v", reader, err)
		}
		if got, err := e.svc.AgentGet(e.ctx, reader, p.ID); err != nil || got.ID != p.ID {
			t.Fatalf("tenant-wide read: %v", err)
		}
		page, err := e.svc.AgentList(e.ctx, reader, writes.ListQuery{})
		if err != nil || len(page.Items) != 2 {
			t.Fatalf("tenant-wide list: %d items, %v", len(page.Items), err)
		}
		_, err = e.svc.Cancel(e.ctx, reader, p.ID)
		wantCode(t, err, models.ENotFound)

		// Another tenant's reader sees nothing of this tenant.
		other, err := e.store.CreateTenant(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		foreign, err := e.store.CreateAgent(e.ctx, other.ID, "acme-bot", "", "sha256:acme")
		if err != nil {
			t.Fatal(err)
		}
		if foreign, err = e.store.SetAgentReadAll(e.ctx, other.ID, foreign.ID, true); err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.AgentGet(e.ctx, foreign, p.ID)
		wantCode(t, err, models.ENotFound)
		if page, err := e.svc.AgentList(e.ctx, foreign, writes.ListQuery{}); err != nil || len(page.Items) != 0 {
			t.Fatalf("another tenant's reader lists this tenant's proposals (%d, %v)", len(page.Items), err)
		}
		_, err = e.store.SetAgentReadAll(e.ctx, other.ID, sibling.ID, true)
		wantCode(t, err, models.ENotFound)

		// The grant is stored: the agent as authenticated carries it.
		byKey, err := e.store.AgentByKeyHash(e.ctx, "sha256:sibling")
		if err != nil || !byKey.ReadAll {
			t.Fatalf("authenticated agent: %+v %v", byKey, err)
		}
	})
}
