package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
)

// A reviewer edits a proposal through the fully built server: the form
// needs the session's CSRF token, the edit lands as a new version that the
// editor cannot approve and another reviewer can, and the agent redeems it.
func TestEditThroughTheConsole(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	c.user("demo", "bob", models.RoleReviewer, "bob-password-1")
	p := c.propose("ord_1001", 5000)
	bob := c.browser()
	bob.mustLogin("demo", "bob", "bob-password-1")
	args, _ := json.Marshal(map[string]any{"order_id": "ord_1001", "amount_minor": 4000, "currency": "CNY", "reason": "damaged"})
	form := url.Values{"digest": {p.ArgsDigest}, "arguments": {string(args)}, "reason": {"only the broken part"}}

	wantStatus(t, "edit without CSRF", bob.post("/proposals/"+p.ID+"/edit", form), http.StatusForbidden)
	r := bob.postForm("/proposals/"+p.ID+"/edit", form)
	wantStatus(t, "edit", r, http.StatusSeeOther)
	loc := r.header.Get("Location")
	revID := strings.TrimPrefix(loc, "/proposals/")
	rev, err := c.app.Protocol.Get(context.Background(), p.TenantID, revID)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "editor approves", bob.postForm(loc+"/approve", url.Values{"digest": {rev.ArgsDigest}, "effect": {rev.EffectDigest}}), http.StatusForbidden)
	alice := c.alice()
	wantStatus(t, "alice approves", alice.postForm(loc+"/approve", url.Values{"digest": {rev.ArgsDigest}, "effect": {rev.EffectDigest}}), http.StatusSeeOther)
	rev, _ = c.app.Protocol.Get(context.Background(), p.TenantID, revID)
	agent, err := c.app.Protocol.AuthenticateAgent(context.Background(), c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.app.Protocol.Execute(context.Background(), agent, p.ID, rev.Token.Compact); !models.IsCode(err, models.EArgsMismatch) {
		t.Fatalf("the original redeemed with the edit's token: %v", err)
	}
	ex, err := c.app.Protocol.Execute(context.Background(), agent, revID, rev.Token.Compact)
	if err != nil || ex.Status != models.StatusSucceeded {
		t.Fatalf("execute the edit: %v %+v", err, ex)
	}
}

// Administrators manage reviewer groups on /admin/groups; reviewers may
// not.
func TestGroupsAdminPage(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	wantStatus(t, "page", admin.get("/admin/groups"), http.StatusOK)
	wantStatus(t, "create", admin.postForm("/admin/groups", url.Values{"name": {"finance"}}), http.StatusSeeOther)
	r := admin.postForm("/admin/groups", url.Values{"name": {"finance"}})
	wantStatus(t, "create twice", r, http.StatusConflict)
	if !strings.Contains(testid(r.doc, "form-error"), "already exists") {
		t.Errorf("form error %q", testid(r.doc, "form-error"))
	}
	wantStatus(t, "add", admin.postForm("/admin/groups/members", url.Values{"group": {"finance"}, "user": {"alice"}, "action": {"add"}}), http.StatusSeeOther)
	wantStatus(t, "add nobody", admin.postForm("/admin/groups/members", url.Values{"group": {"finance"}, "user": {"nobody"}, "action": {"add"}}), http.StatusUnprocessableEntity)
	r = admin.get("/admin/groups")
	if got := testid(r.doc, "group-members"); got != "alice" {
		t.Errorf("members %q", got)
	}
	wantStatus(t, "remove", admin.postForm("/admin/groups/members", url.Values{"group": {"finance"}, "user": {"alice"}, "action": {"remove"}}), http.StatusSeeOther)
	if got := testid(admin.get("/admin/groups").doc, "group-members"); got != "" {
		t.Errorf("members after removal %q", got)
	}
	alice := c.alice()
	wantStatus(t, "reviewer", alice.get("/admin/groups"), http.StatusForbidden)
	wantStatus(t, "reviewer creates", alice.postForm("/admin/groups", url.Values{"name": {"security"}}), http.StatusForbidden)
}

// An administrator adding the approver a waiting proposal lacked to the
// group its tier requires confirms it, and the groups page says what the
// change did; the agent redeems the token.
func TestGroupsPageChangeConfirms(t *testing.T) {
	t.Parallel()
	needsFinance := lowNeedsFinance(t)
	c := openConsole(t, needsFinance, func(cfg *app.Config) { cfg.MetricsToken = "metrics-secret" })
	_, m := getMetrics(t, c.srv.URL+"/metrics", "metrics-secret")
	m.want(t, 0, "countersign_group_reconsiderations_total", "outcome", "confirmed")
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	wantStatus(t, "create", admin.postForm("/admin/groups", url.Values{"name": {"finance"}}), http.StatusSeeOther)
	p := c.propose("ord_1001", 5000)
	alice := c.alice()
	wantStatus(t, "alice approves", alice.postForm("/proposals/"+p.ID+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}), http.StatusSeeOther)
	if got := c.reloadProposal(p.ID); got.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("before alice is in finance: %s", got.Status)
	}
	r := admin.postForm("/admin/groups/members", url.Values{"group": {"finance"}, "user": {"alice"}, "action": {"add"}})
	wantStatus(t, "add alice", r, http.StatusSeeOther)
	page := admin.get(r.header.Get("Location"))
	if got := testid(page.doc, "admin-notice"); !strings.Contains(got, "1 waiting proposal they approved changed with it: 1 confirmed") {
		t.Errorf("notice %q", got)
	}
	got := c.reloadProposal(p.ID)
	if got.Status != models.StatusConfirmed || got.Token == nil {
		t.Fatalf("after alice joined finance: %s", got.Status)
	}
	_, m = getMetrics(t, c.srv.URL+"/metrics", "metrics-secret")
	m.want(t, 1, "countersign_group_reconsiderations_total", "outcome", "confirmed")
	m.want(t, 0, "countersign_group_reconsiderations_total", "outcome", "put_off")
	m.want(t, 1, "countersign_time_to_decision_seconds_count", "decision", "approve")
	agent, err := c.app.Protocol.AuthenticateAgent(context.Background(), c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := c.app.Protocol.Execute(context.Background(), agent, p.ID, got.Token.Compact); err != nil || ex.Status != models.StatusSucceeded {
		t.Fatalf("execute: %v %+v", err, ex)
	}
	// A notice's counts come from the query: nonsense there shows none.
	page = admin.get("/admin/groups?done=added&moved=-3&confirmed=x")
	if got := testid(page.doc, "admin-notice"); got != "The member was added." {
		t.Errorf("notice from a forged query %q", got)
	}
}

// lowNeedsFinance configures the demo registry with refund_order's low
// tier requiring one approver of the group finance.
func lowNeedsFinance(t *testing.T) func(*app.Config) {
	t.Helper()
	low := "      - tier: low\n        confirmation: click\n"
	src := string(registry.DemoYAML())
	if !strings.Contains(src, low) {
		t.Fatal("demo registry changed; update the test")
	}
	tools := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(tools, []byte(strings.Replace(src, low, low+"        require: [{group: finance, count: 1}]\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(cfg *app.Config) { cfg.ToolsFile = tools }
}
