package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/models"
)

// In a browser, an administrator makes alice an administrator: the button
// asks first, the list then says what changed and offers both of them to
// step down. When alice is demoted meanwhile (from the command line), the
// administrator's own Make reviewer, on the page still open, is refused
// with the reason above the list, which shows the administrator still
// one. Screenshots of both, at each screen width, go to the test's temp
// dir.
func TestBrowserChangeRole(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	term := d.terminal(t)
	alice := terminalUser(t, term, d.creds.Reviewer)
	admin := terminalUser(t, term, d.creds.Admin)
	j.signIn(d.base, d.creds.Admin, d.creds.AdminPassword)

	asked := make(chan string, 4)
	if err := chromedp.Listen(j.ctx, func(ev any) {
		if e, ok := ev.(*cdppage.EventJavascriptDialogOpening); ok {
			asked <- e.Message
			go chromedp.Call(j.ctx, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: true})
		}
	}); err != nil {
		t.Fatal(err)
	}
	expectAsk := func(what, want string) {
		t.Helper()
		select {
		case m := <-asked:
			if !strings.Contains(m, want) {
				t.Errorf("%s: asked %q, want it to mention %q", what, m, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no confirmation was asked", what)
		}
	}
	aliceRow := fmt.Sprintf(`[data-testid=reviewer-row][data-user-id="%s"] `, alice.ID)
	adminRow := fmt.Sprintf(`[data-testid=reviewer-row][data-user-id="%s"] `, admin.ID)
	for _, s := range screens {
		j.step("reviewers at "+s.name, chromedp.EmulateViewport(s.width, s.height), chromedp.Navigate(d.base+"/admin/reviewers"),
			chromedp.WaitVisible(chromedp.CSS(adminRow+`[data-testid=reviewer-last-admin]`)))
		j.step("promote alice", chromedp.Click(chromedp.CSS(aliceRow+`[data-testid=reviewer-make-admin]`)))
		expectAsk("promote", "Make alice an administrator")
		j.step("promoted", chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-notice]`)),
			chromedp.WaitVisible(chromedp.CSS(adminRow+`[data-testid=reviewer-make-reviewer]`)))
		if got := j.text(aliceRow + `[data-testid=reviewer-role]`); got != "admin" {
			t.Errorf("%s: alice's role %q", s.name, got)
		}
		j.shot("reviewers-role-promoted-" + s.name + ".png")

		// Behind the page's back, alice is demoted: the administrator is
		// the last one, and the page does not know.
		if _, err := term.Store.SetUserRole(context.Background(), admin.TenantID, alice.Name, models.RoleReviewer, time.Now()); err != nil {
			t.Fatal(err)
		}
		j.step("step down", chromedp.Click(chromedp.CSS(adminRow+`[data-testid=reviewer-make-reviewer]`)))
		expectAsk("step down", "Make yourself a reviewer")
		j.step("refused", chromedp.WaitVisible(chromedp.CSS(`[data-testid=admin-refusal]`)))
		if got := j.text(`[data-testid=admin-refusal]`); !strings.Contains(got, "last active administrator") {
			t.Errorf("%s: refusal %q", s.name, got)
		}
		if got := j.text(adminRow + `[data-testid=reviewer-role]`); got != "admin" {
			t.Errorf("%s: after the refusal the administrator is %q", s.name, got)
		}
		if got := j.outOfView(`.table-wrap`, `[data-testid=admin-refusal]`); got != "" {
			t.Errorf("%s: %s", s.name, got)
		}
		j.shot("reviewers-role-refused-" + s.name + ".png")
	}
}
