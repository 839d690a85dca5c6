package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// These tests decide proposals through the fully built server, as a
// reviewer's browser does: sign-in, session cookie, CSRF token, forms.

func (c *console) propose(order string, amount int64) *models.Proposal {
	c.t.Helper()
	agent, err := c.app.Protocol.AuthenticateAgent(context.Background(), c.creds.AgentKey)
	if err != nil {
		c.t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "damaged"})
	p, _, err := c.app.Protocol.Propose(context.Background(), agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *console) alice() *browser {
	b := c.browser()
	b.mustLogin("demo", "alice", c.creds.ReviewerPassword)
	return b
}

func TestApproveNeedsTheCSRFToken(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	p := c.propose("ord_1001", 100)
	b := c.alice()
	b.get("/proposals/" + p.ID)
	for name, form := range map[string]url.Values{
		"missing": {"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}},
		"wrong":   {"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}, "csrf_token": {"not-the-token"}},
	} {
		got := b.post("/proposals/"+p.ID+"/approve", form)
		wantStatus(t, "approve with "+name+" CSRF token", got, http.StatusForbidden)
	}
	// A token from another session does not work either.
	other := c.alice()
	other.get("/")
	got := b.post("/proposals/"+p.ID+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}, "csrf_token": {other.csrf}})
	wantStatus(t, "approve with another session's token", got, http.StatusForbidden)
	if st := c.status(p.ID); st != models.StatusAwaitingConfirmation {
		t.Fatalf("a refused request changed the proposal to %s", st)
	}
	got = b.postForm("/proposals/"+p.ID+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, "approve with the token", got, http.StatusSeeOther)
	if st := c.status(p.ID); st != models.StatusConfirmed {
		t.Fatalf("status = %s, want confirmed", st)
	}
}

func TestAnotherTenantsReviewerSeesNothing(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	p := c.propose("ord_1002", 100)
	c.user("globex", "mallory", models.RoleAdmin, "mallory-password-1")
	m := c.browser()
	m.mustLogin("globex", "mallory", "mallory-password-1")
	wantStatus(t, "foreign proposal page", m.get("/proposals/"+p.ID), http.StatusNotFound)
	m.get("/")
	for _, action := range []string{"approve", "decline", "revoke"} {
		got := m.postForm("/proposals/"+p.ID+"/"+action, url.Values{"digest": {p.ArgsDigest}, "reason": {"no"}})
		wantStatus(t, "foreign "+action, got, http.StatusNotFound)
	}
	if strings.Contains(m.get("/").body, p.ID) || strings.Contains(m.get("/history").body, p.ID) {
		t.Error("another tenant's lists show the proposal")
	}
	if st := c.status(p.ID); st != models.StatusAwaitingConfirmation {
		t.Fatalf("status = %s", st)
	}
}

func TestApproveRefusals(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.alice()

	// A digest other than the stored one.
	p := c.propose("ord_1003", 100)
	b.get("/proposals/" + p.ID)
	other := c.propose("ord_1004", 200)
	got := b.postForm("/proposals/"+p.ID+"/approve", url.Values{"digest": {other.ArgsDigest}, "effect": {other.EffectDigest}})
	wantStatus(t, "approve with another digest", got, http.StatusForbidden)
	if testid(got.doc, "alert") == "" {
		t.Error("no alert explains the refusal")
	}

	// Double submit: one decision.
	first := b.postForm("/proposals/"+p.ID+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	second := b.postForm("/proposals/"+p.ID+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, "first approve", first, http.StatusSeeOther)
	if second.status < 400 {
		t.Errorf("second approve answered %d", second.status)
	}
	if n := len(c.reloadProposal(p.ID).Decisions); n != 1 {
		t.Errorf("decisions = %d, want 1", n)
	}

	// After the expiry: refused, and the page says why.
	q := c.propose("ord_1005", 100)
	b.get("/proposals/" + q.ID)
	c.clock.Set(q.ExpiresAt)
	got = b.postForm("/proposals/"+q.ID+"/approve", url.Values{"digest": {q.ArgsDigest}, "effect": {q.EffectDigest}})
	wantStatus(t, "approve at the expiry", got, http.StatusGone)
	if a := testid(got.doc, "alert"); !strings.Contains(a, "expired") {
		t.Errorf("alert = %q, want it to say the proposal expired", a)
	}
	if st := c.status(q.ID); st != models.StatusExpired {
		t.Errorf("status = %s, want expired", st)
	}
	c.clock.Set(consoleStart.Add(time.Hour))
}

func TestDeclineNeedsAReason(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.alice()
	p := c.propose("ord_1006", 100)
	b.get("/proposals/" + p.ID)
	got := b.postForm("/proposals/"+p.ID+"/decline", url.Values{"digest": {p.ArgsDigest}, "reason": {"   "}})
	wantStatus(t, "decline without a reason", got, http.StatusUnprocessableEntity)
	if testid(got.doc, "decline-error") == "" {
		t.Error("no form error next to the reason field")
	}
	if st := c.status(p.ID); st != models.StatusAwaitingConfirmation {
		t.Fatalf("status = %s", st)
	}
	got = b.postForm("/proposals/"+p.ID+"/decline", url.Values{"digest": {p.ArgsDigest}, "reason": {"refunded by phone already"}})
	wantStatus(t, "decline", got, http.StatusSeeOther)
	if st := c.status(p.ID); st != models.StatusDeclined {
		t.Fatalf("status = %s, want declined", st)
	}
}

func (c *console) reloadProposal(id string) *models.Proposal {
	c.t.Helper()
	t, err := c.app.Store.TenantByName(context.Background(), "demo")
	if err != nil {
		c.t.Fatal(err)
	}
	p, err := c.app.Store.GetProposal(context.Background(), t.ID, id)
	if err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *console) status(id string) models.Status { return c.reloadProposal(id).Status }
