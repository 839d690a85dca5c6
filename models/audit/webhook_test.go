package audit_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// An export whose chain records webhook endpoints registered, redelivered
// to and disabled (by an administrator and by an agent) still verifies in
// both verifiers: the entries are links of the chain like any other.
func TestExportWithWebhookChangesVerifies(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	tn := w.tenant.ID
	const secret = "whsec_c2VjcmV0LXdlYmhvb2stZXhwb3J0LXNlY3JldC0z"
	wide, err := w.st.CreateWebhookEndpoint(w.ctx, w.admin.ID, models.WebhookEndpoint{TenantID: tn, URL: "https://all.example.com/"}, secret)
	if err != nil {
		t.Fatal(err)
	}
	own, err := w.st.CreateWebhookEndpoint(w.ctx, w.agent.ID, models.WebhookEndpoint{TenantID: tn, AgentID: w.agent.ID,
		URL: "https://hooks.example.com/own"}, secret)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"order_id": "ord_1003", "amount_minor": 100, "currency": "CNY", "reason": "lost"})
	if _, _, err := w.svc.Propose(w.ctx, w.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args}); err != nil {
		t.Fatal(err)
	}
	log, err := w.st.DeliveryLog(w.ctx, store.DeliveryFilter{TenantID: tn, Target: wide.ID})
	if err != nil || len(log) == 0 {
		t.Fatalf("deliveries to the tenant-wide endpoint: %d (%v)", len(log), err)
	}
	if err := w.st.Redeliver(w.ctx, w.admin.ID, tn, log[0].ID, w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := w.st.DisableWebhookEndpoint(w.ctx, w.agent.ID, models.EndpointScope{TenantID: tn, AgentID: w.agent.ID}, own.ID, w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := w.st.DisableWebhookEndpoint(w.ctx, w.admin.ID, models.EndpointScope{TenantID: tn}, wide.ID, w.clock.Now()); err != nil {
		t.Fatal(err)
	}

	export := w.export(t)
	for _, kind := range []string{models.AuditWebhookCreated, models.AuditDeliveryRedelivered, models.AuditWebhookDisabled} {
		if !strings.Contains(string(export), `\"kind\":\"`+kind+`\"`) {
			t.Fatalf("the export holds no %s entry", kind)
		}
	}
	if strings.Contains(string(export), secret) {
		t.Fatal("the export holds a signing secret")
	}
	for name, rc := range map[string]string{"click": w.click, "security key": w.stepup} {
		if err := verify(t, export, rc).Err(); err != nil {
			t.Errorf("countersign verify, %s receipt: %v", name, err)
		}
		if out, err := runNode(t, export, rc); err != nil || !strings.Contains(out, "VERIFIED") {
			t.Errorf("node verifier, %s receipt: %v\n%s", name, err, out)
		}
	}
	out, code := nodeRun(t, "--export", writeFile(t, t.TempDir(), "audit.jsonl", export))
	if code != 0 || !strings.Contains(out, "VERIFIED") {
		t.Errorf("node verifier, the export alone: exit %d\n%s", code, out)
	}
}
