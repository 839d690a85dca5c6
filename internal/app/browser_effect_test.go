package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserShowsTheEffectAndApproves: in a real browser a reviewer opens
// a refund, reads what it would do — the order's refunded and refundable
// amounts before → after, display and machine values side by side — and
// approves it; the agent then holds a token and the decision recorded the
// effect digest the page showed.
func TestBrowserShowsTheEffectAndApproves(t *testing.T) {
	j := newJourney(t)
	step, text := j.step, j.text
	base, creds := serveDemo(t)
	agent := &agentClient{t: t, base: base, key: creds.AgentKey}

	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)
	p := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":5000,"currency":"CNY","reason":"one item damaged"}}`)
	for _, s := range screens {
		step("open at "+s.name,
			chromedp.EmulateViewport(s.width, s.height),
			chromedp.Navigate(fmt.Sprintf("%s/proposals/%s", base, p.ID)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=effect]`)),
		)
		j.shot("proposal-effect-" + s.name + ".png")
	}
	before := text(`[data-testid=change][data-field=refundable_minor] [data-testid=change-before]`)
	after := text(`[data-testid=change][data-field=refundable_minor] [data-testid=change-after]`)
	if !strings.Contains(before, "¥199.00 CNY") || !strings.Contains(before, "19900") ||
		!strings.Contains(after, "¥149.00 CNY") || !strings.Contains(after, "14900") {
		t.Errorf("refundable before %q after %q, want ¥199.00 (19900) → ¥149.00 (14900)", before, after)
	}
	if got := text(`[data-testid=change][data-field=refunded_minor] [data-testid=change-after]`); !strings.Contains(got, "¥50.00 CNY") {
		t.Errorf("refunded after = %q, want ¥50.00 CNY", got)
	}
	shown := text(`[data-testid=effect-digest]`)

	step("approve",
		chromedp.EmulateViewport(1366, 900),
		chromedp.Click(chromedp.CSS(`[data-testid=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=decided-note]`)),
	)
	if got := text(`[data-testid=decided-note]`); !strings.Contains(got, "Confirmed") {
		t.Fatalf("after approving: %q", got)
	}
	got := agent.waitChange(p.ID, p.ETag)
	if got["status"] != "confirmed" {
		t.Fatalf("the agent sees %v", got["status"])
	}
	digest, _ := got["effect_digest"].(string)
	decisions, _ := got["decisions"].([]any)
	head, tail, _ := strings.Cut(shown, "…")
	if digest == "" || !strings.HasPrefix(digest, head) || !strings.HasSuffix(digest, tail) || len(decisions) != 1 {
		t.Fatalf("effect digest %q (page showed %q), decisions %v", digest, shown, decisions)
	}
	if seen, _ := decisions[0].(map[string]any)["effect_seen"].(string); seen != digest {
		t.Fatalf("the approval records effect %q, the page showed %q", seen, digest)
	}
}
