package app_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/countersign/countersign/models"
)

// demoUser reads a user of the demo tenant from the database.
func demoUser(t *testing.T, c *console, name string) models.User {
	t.Helper()
	ctx := context.Background()
	tn, err := c.app.Store.TenantByName(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := c.app.Store.UserCredentials(ctx, tn.ID, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// reviewerRow returns the row of the reviewers page for the user id.
func reviewerRow(t *testing.T, p page, id string) *html.Node {
	t.Helper()
	row := find(p.doc, func(n *html.Node) bool {
		return attr(n, "data-testid") == "reviewer-row" && attr(n, "data-user-id") == id
	})
	if row == nil {
		t.Fatalf("no row for %s on the reviewers page", id)
	}
	return row
}

func hasTestid(n *html.Node, id string) bool {
	return find(n, func(n *html.Node) bool { return attr(n, "data-testid") == id }) != nil
}

// An administrator makes a reviewer an administrator, and the reviewer's
// open session has the role at its next page, without signing in again;
// the new administrator demotes the first, whose session at once is a
// reviewer's (the administration pages are forbidden, the pending list is
// not). The last active administrator is offered no way to step down, and
// a request to do it anyway, or to disable themselves, is refused on the
// list with the reason, changing nothing. Without the page's token, or as
// another tenant's administrator, nothing changes either.
func TestChangeRoleThroughTheConsole(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	c.user("globex", "gadmin", models.RoleAdmin, "globex-password-1")
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	alice := c.browser()
	alice.mustLogin("demo", "alice", c.creds.ReviewerPassword)
	aliceID, adminID := demoUser(t, c, "alice").ID, demoUser(t, c, "admin").ID
	wantStatus(t, "alice as a reviewer", alice.get("/admin/reviewers"), http.StatusForbidden)

	p := admin.get("/admin/reviewers")
	wantStatus(t, "list", p, http.StatusOK)
	own := reviewerRow(t, p, adminID)
	if !hasTestid(own, "reviewer-last-admin") || hasTestid(own, "reviewer-make-reviewer") {
		t.Error("the only active administrator is offered to step down")
	}
	if !hasTestid(reviewerRow(t, p, aliceID), "reviewer-make-admin") {
		t.Fatal("alice's row offers no promotion")
	}

	// The form's token is needed.
	for name, token := range map[string]string{"missing": "", "wrong": otherFirstChar(admin.csrf)} {
		form := url.Values{"role": {"admin"}}
		if token != "" {
			form.Set("csrf_token", token)
		}
		r := admin.post("/admin/reviewers/"+aliceID+"/role", form)
		wantStatus(t, name+" token", r, http.StatusForbidden)
		if !strings.Contains(testid(r.doc, "error-message"), "security token") {
			t.Errorf("%s token: %q", name, testid(r.doc, "error-message"))
		}
	}
	// Another tenant's administrator finds no such user.
	g := c.browser()
	g.mustLogin("globex", "gadmin", "globex-password-1")
	wantStatus(t, "globex admin", g.postForm("/admin/reviewers/"+aliceID+"/role", url.Values{"role": {"admin"}}), http.StatusNotFound)
	wantStatus(t, "globex admin demoting", g.postForm("/admin/reviewers/"+adminID+"/role", url.Values{"role": {"reviewer"}}), http.StatusNotFound)
	if demoUser(t, c, "alice").Role != models.RoleReviewer || demoUser(t, c, "admin").Role != models.RoleAdmin {
		t.Fatal("a refused request changed a role")
	}
	// An unknown role is refused on the list.
	r := admin.postForm("/admin/reviewers/"+aliceID+"/role", url.Values{"role": {"owner"}})
	wantStatus(t, "unknown role", r, http.StatusBadRequest)
	if !strings.Contains(testid(r.doc, "admin-refusal"), "reviewer or admin") {
		t.Errorf("unknown role: refusal %q", testid(r.doc, "admin-refusal"))
	}

	// The last active administrator may not step down or disable
	// themselves.
	r = admin.postForm("/admin/reviewers/"+adminID+"/role", url.Values{"role": {"reviewer"}})
	wantStatus(t, "last admin stepping down", r, http.StatusForbidden)
	if msg := testid(r.doc, "admin-refusal"); !strings.Contains(msg, "last active administrator") {
		t.Errorf("refusal %q", msg)
	}
	reviewerRow(t, r, aliceID) // the list is shown with it
	r = admin.postForm("/admin/reviewers/"+adminID+"/disable", nil)
	wantStatus(t, "self-disable", r, http.StatusForbidden)
	if msg := testid(r.doc, "admin-refusal"); !strings.Contains(msg, "your own account") {
		t.Errorf("self-disable refusal %q", msg)
	}
	wantStatus(t, "admin still one", admin.get("/admin/reviewers"), http.StatusOK)

	// Alice is promoted: her open session is an administrator's.
	r = admin.postForm("/admin/reviewers/"+aliceID+"/role", url.Values{"role": {"admin"}})
	wantStatus(t, "promote", r, http.StatusSeeOther)
	if loc := r.header.Get("Location"); loc != "/admin/reviewers?done=admin" {
		t.Errorf("promote: to %q", loc)
	}
	p = alice.get("/admin/reviewers")
	wantStatus(t, "alice promoted, same session", p, http.StatusOK)
	if !hasTestid(reviewerRow(t, p, adminID), "reviewer-make-reviewer") {
		t.Error("with two administrators, neither is offered to step down")
	}

	// Alice demotes admin: admin's session is a reviewer's at once.
	wantStatus(t, "demote admin", alice.postForm("/admin/reviewers/"+adminID+"/role", url.Values{"role": {"reviewer"}}), http.StatusSeeOther)
	wantStatus(t, "demoted admin's reviewers page", admin.get("/admin/reviewers"), http.StatusForbidden)
	wantStatus(t, "demoted admin's agents page", admin.get("/admin/agents"), http.StatusForbidden)
	wantStatus(t, "demoted admin's pending list", admin.get("/"), http.StatusOK)
	// A form of the page admin still has open is refused, and changes
	// nothing.
	wantStatus(t, "demoted admin's form", admin.postForm("/admin/reviewers/"+aliceID+"/role", url.Values{"role": {"reviewer"}}), http.StatusForbidden)
	if demoUser(t, c, "alice").Role != models.RoleAdmin {
		t.Fatal("a demoted administrator's form demoted alice")
	}

	// Alice is now the last: she is refused too.
	r = alice.postForm("/admin/reviewers/"+aliceID+"/role", url.Values{"role": {"reviewer"}})
	wantStatus(t, "alice stepping down", r, http.StatusForbidden)
	if msg := testid(r.doc, "admin-refusal"); !strings.Contains(msg, "alice is the organization's last active administrator") {
		t.Errorf("refusal %q", msg)
	}

	// With admin an administrator again, alice may step down herself, and
	// lands on the pending list.
	wantStatus(t, "promote admin", alice.postForm("/admin/reviewers/"+adminID+"/role", url.Values{"role": {"admin"}}), http.StatusSeeOther)
	r = alice.postForm("/admin/reviewers/"+aliceID+"/role", url.Values{"role": {"reviewer"}})
	wantStatus(t, "alice stepping down", r, http.StatusSeeOther)
	if loc := r.header.Get("Location"); loc != "/" {
		t.Errorf("stepping down leads to %q", loc)
	}
	wantStatus(t, "alice a reviewer again", alice.get("/admin/reviewers"), http.StatusForbidden)
	wantStatus(t, "admin an administrator again", admin.get("/admin/reviewers"), http.StatusOK)
}
