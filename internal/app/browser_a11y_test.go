package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// contrast is the WCAG 2 contrast ratio of two CSS rgb()/rgba() colours
// (opaque; the console's buttons have opaque backgrounds).
func contrast(t *testing.T, fg, bg string) float64 {
	t.Helper()
	lum := func(c string) float64 {
		var r, g, b float64
		c = strings.NewReplacer("rgba(", "", "rgb(", "", ")", "", ",", " ").Replace(c)
		if _, err := fmt.Sscan(c, &r, &g, &b); err != nil {
			t.Fatalf("colour %q: %v", c, err)
		}
		ch := func(v float64) float64 {
			v /= 255
			if v <= 0.04045 {
				return v / 12.92
			}
			return math.Pow((v+0.055)/1.055, 2.4)
		}
		return 0.2126*ch(r) + 0.7152*ch(g) + 0.0722*ch(b)
	}
	a, b := lum(fg), lum(bg)
	return (math.Max(a, b) + 0.05) / (math.Min(a, b) + 0.05)
}

// TestBrowserBusyButtonsAreReadable computes the contrast of the Approve
// and Decline buttons in every state — as drawn, hovered, busy (a submit
// under way), busy and hovered, disabled and hovered — at both sizes.
func TestBrowserBusyButtonsAreReadable(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	refund := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":1000,"currency":"CNY","reason":"x"}}`)
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	for _, s := range screens {
		j.step("open at "+s.name, chromedp.EmulateViewport(s.width, s.height), chromedp.Navigate(d.base+"/proposals/"+refund.ID),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)))
		for _, btn := range []string{"approve", "decline"} {
			sel := `[data-testid=` + btn + `]`
			center := j.eval(`(() => { const b = document.querySelector('` + sel + `'); b.scrollIntoView({block: 'center'});
				const r = b.getBoundingClientRect(); return Math.round(r.left + r.width/2) + ' ' + Math.round(r.top + r.height/2); })()`)
			var x, y float64
			fmt.Sscan(center, &x, &y)
			states := []struct {
				name, setup string
				hover       bool
			}{
				{"as drawn", ``, false},
				{"hovered", ``, true},
				{"busy", `b.setAttribute('aria-disabled', 'true')`, false},
				{"busy and hovered", `b.setAttribute('aria-disabled', 'true')`, true},
				{"disabled and hovered", `b.disabled = true`, true},
			}
			for _, st := range states {
				j.eval(`(() => { const b = document.querySelector('` + sel + `'); b.removeAttribute('aria-disabled'); b.disabled = false; ` + st.setup + `; return ''; })()`)
				mx, my := 1.0, 1.0
				if st.hover {
					mx, my = x, y
				}
				j.step("mouse", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, mx, my))
				if st.hover {
					if got := j.eval(`String(document.querySelector('` + sel + `').matches(':hover'))`); got != "true" {
						t.Fatalf("%s: %s is not hovered", s.name, btn)
					}
				}
				colours := j.eval(`(() => { const cs = getComputedStyle(document.querySelector('` + sel + `')); return cs.color + '|' + cs.backgroundColor; })()`)
				fg, bg, _ := strings.Cut(colours, "|")
				if c := contrast(t, fg, bg); c < 4.5 {
					t.Errorf("%s: %s %s: contrast %.2f:1 (%s on %s), want at least 4.5:1", s.name, btn, st.name, c, fg, bg)
				}
			}
		}
	}
}

