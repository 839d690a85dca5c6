package app_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/apitest"
	"github.com/countersign/countersign/models"
)

// mandateCall sends a JSON request with the demo agent's key, checks the
// answer against the OpenAPI document and decodes it into out.
func mandateCall(t *testing.T, c *console, method, path string, body any, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, c.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+c.creds.AgentKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := apitest.Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if out != nil {
		if err := json.NewDecoder(res.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return res.StatusCode
}

type apiProposal struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	Status      string `json:"status"`
	ArgsDigest  string `json:"args_digest"`
	MandateID   string `json:"mandate_id"`
	MandateNote string `json:"mandate_note"`
	Token       string `json:"confirmation_token"`
	CreatedAt   string `json:"created_at"`
	ExpiresAt   string `json:"expires_at"`
	Required    struct {
		TTLSeconds int64 `json:"ttl_seconds"`
	} `json:"required_confirmation"`
}

// An agent asks for a mandate over the API, a reviewer grants it on the
// proposal page like any write, the agent's fitting writes are then
// confirmed without a person while one over the cap waits with the reason,
// the mandates page shows live usage, and only an administrator revokes
// it (with the CSRF token).
func TestMandateThroughAPIAndConsole(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	terms := map[string]any{"tool": "refund_order", "tiers": []string{"low"}, "resource_pattern": "ord_1[0-9]{3}",
		"money":    map[string]any{"field": "amount_minor", "currency": "CNY", "per_call_cap": 1000, "budget": 5000},
		"max_uses": 10, "expires_at": c.clock.Now().Add(2 * time.Hour).Format(time.RFC3339), "reason": "sale refunds"}
	var mp apiProposal
	if st := mandateCall(t, c, "POST", "/api/v1/mandates", map[string]any{"terms": terms}, &mp); st != http.StatusCreated {
		t.Fatalf("request mandate: %d", st)
	}
	if mp.Kind != "mandate" || mp.Status != "awaiting_confirmation" {
		t.Fatalf("mandate proposal %+v", mp)
	}
	// The request waits until its terms end (within the day), and says so.
	created, _ := time.Parse(time.RFC3339, mp.CreatedAt)
	expires, _ := time.Parse(time.RFC3339, mp.ExpiresAt)
	if d := expires.Sub(created); d != 2*time.Hour || mp.Required.TTLSeconds != int64(d/time.Second) {
		t.Errorf("a mandate request open for %s says ttl_seconds %d", d, mp.Required.TTLSeconds)
	}
	bad := map[string]any{"terms": map[string]any{"tool": "refund_order", "surprise": 1}}
	if st := mandateCall(t, c, "POST", "/api/v1/mandates", bad, nil); st != http.StatusBadRequest {
		t.Fatalf("unknown term: %d, want 400", st)
	}

	alice := c.alice()
	pending := alice.get("/")
	wantStatus(t, "pending list", pending, http.StatusOK)
	if !strings.Contains(pending.body, "Standing mandate: Refund an order") {
		t.Fatal("the pending list does not say the proposal asks for a mandate")
	}
	pg := alice.get("/proposals/" + mp.ID)
	wantStatus(t, "mandate proposal page", pg, http.StatusOK)
	if !strings.Contains(pg.body, "Standing mandate") || !strings.Contains(pg.body, "¥10.00") {
		t.Fatal("the mandate's terms are not shown on its proposal page")
	}
	wantStatus(t, "grant", alice.postForm("/proposals/"+mp.ID+"/approve", url.Values{"digest": {mp.ArgsDigest}}), http.StatusSeeOther)
	mandateCall(t, c, "GET", "/api/v1/proposals/"+mp.ID, nil, &mp)
	if mp.Status != "confirmed" || mp.MandateID == "" || mp.Token != "" {
		t.Fatalf("granted: %+v", mp)
	}
	var md struct {
		Live  bool  `json:"live"`
		Spent int64 `json:"spent"`
	}
	if st := mandateCall(t, c, "GET", "/api/v1/mandates/"+mp.MandateID, nil, &md); st != http.StatusOK || !md.Live {
		t.Fatalf("mandate: %d %+v", st, md)
	}
	if st := mandateCall(t, c, "GET", "/api/v1/mandates/mdt_unknown", nil, nil); st != http.StatusNotFound {
		t.Fatalf("unknown mandate: %d", st)
	}

	refund := func(order string, amount int64) apiProposal {
		var p apiProposal
		body := map[string]any{"tool": "refund_order", "arguments": map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "damaged"}}
		if st := mandateCall(t, c, "POST", "/api/v1/proposals", body, &p); st != http.StatusCreated {
			t.Fatalf("propose: %d", st)
		}
		return p
	}
	fit := refund("ord_1001", 900)
	if fit.Status != "confirmed" || fit.MandateID != mp.MandateID || fit.Token == "" {
		t.Fatalf("fitting write: %+v", fit)
	}
	over := refund("ord_1002", 1500)
	if over.Status != "awaiting_confirmation" || over.MandateNote != models.MandateOverCap {
		t.Fatalf("write over the cap: %+v", over)
	}
	pg = alice.get("/proposals/" + over.ID)
	if got := testid(pg.doc, "mandate"); !strings.Contains(got, "over per-call cap") {
		t.Fatalf("proposal page mandate note %q", got)
	}

	list := alice.get("/mandates")
	wantStatus(t, "mandates page", list, http.StatusOK)
	if !strings.Contains(pending.body, `href="/mandates"`) {
		t.Error("the navigation does not link the mandates page")
	}
	if got := testid(list.doc, "mandate-spent"); got != "¥9.00 / ¥50.00" {
		t.Fatalf("spent shown %q", got)
	}
	if got := testid(list.doc, "mandate-uses"); got != "1 / 10" {
		t.Fatalf("uses shown %q", got)
	}
	if got := testid(list.doc, "mandate-left"); !strings.Contains(got, "2h 0m left") {
		t.Fatalf("time left shown %q", got)
	}
	if testid(list.doc, "mandate-revoke") != "" {
		t.Fatal("a reviewer is offered the revoke button")
	}
	wantStatus(t, "revoke as reviewer", alice.postForm("/mandates/"+mp.MandateID+"/revoke", nil), http.StatusForbidden)

	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	admin.get("/mandates")
	wantStatus(t, "revoke without CSRF", admin.post("/mandates/"+mp.MandateID+"/revoke", nil), http.StatusForbidden)
	wantStatus(t, "revoke", admin.postForm("/mandates/"+mp.MandateID+"/revoke", nil), http.StatusSeeOther)
	if got := testid(admin.get("/mandates").doc, "mandate-left"); got != "revoked" {
		t.Fatalf("after revoke: %q", got)
	}
	if after := refund("ord_1003", 100); after.Status != "awaiting_confirmation" {
		t.Fatalf("write after revoke: %+v", after)
	}

	c.user("globex", "mallory", models.RoleAdmin, "mallory-password-1")
	m := c.browser()
	m.mustLogin("globex", "mallory", "mallory-password-1")
	m.get("/mandates")
	wantStatus(t, "foreign revoke", m.postForm("/mandates/"+mp.MandateID+"/revoke", nil), http.StatusNotFound)
}

// The README's mandate request is accepted as written.
func TestReadmeMandateRequest(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- snippet: mandate-request -->\n```json\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README has no mandate-request snippet")
	}
	c := openConsole(t)
	var p apiProposal
	if st := mandateCall(t, c, "POST", "/api/v1/mandates", json.RawMessage(m[1]), &p); st != http.StatusCreated {
		t.Fatalf("README request: %d", st)
	}
	if p.Kind != "mandate" || p.Status != "awaiting_confirmation" {
		t.Fatalf("README request gave %+v", p)
	}
}
