package app_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserGroupChangeConfirmsLive: alice approves a refund whose tier
// needs an approver from finance, which she is not in, and her page says
// it still waits for finance. From a client of their own an administrator
// creates the group and adds her; the groups page says the change
// confirmed one waiting proposal, and alice's open page turns confirmed by
// itself.
func TestBrowserGroupChangeConfirmsLive(t *testing.T) {
	t.Parallel()
	j := newJourney(t)
	// Alice's page is live (it re-renders as the proposal changes), so its
	// text is read in one evaluation, never from a node held across a swap.
	step, text := j.step, j.liveText
	base, creds := serveDemo(t, lowNeedsFinance(t))
	agent := &agentClient{t: t, base: base, key: creds.AgentKey}

	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)
	p := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1002","amount_minor":5000,"currency":"CNY","reason":"one item damaged"}}`)
	step("approve",
		chromedp.Navigate(base+"/proposals/"+p.ID),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=approve]`)),
		// The factor is on the page before the approval too: wait for
		// the note of alice's decision, which only the answer brings.
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=decided-note]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=factor][data-group=finance]`)),
	)
	if got := text(`[data-testid=status]`); !strings.Contains(strings.ToLower(got), "awaiting") {
		t.Fatalf("status after alice's approval %q", got)
	}
	if got := text(`[data-testid=factor][data-group=finance]`); !strings.Contains(got, "0 of 1") {
		t.Errorf("finance factor before the change %q", got)
	}
	if got := text(`[data-testid=quorum]`); !strings.Contains(got, "still needs 1 from group finance") {
		t.Errorf("quorum before the change %q", got)
	}
	j.shot("group-waiting.png")

	// The administrator, from a client of their own (one browser holds one
	// session): creates finance and adds alice on the groups page.
	admin := (&console{t: t, srv: &httptest.Server{URL: base}, creds: creds}).browser()
	admin.mustLogin("demo", creds.Admin, creds.AdminPassword)
	admin.get("/admin/groups")
	wantStatus(t, "create finance", admin.postForm("/admin/groups", url.Values{"name": {"finance"}}), http.StatusSeeOther)
	r := admin.postForm("/admin/groups/members", url.Values{"group": {"finance"}, "user": {creds.Reviewer}, "action": {"add"}})
	wantStatus(t, "add alice", r, http.StatusSeeOther)
	if got := testid(admin.get(r.header.Get("Location")).doc, "admin-notice"); !strings.Contains(got, "1 waiting proposal they approved changed with it: 1 confirmed") {
		t.Errorf("notice %q", got)
	}

	// Alice's page was left open: it learns of the confirmation itself.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(strings.ToLower(j.liveText(`[data-testid=status]`)), "confirmed") {
		if time.Now().After(deadline) {
			t.Fatalf("alice's page still says %q", j.liveText(`[data-testid=status]`))
		}
		time.Sleep(200 * time.Millisecond)
	}
	j.shot("group-confirmed.png")
}
