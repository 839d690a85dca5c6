package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/token"
)

// apiGet calls the API with a Bearer key and decodes the JSON answer.
func (c *console) apiGet(path, key string) (int, map[string]any) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(body, &out)
	return res.StatusCode, out
}

// TestReceiptsAndAuditThroughTheServer: a click approval in the console and
// an execution through the API leave a signed receipt (in the execute answer,
// at the receipt endpoint, downloadable in the history) and audit entries
// that record the session's sign-in method and the digest shown; the audit
// API needs an audit reader key of the tenant.
func TestReceiptsAndAuditThroughTheServer(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	ctx := context.Background()
	p := c.propose("ord_1001", 100)
	b := c.alice()
	b.get("/proposals/" + p.ID)
	wantStatus(t, "approve", b.postForm("/proposals/"+p.ID+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}), http.StatusSeeOther)

	agent, err := c.app.Protocol.AuthenticateAgent(ctx, c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.app.Protocol.Get(ctx, agent.TenantID, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, c.srv.URL+"/api/v1/executions",
		strings.NewReader(`{"proposal_id":"`+p.ID+`","token":"`+got.Token.Compact+`"}`))
	req.Header.Set("Authorization", "Bearer "+c.creds.AgentKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var exec map[string]any
	_ = json.NewDecoder(res.Body).Decode(&exec)
	res.Body.Close()
	signed, _ := exec["signed_receipt"].(string)
	execID, _ := exec["execution_id"].(string)
	if res.StatusCode != http.StatusOK || signed == "" {
		t.Fatalf("execute: %d %v", res.StatusCode, exec)
	}

	// The receipt endpoint serves the same JWS, which verifies against the
	// public JWKS, and says how alice approved.
	status, rc := c.apiGet("/api/v1/executions/"+execID+"/receipt", c.creds.AgentKey)
	if status != http.StatusOK || rc["receipt"] != signed {
		t.Fatalf("receipt: %d %v", status, rc)
	}
	jres, err := http.Get(c.srv.URL + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := io.ReadAll(jres.Body)
	jres.Body.Close()
	keys, err := token.ParseJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	payload, _, err := keys.Verify(token.TypeReceipt, signed)
	if err != nil {
		t.Fatal(err)
	}
	var claims models.SignedReceipt
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	if len(claims.Approvers) != 1 || claims.Approvers[0].Method != models.MethodPassword ||
		claims.Approvers[0].DigestSeen != p.ArgsDigest || claims.ExecutedDigest != p.ArgsDigest {
		t.Fatalf("receipt claims: %+v", claims)
	}

	// The decision entry is the click approval's evidence.
	entries, err := c.app.Store.ProposalAudit(ctx, agent.TenantID, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	var decision map[string]any
	for _, e := range entries {
		if e.Kind == models.AuditDecisionApproved {
			body, _ := e.Decode()
			_ = json.Unmarshal(body.Data, &decision)
		}
	}
	if decision["method"] != models.MethodPassword || decision["digest_seen"] != p.ArgsDigest {
		t.Fatalf("decision entry: %v", decision)
	}

	// Another tenant's agent sees no receipt; an agent key reads no audit
	// log; an audit reader key of the tenant does.
	other, err := c.app.Store.CreateTenant(ctx, "globex")
	if err != nil {
		t.Fatal(err)
	}
	otherKey, otherHash, _ := secret.NewAPIKey()
	if _, err := c.app.Store.CreateAgent(ctx, other.ID, "bot", "", otherHash); err != nil {
		t.Fatal(err)
	}
	if status, _ := c.apiGet("/api/v1/executions/"+execID+"/receipt", otherKey); status != http.StatusNotFound {
		t.Fatalf("foreign receipt: %d", status)
	}
	// Another agent of the tenant reads the receipt, which names the
	// write's arguments, only with tenant-wide read: as it reads the
	// proposal.
	peerKey, peerHash, _ := secret.NewAPIKey()
	peer, err := c.app.Store.CreateAgent(ctx, agent.TenantID, "peer", "", peerHash)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/proposals/" + p.ID, "/api/v1/executions/" + execID + "/receipt"} {
		if status, body := c.apiGet(path, peerKey); status != http.StatusNotFound || body["receipt"] != nil || body["arguments"] != nil {
			t.Fatalf("%s with another agent's key: %d %v", path, status, body)
		}
	}
	if _, err := c.app.Store.SetAgentReadAll(ctx, agent.TenantID, peer.ID, true); err != nil {
		t.Fatal(err)
	}
	if status, rc := c.apiGet("/api/v1/executions/"+execID+"/receipt", peerKey); status != http.StatusOK || rc["receipt"] != signed {
		t.Fatalf("receipt with tenant-wide read: %d %v", status, rc)
	}
	if status, _ := c.apiGet("/api/v1/audit", c.creds.AgentKey); status != http.StatusForbidden {
		t.Fatalf("audit with an agent key: %d", status)
	}
	if status, _ := c.apiGet("/api/v1/audit", "csa_not-a-key"); status != http.StatusUnauthorized {
		t.Fatalf("audit with an unknown key: %d", status)
	}
	raw, _ := secret.RandomToken(32)
	readerKey := "csa_" + raw
	if _, err := c.app.Store.CreateAuditReader(ctx, agent.TenantID, "auditor", secret.HashAPIKey(readerKey)); err != nil {
		t.Fatal(err)
	}
	status, log := c.apiGet("/api/v1/audit?after=0&limit=5", readerKey)
	list, _ := log["entries"].([]any)
	if status != http.StatusOK || len(list) != 5 || log["next_after"] != float64(5) {
		t.Fatalf("audit page: %d %v", status, log)
	}
	// An audit reader key on an agent route is told what it is.
	status, body := c.apiGet("/api/v1/proposals/"+p.ID, readerKey)
	e, _ := body["error"].(map[string]any)
	if msg, _ := e["message"].(string); status != http.StatusUnauthorized || e["code"] != "unauthenticated" || !strings.Contains(msg, "audit reader key") {
		t.Fatalf("audit key on the agent API: %d %v", status, body)
	}
	_, log = c.apiGet("/api/v1/audit?after=5", readerKey)
	rest, _ := log["entries"].([]any)
	first, _ := rest[0].(map[string]any)
	if len(rest) == 0 || first["seq"] != float64(6) {
		t.Fatalf("second page: %v", log)
	}

	// The console: the history links the signed receipt for download and
	// the proposal's audit trail; the tenant's log is for admins.
	h := b.get("/history")
	if !strings.Contains(h.body, "/executions/"+execID+"/receipt.jws") {
		t.Fatal("the history does not offer the signed receipt")
	}
	dl := b.get("/executions/" + execID + "/receipt.jws")
	if dl.status != http.StatusOK || strings.TrimSpace(dl.body) != signed ||
		!strings.Contains(dl.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("download: %d %q", dl.status, dl.header.Get("Content-Disposition"))
	}
	trail := b.get("/proposals/" + p.ID + "/audit")
	if trail.status != http.StatusOK || !strings.Contains(trail.body, models.AuditDecisionApproved) ||
		!strings.Contains(trail.body, models.AuditExecutionOutcome) {
		t.Fatalf("proposal audit page: %d", trail.status)
	}
	wantStatus(t, "tenant log for a reviewer", b.get("/audit"), http.StatusForbidden)
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	page := admin.get("/audit")
	if page.status != http.StatusOK || !strings.Contains(page.body, "match their hashes and link in order") {
		t.Fatalf("tenant audit page: %d", page.status)
	}
}
