package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// overflowJS names, in one string, what of the page lies outside the
// viewport sideways: the page itself when it scrolls sideways, and every
// element matching the selectors given whose box does not lie within the
// viewport's width ("" when all is in view).
const overflowJS = `((sels) => {
	const w = document.documentElement.clientWidth, out = [];
	if (document.documentElement.scrollWidth > w) out.push('page ' + document.documentElement.scrollWidth + ' px wide');
	for (const sel of sels) {
		document.querySelectorAll(sel).forEach((el, i) => {
			const r = el.getBoundingClientRect();
			if (r.left < 0 || r.right > w + 0.5) out.push(sel + '#' + i + ' at ' + Math.round(r.left) + '…' + Math.round(r.right));
		});
	}
	return out.length > 6 ? out.slice(0, 6).join('; ') + ' and ' + (out.length - 6) + ' more' : out.join('; ');
})(%s)`

func (j *journey) outOfView(sels ...string) string {
	j.t.Helper()
	b, _ := json.Marshal(sels)
	return j.eval(fmt.Sprintf(overflowJS, b))
}

// TestBrowserLongValuesStayInView: a value without a break opportunity —
// a reason of 500 letters, 150 log ids as one JSON line, an e-mail body
// with a run of 600 letters — never pushes the machine or the display
// value of any field out of sight: at 1366 and at 360 px every value cell
// lies within the viewport, beside (or, narrow, under) its twin, and the
// page never scrolls sideways. The fixed resource set of 150 ids wraps
// downward, every id within the page's width; the effect preview of a
// large refund fits its card at 360 px.
func TestBrowserLongValuesStayInView(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	var ids []string
	for i := 1; i <= 150; i++ {
		ids = append(ids, fmt.Sprintf("log_%04d", i))
	}
	idsJSON, _ := json.Marshal(ids)
	proposals := map[string]string{
		"refund": fmt.Sprintf(`{"tool":"refund_order","arguments":{"order_id":"ord_1002","amount_minor":500,"currency":"CNY","reason":%q}}`,
			strings.Repeat("W", 500)),
		"logs": fmt.Sprintf(`{"tool":"delete_logs","arguments":{"log_ids":%s,"reason":"Old traces"}}`, idsJSON),
		"email": fmt.Sprintf(`{"tool":"send_customer_email","arguments":{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":%q,"send_at":null}}`,
			"Dear Li Wei,\n\n"+strings.Repeat("x", 600)+"\nWe are sorry."),
		"large refund": `{"tool":"refund_order","arguments":{"order_id":"ord_2001","amount_minor":50000,"currency":"CNY","reason":"Partial refund for a damaged item"}}`,
	}
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	for name, body := range proposals {
		p := agent.propose(body)
		for _, s := range screens {
			j.step(name+" at "+s.name, chromedp.EmulateViewport(s.width, s.height),
				chromedp.Navigate(d.base+"/proposals/"+p.ID),
				chromedp.WaitVisible(chromedp.CSS(`[data-testid=proposal-field]`)))
			if got := j.outOfView(`[data-testid=machine-value]`, `[data-testid=display-value]`,
				`[data-testid=batch-id]`, `[data-testid=effect]`, `[data-testid=change] td`); got != "" {
				j.shot("long-" + strings.ReplaceAll(name, " ", "-") + "-" + s.name + ".png")
				t.Errorf("%s at %s px: out of view: %s", name, s.name, got)
			}
		}
	}
}

// TestBrowserAdminPagesFitAPhone: at 360 px no page with a table of people,
// agents, mandates or webhooks scrolls sideways — reviewers, agents, the
// mandates page with a granted mandate, the webhooks page with an endpoint
// and a delivery. A table wider than the screen scrolls within its own box
// (a visually hidden column header included), never the page; at 1366 px
// nothing scrolls either.
func TestBrowserAdminPagesFitAPhone(t *testing.T) {
	t.Parallel()
	d := startDemo(t, allowLoopbackHooks)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	term := d.terminal(t)
	alice := terminalUser(t, term, d.creds.Reviewer)
	hook := newHookReceiver(t)

	expires := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	res, body := agent.do("POST", "/api/v1/mandates", fmt.Sprintf(`{"terms":{"tool":"refund_order","tiers":["low"],
		"resource_pattern":"ord_1[0-9]{3}","money":{"field":"amount_minor","currency":"CNY","per_call_cap":1000,"budget":5000},
		"max_uses":10,"expires_at":%q,"reason":"sale refunds"}}`, expires), nil)
	if res.StatusCode != 201 {
		t.Fatalf("request mandate: %d %s", res.StatusCode, body)
	}
	var mp struct{ ID string }
	json.Unmarshal(body, &mp)
	if _, err := term.Protocol.Confirm(context.Background(), writes.ConfirmInput{Reviewer: alice, ProposalID: mp.ID,
		DigestSeen: mustDigest(t, term, alice, mp.ID), Evidence: auth.ApprovalEvidence(alice, nil)}); err != nil {
		t.Fatalf("grant: %v", err)
	}

	j.signIn(d.base, d.creds.Admin, d.creds.AdminPassword)
	j.step("add a webhook endpoint", chromedp.Navigate(d.base+"/admin/webhooks"),
		chromedp.SendKeys(chromedp.CSS(`#webhook-url`), hook.URL+"/countersign/webhooks/a-rather-long-path"),
		chromedp.Click(chromedp.CSS(`[data-testid=webhook-create] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=webhook-secret]`)))
	agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_2001","amount_minor":50000,"currency":"CNY","reason":"Damaged"}}`)

	pages := []struct{ name, path, ready string }{
		{"admin-reviewers", "/admin/reviewers", `[data-testid=reviewer-row]`},
		{"admin-agents", "/admin/agents", `[data-testid=agent-row]`},
		{"mandates", "/mandates", `[data-testid=mandate-row]`},
		{"webhooks", "/admin/webhooks", `[data-testid=webhook-row]`},
	}
	for _, s := range screens {
		for _, pg := range pages {
			j.step(pg.name+" at "+s.name, chromedp.EmulateViewport(s.width, s.height),
				chromedp.Navigate(d.base+pg.path), chromedp.WaitVisible(chromedp.CSS(pg.ready)))
			if pg.name == "webhooks" {
				j.within(10*time.Second, "a delivery is listed", `document.querySelector('[data-testid=delivery-row]')`)
			}
			got := j.outOfView(`.table-wrap`)
			if w := j.eval(`String(document.documentElement.scrollWidth)`); w != fmt.Sprint(s.width) && got == "" {
				got = "page " + w + " px wide"
			}
			j.shot(pg.name + "-" + s.name + ".png")
			if got != "" {
				t.Errorf("%s at %s px: %s", pg.name, s.name, got)
			}
		}
	}
}
