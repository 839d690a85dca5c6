package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// auditedSince returns the tenant's entries after seq, with their bodies.
func auditedSince(t *testing.T, st *store.Store, tenantID string, seq int64) []models.AuditBody {
	t.Helper()
	entries, err := st.AuditEntries(context.Background(), tenantID, seq, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]models.AuditBody, len(entries))
	for i, e := range entries {
		if out[i], err = e.Decode(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// lastSeq is the seq of the tenant's newest entry.
func lastSeq(t *testing.T, st *store.Store, tenantID string) int64 {
	t.Helper()
	entries, err := st.AuditEntries(context.Background(), tenantID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 {
		return 0
	}
	return entries[len(entries)-1].Seq
}

// oneEntry checks that exactly one entry followed seq, of kind by actor,
// whose data holds want, and returns its data.
func oneEntry(t *testing.T, st *store.Store, tenantID string, seq int64, kind, actor string, want map[string]any) map[string]any {
	t.Helper()
	got := auditedSince(t, st, tenantID, seq)
	if len(got) != 1 {
		t.Fatalf("%d entries after %d, want one %s: %+v", len(got), seq, kind, got)
	}
	b := got[0]
	if b.Kind != kind || b.Actor != actor || b.ProposalID != "" {
		t.Fatalf("entry %s by %s (proposal %q), want %s by %s", b.Kind, b.Actor, b.ProposalID, kind, actor)
	}
	var data map[string]any
	if err := json.Unmarshal(b.Data, &data); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if fmt.Sprint(data[k]) != fmt.Sprint(v) {
			t.Errorf("%s: data %s = %v, want %v (%s)", kind, k, data[k], v, b.Data)
		}
	}
	if _, ok := data["url"]; ok {
		t.Errorf("%s records the endpoint's whole URL: %s", kind, b.Data)
	}
	return data
}

// noEntry checks that nothing was appended after seq.
func noEntry(t *testing.T, st *store.Store, tenantID string, seq int64, what string) {
	t.Helper()
	if got := auditedSince(t, st, tenantID, seq); len(got) != 0 {
		t.Fatalf("%s appended %d entries: %+v", what, len(got), got)
	}
}

// TestWebhookChangesAreAudited: registering, disabling and redelivering
// append one entry each, in the same transaction, naming who did it (the
// agent or the administrator), the endpoint's id, URL and scope, and never
// its secret; a refused change (a duplicate URL, a full scope, an endpoint
// outside the scope or disabled already, a delivery held by an attempt or
// of another tenant) appends none.
func TestWebhookChangesAreAudited(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		tn := d.Tenant.ID
		now := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
		const secret = "whsec_c2VjcmV0LXdlYmhvb2stYXVkaXQtc2VjcmV0LTMy"
		agentScope := models.EndpointScope{TenantID: tn, AgentID: d.Agent.ID}
		tenantScope := models.EndpointScope{TenantID: tn}

		// An agent registers one for its own proposals.
		seq := lastSeq(t, st, tn)
		own, err := st.CreateWebhookEndpoint(ctx, d.Agent.ID, models.WebhookEndpoint{TenantID: tn, AgentID: d.Agent.ID,
			URL: "https://hooks.example.com/own"}, secret)
		if err != nil {
			t.Fatal(err)
		}
		oneEntry(t, st, tn, seq, models.AuditWebhookCreated, d.Agent.ID, map[string]any{"endpoint_id": own.ID,
			"url_origin": "https://hooks.example.com", "url_digest": models.CanonicalDigest([]byte("https://hooks.example.com/own")),
			"scope": "agent", "agent_id": d.Agent.ID})

		// The same URL again is refused, and records nothing.
		seq = lastSeq(t, st, tn)
		if _, err := st.CreateWebhookEndpoint(ctx, d.Agent.ID, models.WebhookEndpoint{TenantID: tn, AgentID: d.Agent.ID,
			URL: "https://hooks.example.com/own"}, secret); !models.IsCode(err, models.EAlreadyExists) {
			t.Fatalf("duplicate: %v", err)
		}
		noEntry(t, st, tn, seq, "a refused duplicate")

		// Up to the bound, each records one entry; beyond it, none.
		for i := 1; i < models.MaxAgentWebhookEndpoints; i++ {
			seq = lastSeq(t, st, tn)
			if _, err := st.CreateWebhookEndpoint(ctx, d.Agent.ID, models.WebhookEndpoint{TenantID: tn, AgentID: d.Agent.ID,
				URL: fmt.Sprintf("https://hooks.example.com/%d", i)}, secret); err != nil {
				t.Fatal(err)
			}
			oneEntry(t, st, tn, seq, models.AuditWebhookCreated, d.Agent.ID, nil)
		}
		seq = lastSeq(t, st, tn)
		if _, err := st.CreateWebhookEndpoint(ctx, d.Agent.ID, models.WebhookEndpoint{TenantID: tn, AgentID: d.Agent.ID,
			URL: "https://hooks.example.com/one-too-many"}, secret); !models.IsCode(err, models.EInvalidRequest) {
			t.Fatalf("past the bound: %v", err)
		}
		noEntry(t, st, tn, seq, "a registration past the bound")

		// An administrator registers a tenant-wide one.
		seq = lastSeq(t, st, tn)
		wide, err := st.CreateWebhookEndpoint(ctx, d.Admin.ID, models.WebhookEndpoint{TenantID: tn, URL: "https://all.example.com/"}, secret)
		if err != nil {
			t.Fatal(err)
		}
		oneEntry(t, st, tn, seq, models.AuditWebhookCreated, d.Admin.ID, map[string]any{"endpoint_id": wide.ID,
			"url_origin": "https://all.example.com", "url_digest": models.CanonicalDigest([]byte("https://all.example.com/")),
			"scope": "tenant", "agent_id": ""})

		// A proposal owes a delivery to each endpoint; redelivering one
		// records the delivery and its endpoint.
		p := newProposal(d, now)
		if _, ok, err := st.CreateProposal(ctx, p); err != nil || !ok {
			t.Fatal(ok, err)
		}
		var (
			toWide, toOwn models.Delivery
			owed          = map[string]int{}
		)
		log, err := st.DeliveryLog(ctx, store.DeliveryFilter{TenantID: tn, Channel: models.ChannelWebhook, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, dl := range log {
			owed[dl.Target]++
			switch dl.Target {
			case wide.ID:
				toWide = dl
			case own.ID:
				toOwn = dl
			}
		}
		if toWide.ID == "" || toOwn.ID == "" {
			t.Fatalf("deliveries %+v, want one to %s and one to %s", log, wide.ID, own.ID)
		}
		seq = lastSeq(t, st, tn)
		if err := st.Redeliver(ctx, d.Admin.ID, tn, toWide.ID, now); err != nil {
			t.Fatal(err)
		}
		oneEntry(t, st, tn, seq, models.AuditDeliveryRedelivered, d.Admin.ID, map[string]any{"delivery_id": toWide.ID,
			"event_id": toWide.Event.ID, "proposal_id": p.ID, "channel": models.ChannelWebhook, "endpoint_id": wide.ID,
			"url_origin": "https://all.example.com", "scope": "tenant"})
		seq = lastSeq(t, st, tn)
		if err := st.Redeliver(ctx, d.Admin.ID, "ten_other", toWide.ID, now); !models.IsCode(err, models.ENotFound) {
			t.Fatalf("another tenant's redelivery: %v", err)
		}
		if claimed, err := st.ClaimDelivery(ctx, toWide.ID, now, time.Minute); err != nil || claimed == nil {
			t.Fatal(claimed, err)
		}
		if err := st.Redeliver(ctx, d.Admin.ID, tn, toWide.ID, now); !models.IsCode(err, models.EInvalidState) {
			t.Fatalf("redelivering a delivery being attempted: %v", err)
		}
		noEntry(t, st, tn, seq, "a refused redelivery")

		// The agent deletes its own endpoint: its pending deliveries are
		// cancelled and counted. Outside the scope, or a second time,
		// nothing is recorded.
		seq = lastSeq(t, st, tn)
		if err := st.DisableWebhookEndpoint(ctx, d.Agent.ID, models.EndpointScope{TenantID: tn, AgentID: "agt_other"}, own.ID, now); !models.IsCode(err, models.ENotFound) {
			t.Fatalf("another agent's endpoint: %v", err)
		}
		noEntry(t, st, tn, seq, "a refused deletion")
		if err := st.DisableWebhookEndpoint(ctx, d.Agent.ID, agentScope, own.ID, now); err != nil {
			t.Fatal(err)
		}
		oneEntry(t, st, tn, seq, models.AuditWebhookDisabled, d.Agent.ID, map[string]any{"endpoint_id": own.ID,
			"url_origin": "https://hooks.example.com", "scope": "agent", "agent_id": d.Agent.ID, "cancelled_deliveries": owed[own.ID]})
		seq = lastSeq(t, st, tn)
		if err := st.DisableWebhookEndpoint(ctx, d.Agent.ID, agentScope, own.ID, now); !models.IsCode(err, models.ENotFound) {
			t.Fatalf("a second deletion: %v", err)
		}
		noEntry(t, st, tn, seq, "a second deletion")

		// The administrator disables the tenant-wide one, cancelling its
		// deliveries, the one an attempt holds too (whose outcome then
		// changes nothing).
		if err := st.DisableWebhookEndpoint(ctx, d.Admin.ID, tenantScope, wide.ID, now); err != nil {
			t.Fatal(err)
		}
		oneEntry(t, st, tn, seq, models.AuditWebhookDisabled, d.Admin.ID, map[string]any{"endpoint_id": wide.ID,
			"url_origin": "https://all.example.com", "scope": "tenant", "cancelled_deliveries": owed[wide.ID]})

		// A URL carrying a credential in its path and query leaves only
		// its origin and digest in the chain.
		seq = lastSeq(t, st, tn)
		secretURL := "https://chat.example.com/services/T0/B0/hooksekrit?token=tok-sekrit"
		if _, err := st.CreateWebhookEndpoint(ctx, d.Agent.ID, models.WebhookEndpoint{TenantID: tn, AgentID: d.Agent.ID,
			URL: secretURL}, secret); err != nil {
			t.Fatal(err)
		}
		data := oneEntry(t, st, tn, seq, models.AuditWebhookCreated, d.Agent.ID, map[string]any{
			"url_origin": "https://chat.example.com", "url_digest": models.CanonicalDigest([]byte(secretURL))})
		if b, _ := json.Marshal(data); strings.Contains(string(b), "sekrit") {
			t.Errorf("the chain holds the URL's credential: %s", b)
		}

		entries, err := st.AuditEntries(ctx, tn, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		checkChain(t, tn, entries, len(entries))
		for _, e := range entries {
			if strings.Contains(e.Body, secret) || strings.Contains(e.Body, "whsec_") {
				t.Fatalf("a signing secret entered the log: %s", e.Body)
			}
		}
	})
}