// TestBrowserDestructiveActionsAskFirst: revoking an agent's key,
// disabling a reviewer, resetting a password, revoking a standing mandate
// and disabling a webhook endpoint ask for confirmation, and nothing
// happens when it is refused; the reviewers page shows who has a security
// key.
func TestBrowserDestructiveActionsAskFirst(t *testing.T) {
	t.Parallel()
	d := startDemo(t, allowLoopbackHooks)
	j := newJourney(t)
	term := d.terminal(t)
	alice := terminalUser(t, term, d.creds.Reviewer)
	if _, err := term.Store.CreateSecurityKey(context.Background(), models.SecurityKey{ID: models.NewID("key"), TenantID: alice.TenantID,
		UserID: alice.ID, Name: "Desk key", CredentialID: []byte("cred-alice"), PublicKey: []byte{1}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d.ownedAgent(t, term, "spare-bot", d.creds.Admin)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	res, body := agent.do("POST", "/api/v1/mandates", fmt.Sprintf(`{"terms":{"tool":"refund_order","tiers":["low"],
		"resource_pattern":"ord_1[0-9]{3}","money":{"field":"amount_minor","currency":"CNY","per_call_cap":1000,"budget":5000},
		"expires_at":%q,"reason":"sale refunds"}}`, time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339)), nil)
	if res.StatusCode != 201 {
		t.Fatalf("request mandate: %d %s", res.StatusCode, body)
	}
	var mp struct{ ID string }
	json.Unmarshal(body, &mp)
	if _, err := term.Protocol.Confirm(context.Background(), writes.ConfirmInput{Reviewer: alice, ProposalID: mp.ID,
		DigestSeen: mustDigest(t, term, alice, mp.ID), Evidence: auth.ApprovalEvidence(alice, nil)}); err != nil {
		t.Fatalf("grant the mandate: %v", err)
	}
	hook := newHookReceiver(t)
	j.signIn(d.base, d.creds.Admin, d.creds.AdminPassword)
	j.step("add a webhook endpoint", chromedp.Navigate(d.base+"/admin/webhooks"),
		chromedp.SendKeys(chromedp.CSS(`#webhook-url`), hook.URL+"/hook"),
		chromedp.Click(chromedp.CSS(`[data-testid=webhook-create] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=webhook-secret]`)))

	var answer bool
	asked := make(chan string, 4)
	if err := chromedp.Listen(j.ctx, func(ev any) {
		if e, ok := ev.(*cdppage.EventJavascriptDialogOpening); ok {
			asked <- e.Message
			go chromedp.Call(j.ctx, cdppage.HandleJavaScriptDialog, cdppage.HandleJavaScriptDialogParams{Accept: answer})
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
	for _, s := range screens {
		j.step("reviewers at "+s.name, chromedp.EmulateViewport(s.width, s.height), chromedp.Navigate(d.base+"/admin/reviewers"),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=reviewers]`)))
		row := fmt.Sprintf(`[data-testid=reviewer-row][data-user-id="%s"] `, alice.ID)
		if got := j.text(row + `[data-testid=reviewer-keys]`); !strings.Contains(got, "1 key") {
			t.Errorf("%s: alice's keys = %q", s.name, got)
		}
		j.shot("reviewers-" + s.name + ".png")
		// Refused: nothing changes.
		answer = false
		j.step("disable, refused", chromedp.Click(chromedp.CSS(row+`[data-testid=reviewer-disable]`)))
		expectAsk("disable", "Disable alice")
		time.Sleep(300 * time.Millisecond)
		if got := j.text(row + `[data-testid=reviewer-status]`); !strings.Contains(got, "Active") {
			t.Errorf("%s: after a refused confirmation alice is %q", s.name, got)
		}
		answer = false
		j.step("reset, refused", chromedp.Click(chromedp.CSS(row+`[data-testid=reviewer-reset]`)))
		expectAsk("reset", "Reset the password of alice")
		time.Sleep(300 * time.Millisecond)
		if n := j.eval(`String(document.querySelectorAll('[data-testid=copy-password]').length)`); n != "0" {
			t.Errorf("%s: a refused reset showed a new password", s.name)
		}
		j.step("agents", chromedp.Navigate(d.base+"/admin/agents"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=agent-revoke]`)))
		answer = false
		j.step("revoke, refused", chromedp.Click(chromedp.CSS(`[data-testid=agent-revoke]`)))
		expectAsk("revoke", "Revoke the key of")
		time.Sleep(300 * time.Millisecond)
		if n := j.eval(`String(document.querySelectorAll('[data-testid=agent-revoke]').length)`); n == "0" {
			t.Errorf("%s: a refused revocation revoked the key", s.name)
		}
		j.step("mandates", chromedp.Navigate(d.base+"/mandates"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=mandate-revoke]`)))
		answer = false
		j.step("revoke the mandate, refused", chromedp.Click(chromedp.CSS(`[data-testid=mandate-revoke]`)))
		expectAsk("mandate revoke", "Revoke the mandate for refund_order")
		time.Sleep(300 * time.Millisecond)
		if got := j.text(`[data-testid=mandate-left]`); strings.Contains(got, "revoked") {
			t.Errorf("%s: a refused revocation revoked the mandate", s.name)
		}
		j.step("webhooks", chromedp.Navigate(d.base+"/admin/webhooks"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=webhook-disable]`)))
		answer = false
		j.step("disable the endpoint, refused", chromedp.Click(chromedp.CSS(`[data-testid=webhook-disable]`)))
		expectAsk("webhook disable", "Disable the endpoint "+hook.URL+"/hook")
		time.Sleep(300 * time.Millisecond)
		if n := j.eval(`String(document.querySelectorAll('[data-testid=webhook-disable]').length)`); n == "0" {
			t.Errorf("%s: a refused confirmation disabled the endpoint", s.name)
		}
	}
	// Accepted, it happens.
	answer = true
	j.step("mandates", chromedp.Navigate(d.base+"/mandates"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=mandate-revoke]`)))
	j.step("revoke the mandate, confirmed", chromedp.Click(chromedp.CSS(`[data-testid=mandate-revoke]`)))
	expectAsk("mandate revoke", "Revoke the mandate for refund_order")
	j.within(5*time.Second, "mandate revoked", `(document.querySelector('[data-testid=mandate-left]') || {textContent: ''}).textContent.includes('revoked')`)
	j.step("webhooks", chromedp.Navigate(d.base+"/admin/webhooks"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=webhook-disable]`)))
	j.step("disable the endpoint, confirmed", chromedp.Click(chromedp.CSS(`[data-testid=webhook-disable]`)))
	expectAsk("webhook disable", "Disable the endpoint")
	j.within(5*time.Second, "endpoint disabled", `document.querySelectorAll('[data-testid=webhook-disable]').length === 0`)
	j.step("reviewers", chromedp.Navigate(d.base+"/admin/reviewers"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=reviewers]`)))
	row := fmt.Sprintf(`[data-testid=reviewer-row][data-user-id="%s"] `, alice.ID)
	j.step("disable, confirmed", chromedp.Click(chromedp.CSS(row+`[data-testid=reviewer-disable]`)))
	expectAsk("disable", "Disable alice")
	j.within(5*time.Second, "alice disabled", `(document.querySelector('`+row+`[data-testid=reviewer-status]`+`') || {textContent: ''}).textContent.includes('Disabled')`)
}

// TestBrowserReviewerTimeZone: a reviewer's zone defaults to the browser's,
// can be chosen and is stored per user; every time is shown in it with UTC
// on hover.
func TestBrowserReviewerTimeZone(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	refund := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":1000,"currency":"CNY","reason":"x"}}`)
	if _, err := chromedp.Call(j.ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Shanghai"}); err != nil {
		t.Fatal(err)
	}
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	// The browser's zone, sent with the sign-in, is the default: the
	// first page is drawn in it and need not be drawn again.
	if got := j.eval(`document.body.hasAttribute('data-zone-auto') + ' ' + (document.querySelector('[data-testid=zone-link]') || {}).textContent`); got != "false Asia/Shanghai" {
		t.Fatalf("the first page after signing in: zone still unknown, zone shown = %q", got)
	}
	requested := `[data-testid=requester] time`
	check := func(screen, abbrev string) {
		t.Helper()
		j.step("proposal", chromedp.Navigate(d.base+"/proposals/"+refund.ID), chromedp.WaitVisible(chromedp.CSS(requested)))
		// The script gives every time its UTC title once the page is loaded.
		j.within(5*time.Second, screen+": titles set", `document.querySelector('`+requested+`').title !== ''`)
		shown := j.text(requested)
		if !strings.HasSuffix(shown, " "+abbrev) {
			t.Errorf("%s: requested at %q, want a time in %s", screen, shown, abbrev)
		}
		iso := j.eval(`document.querySelector('` + requested + `').getAttribute('datetime')`)
		at, err := time.Parse(time.RFC3339, iso)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := j.eval(`document.querySelector('`+requested+`').title`), at.UTC().Format(time.DateTime)+" UTC"; got != want {
			t.Errorf("%s: hover shows %q, want %q", screen, got, want)
		}
		if got := j.eval(`document.querySelector('[data-testid=expires] time').title`); !strings.HasSuffix(got, " UTC") {
			t.Errorf("%s: the countdown's time has no UTC on hover: %q", screen, got)
		}
	}
	for _, s := range screens {
		j.step("size", chromedp.EmulateViewport(s.width, s.height))
		check(s.name, "CST")
		j.shot("zone-" + s.name + ".png")
	}
	// A chosen zone is stored and wins over the browser's.
	j.step("choose a zone", chromedp.Navigate(d.base+"/settings/zone"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=zone-input]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=zone-input]`), "Mars/Olympus"), chromedp.Click(chromedp.CSS(`[data-testid=zone-save]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=zone-error]`)))
	j.step("choose a zone", chromedp.SetValue(chromedp.CSS(`[data-testid=zone-input]`), "Europe/Berlin"),
		chromedp.Click(chromedp.CSS(`[data-testid=zone-save]`)))
	// The settings page always shows the time now; the saved zone shows in
	// the header once the answer to the form has loaded.
	j.within(10*time.Second, "the chosen zone is stored", `document.readyState === 'complete' && (document.querySelector('[data-testid=zone-link]') || {}).textContent === 'Europe/Berlin'`)
	for _, s := range screens {
		j.step("size", chromedp.EmulateViewport(s.width, s.height))
		check(s.name, "CET")
	}
	if got := j.text(`[data-testid=zone-link]`); got != "Europe/Berlin" {
		t.Errorf("zone after choosing = %q", got)
	}
}

// TestBrowserZoneFoundLaterLeavesThePageAlone: a session begun without the
// browser's zone (the sign-in form sent before the script could add it)
// stores it from its first page, and the pages after it are drawn in it.
// The first page is not drawn again: a reload there would cut short a
// navigation the reviewer had begun meanwhile.
func TestBrowserZoneFoundLaterLeavesThePageAlone(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	term := d.terminal(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	refund := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":1000,"currency":"CNY","reason":"x"}}`)
	if _, err := chromedp.Call(j.ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"}); err != nil {
		t.Fatal(err)
	}
	// Without the zone, as when the form is sent before the script ran.
	j.signInAfter(d.base, d.creds.Reviewer, d.creds.ReviewerPassword,
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('[data-browser-zone]').forEach(el => el.remove())`))
	deadline := time.Now().Add(10 * time.Second)
	for terminalUser(t, term, d.creds.Reviewer).TimeZone != "Asia/Tokyo" {
		if time.Now().After(deadline) {
			t.Fatal("the browser's zone was not stored")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A reload would follow the answer at once; give it time to show.
	time.Sleep(500 * time.Millisecond)
	if got := j.eval(`performance.getEntriesByType('navigation')[0].type + ' ' + document.body.hasAttribute('data-zone-auto')`); got != "navigate true" {
		t.Errorf("the first page: %q, want it loaded once (navigate), still drawn without a zone (true)", got)
	}
	j.step("the proposal", chromedp.Navigate(d.base+"/proposals/"+refund.ID), chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)))
	if got := j.eval(`document.body.hasAttribute('data-zone-auto') + ' ' + (document.querySelector('[data-testid=zone-link]') || {}).textContent`); got != "false Asia/Tokyo" {
		t.Errorf("the next page: zone still unknown, zone shown = %q", got)
	}
}

// TestBrowserEmailPreviewKeepsLineBreaks: an e-mail's body reads as the
// customer will read it, paragraph by paragraph.
func TestBrowserEmailPreviewKeepsLineBreaks(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	mail := agent.propose(`{"tool":"send_customer_email","arguments":{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Dear Li Wei,\n\nyour parcel is late.\nWe are sorry.","send_at":null}}`)
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	for _, s := range screens {
		j.step("open at "+s.name, chromedp.EmulateViewport(s.width, s.height), chromedp.Navigate(d.base+"/proposals/"+mail.ID),
			chromedp.WaitVisible(chromedp.CSS(`[data-field=body] [data-testid=display-value]`)))
		if got := j.eval(`document.querySelector('[data-field=body] [data-testid=display-value]').innerText`); got != "Dear Li Wei,\n\nyour parcel is late.\nWe are sorry." {
			t.Errorf("%s: the body reads %q", s.name, got)
		}
		j.shot("proposal-email-" + s.name + ".png")
	}
}

// brokenTokens lists the words on the page that are split across lines
// although they would fit on one: a label, number or identifier broken
// mid-token ("Amoun t", "¥9,99 / 9.00", "log_000 / 9").
const brokenTokens = `(() => {
	const out = [];
	const walk = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
	for (let n = walk.nextNode(); n; n = walk.nextNode()) {
		const box = n.parentElement;
		if (!box || box.closest('.visually-hidden, details:not([open]) > :not(summary)') || !box.offsetParent) continue;
		const re = /\S+/g;
		for (let m = re.exec(n.data); m; m = re.exec(n.data)) {
			// Prose may break after a hyphen ("one-" / "time"), as print does.
			if (/^[A-Za-z’']+(-[A-Za-z’']+)+[.,;:!?)]*$/.test(m[0])) continue;
			const r = document.createRange();
			r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
			const rects = [...r.getClientRects()].filter(x => x.width > 0);
			const lines = new Set(rects.map(x => Math.round(x.top)));
			const width = rects.reduce((w, x) => w + x.width, 0);
			if (lines.size > 1 && width <= box.getBoundingClientRect().width) out.push(m[0]);
		}
	}
	return out.join(' | ');
})()`

// TestBrowserNoTokenBrokenMidWord checks the pending list, a proposal and
// the history at both sizes for words split across lines.
func TestBrowserNoTokenBrokenMidWord(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	term := d.terminal(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	owned := d.ownedAgent(t, term, "alices-bot", d.creds.Reviewer)
	ids := fifteen(t, agent, owned)
	big := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_2006","amount_minor":499999,"currency":"CNY","reason":"Full refund"}}`)
	logs := agent.propose(`{"tool":"delete_logs","arguments":{"log_ids":["log_0009","log_0011","log_0012","log_0013","log_0014","log_0015"],"reason":"Old traces"}}`)
	admin := terminalUser(t, term, d.creds.Admin)
	if _, err := term.Protocol.Confirm(context.Background(), writes.ConfirmInput{Reviewer: admin, ProposalID: ids[0],
		DigestSeen: mustDigest(t, term, admin, ids[0]), EffectSeen: mustEffect(t, term, admin, ids[0]), Evidence: auth.ApprovalEvidence(admin, nil)}); err != nil {
		t.Fatal(err)
	}
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	for _, s := range screens {
		for _, path := range []string{"/", "/proposals/" + big.ID, "/proposals/" + logs.ID, "/history"} {
			j.step(path+" at "+s.name, chromedp.EmulateViewport(s.width, s.height), chromedp.Navigate(d.base+path),
				chromedp.WaitVisible(chromedp.CSS(`main h1`)))
			if got := j.eval(brokenTokens); got != "" {
				t.Errorf("%s %s: words broken across lines: %s", s.name, path, got)
			}
		}
	}
}
