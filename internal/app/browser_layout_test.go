package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
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
