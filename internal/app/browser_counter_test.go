package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserEditsAProposal: in a real browser a reviewer opens a refund,
// edits its amount instead of declining it, and lands on the new version,
// which names the edit, its reason and the changed amount, and now needs a
// security key, and does not offer its editor to approve it (saying why);
// the agent's long-poll on the original sees it superseded,
// with the diff.
func TestBrowserEditsAProposal(t *testing.T) {
	t.Parallel()
	j := newJourney(t)
	step, text := j.step, j.text
	base, creds := serveDemo(t)
	agent := &agentClient{t: t, base: base, key: creds.AgentKey}

	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)
	orig := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_2001","amount_minor":10000,"currency":"CNY","reason":"one item damaged"}}`)
	polled := make(chan map[string]any, 1)
	go func() { polled <- agent.waitChange(orig.ID, orig.ETag) }()

	edited := `{"order_id":"ord_2001","amount_minor":30000,"currency":"CNY","reason":"one item damaged"}`
	step("edit",
		chromedp.Navigate(fmt.Sprintf("%s/proposals/%s", base, orig.ID)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)),
		chromedp.Click(chromedp.CSS(`#edit-h`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=edit-arguments]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=edit-arguments]`), edited),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=edit-reason-input]`), "all three items were damaged"),
		chromedp.Click(chromedp.CSS(`[data-testid=edit-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=supersedes]`)),
	)
	got := text(`[data-testid=supersedes]`)
	for _, want := range []string{orig.ID, "all three items were damaged", "/amount_minor", "10000", "30000"} {
		if !strings.Contains(got, want) {
			t.Errorf("edit section %q lacks %q", got, want)
		}
	}
	if got := text(`[data-testid=tier]`); !strings.Contains(got, "high") {
		t.Errorf("tier of the edit = %q, want high", got)
	}
	// The editor is not offered to approve their own edit, and reads why.
	if n := j.eval(`String(document.querySelectorAll('[data-testid=approve]:not([disabled])').length)`); n != "0" {
		t.Error("the editor is offered Approve on their own edit")
	}
	if got := text(`[data-testid=approve-blocked]`); !strings.Contains(got, "You edited this proposal") {
		t.Errorf("why the editor may not approve: %q", got)
	}
	j.shot("proposal-edited.png")

	var p map[string]any
	select {
	case p = <-polled:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's long-poll did not see the edit")
	}
	if p["status"] != "superseded" {
		t.Fatalf("the agent sees the original as %v", p["status"])
	}
	by, _ := json.Marshal(p["superseded_by"])
	if !strings.Contains(string(by), `"reason":"all three items were damaged"`) || !strings.Contains(string(by), `"after":30000`) {
		t.Errorf("superseded_by = %s", by)
	}
}
