package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/countersign/countersign/models"
)

// TestWebhookChangesShowInTheAuditLog: an administrator's registration,
// redelivery and disabling of a tenant-wide endpoint in the console, and an
// agent's registration and deletion of its own through the API, each leave
// one entry in the organization's chain naming who did it, the endpoint
// and its scope, and never the signing secret; the audit log page shows
// each with its kind, actor and details.
func TestWebhookChangesShowInTheAuditLog(t *testing.T) {
	t.Parallel()
	c := openConsole(t, allowLoopbackHooks)
	ctx := context.Background()
	r := newHookReceiver(t)
	admin := mustAdmin(t, c)
	agent, err := c.app.Protocol.AuthenticateAgent(ctx, c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	tenantID := admin.TenantID
	entries, err := c.app.Store.AuditEntries(ctx, tenantID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	start := int64(0)
	if len(entries) > 0 {
		start = entries[len(entries)-1].Seq
	}

	b := c.browser()
	b.mustLogin("demo", c.creds.Admin, c.creds.AdminPassword)
	b.get("/admin/webhooks")
	p := b.postForm("/admin/webhooks", url.Values{"url": {r.URL + "/all"}})
	wantStatus(t, "create", p, http.StatusOK)
	secrets := []string{}
	if n := find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "webhook-secret" }); n != nil {
		secrets = append(secrets, attr(n, "value"))
	}
	// Refused: the same URL again.
	if p := b.postForm("/admin/webhooks", url.Values{"url": {r.URL + "/all"}}); p.status != http.StatusConflict {
		t.Fatalf("the same URL again: %d", p.status)
	}
	p = b.get("/admin/webhooks")
	row := find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "webhook-row" })
	if row == nil {
		t.Fatal("no endpoint row")
	}
	wide := attr(row, "data-endpoint-id")

	code, body := agentCall(t, c, c.creds.AgentKey, "POST", "/api/v1/webhooks", `{"url":"`+r.URL+`/own"}`)
	if code != http.StatusCreated {
		t.Fatalf("agent registers: %d %s", code, body)
	}
	var own struct{ ID, Secret string }
	_ = json.Unmarshal(body, &own)
	secrets = append(secrets, own.Secret)

	c.propose("ord_1001", 100)
	if _, err := c.app.Events.DispatchOnce(ctx); err != nil {
		t.Fatal(err)
	}
	p = b.get("/admin/webhooks")
	var delivery string
	for _, n := range findAll(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "delivery-row" }) {
		if strings.Contains(textOf(n), r.URL+"/all") {
			delivery = attr(n, "data-delivery-id")
		}
	}
	if delivery == "" {
		t.Fatal("no delivery to the tenant-wide endpoint")
	}
	wantStatus(t, "redeliver", b.postForm("/admin/deliveries/"+delivery+"/redeliver", nil), http.StatusSeeOther)
	wantStatus(t, "disable", b.postForm("/admin/webhooks/"+wide+"/disable", nil), http.StatusSeeOther)
	// Refused: disabled already.
	if p := b.postForm("/admin/webhooks/"+wide+"/disable", nil); p.status != http.StatusNotFound {
		t.Fatalf("disabling twice: %d", p.status)
	}
	if code, body := agentCall(t, c, c.creds.AgentKey, "DELETE", "/api/v1/webhooks/"+own.ID, ""); code != http.StatusNoContent {
		t.Fatalf("agent deletes: %d %s", code, body)
	}

	type want struct{ kind, actor, endpoint, scope string }
	wants := []want{
		{models.AuditWebhookCreated, admin.ID, wide, "tenant"},
		{models.AuditWebhookCreated, agent.ID, own.ID, "agent"},
		{models.AuditDeliveryRedelivered, admin.ID, wide, "tenant"},
		{models.AuditWebhookDisabled, admin.ID, wide, "tenant"},
		{models.AuditWebhookDisabled, agent.ID, own.ID, "agent"},
	}
	entries, err = c.app.Store.AuditEntries(ctx, tenantID, start, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []want
	seqs := map[int]int64{}
	for _, e := range entries {
		for _, s := range secrets {
			if s == "" || strings.Contains(e.Body, s) {
				t.Fatalf("a signing secret (%q) entered the log: %s", s, e.Body)
			}
		}
		if !strings.HasPrefix(e.Kind, "admin.webhook_") && e.Kind != models.AuditDeliveryRedelivered {
			continue
		}
		b, _ := e.Decode()
		var data map[string]any
		_ = json.Unmarshal(b.Data, &data)
		ep, _ := data["endpoint_id"].(string)
		scope, _ := data["scope"].(string)
		seqs[len(got)] = e.Seq
		got = append(got, want{e.Kind, b.Actor, ep, scope})
	}
	if len(got) != len(wants) {
		t.Fatalf("webhook entries %+v, want %+v", got, wants)
	}
	for i := range wants {
		if got[i] != wants[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], wants[i])
		}
	}

	// The audit log page shows each: its kind, who, and the endpoint in its
	// details.
	p = b.get("/audit?after=" + strconv.FormatInt(seqs[0]-1, 10))
	wantStatus(t, "audit log", p, http.StatusOK)
	for i, w := range wants {
		seq := strconv.FormatInt(seqs[i], 10)
		n := find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "audit-entry" && attr(n, "data-seq") == seq })
		if n == nil {
			t.Fatalf("entry %s is not on the audit page", seq)
		}
		text := textOf(n)
		// The URL's origin and digest, not the URL: a path or a query may
		// carry the receiver's credential.
		wantURL := r.URL + "/all"
		if w.scope == "agent" {
			wantURL = r.URL + "/own"
		}
		if strings.Contains(text, wantURL) {
			t.Errorf("audit entry %s shows the whole URL %s", seq, wantURL)
		}
		for _, s := range []string{w.kind, w.actor, w.endpoint, r.URL, models.CanonicalDigest([]byte(wantURL)), `"scope": "` + w.scope + `"`} {
			if !strings.Contains(text, s) {
				t.Errorf("audit entry %s does not show %q:\n%s", seq, s, text)
			}
		}
	}
}
