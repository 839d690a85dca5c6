package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/countersign/countersign/handlers/console"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/static"
)

// adminPages adds the reviewers pages to e, over the real account service.
func (e *env) adminPages() {
	e.t.Helper()
	pw, err := secret.NewPasswords(secret.PasswordParams{MemoryKiB: 8, Time: 1, Threads: 1}, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	ad := console.NewAdminHandlers(auth.New(auth.Config{Store: e.store, Clock: e.clock, Passwords: pw}), static.New())
	e.echo.GET("/admin/reviewers", ad.Reviewers)
	e.echo.POST("/admin/reviewers/:id/password", ad.ResetPassword)
}

// An administrator who resets their own password is signed out by it: the
// page with the new password says so, offers no navigation or Sign out
// (they would land on the sign-in page), and leads to signing in again.
// Their own row asks first in words that say so. Resetting someone else's
// password leaves the administrator signed in, with the way back.
func TestResetOwnPasswordSaysTheSessionEnded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.adminPages()

	list := e.get("/admin/reviewers", "admin")
	wantStatus(t, list, http.StatusOK)
	for _, row := range all(list.doc, "reviewer-row") {
		var ask string
		for _, f := range all(row, "reviewer-reset") {
			ask = attr(f.Parent, "data-confirm")
		}
		switch attr(row, "data-user-id") {
		case e.admin.ID:
			wantContains(t, "own reset asks", ask, "your own password", "this browser included")
		case e.alice.ID:
			wantContains(t, "alice's reset asks", ask, "Reset the password of alice")
		}
	}

	r := e.post("/admin/reviewers/"+e.admin.ID+"/password", "admin", url.Values{"csrf_token": {"t"}})
	wantStatus(t, r, http.StatusOK)
	wantContains(t, "own reset", text(one(t, r.doc, "signed-out")), "signed out everywhere, this browser included")
	if pw := attr(one(t, r.doc, "new-password"), "value"); len(pw) < 12 {
		t.Errorf("new password %q", pw)
	}
	if got := attr(one(t, r.doc, "sign-in-again"), "href"); got != "/login" {
		t.Errorf("sign-in link to %q", got)
	}
	if n := len(all(r.doc, "whoami")); n != 0 {
		t.Error("the page after an own reset still shows the signed-in frame")
	}

	r = e.post("/admin/reviewers/"+e.alice.ID+"/password", "admin", url.Values{"csrf_token": {"t"}})
	wantStatus(t, r, http.StatusOK)
	one(t, r.doc, "whoami")
	if len(all(r.doc, "signed-out")) != 0 || len(all(r.doc, "sign-in-again")) != 0 {
		t.Error("resetting alice's password says the administrator was signed out")
	}
}
