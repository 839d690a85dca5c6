package app_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserRevealsHiddenCharacters: an agent hides a right-to-left
// override, a zero-width space and a decomposed letter in a refund's
// reason, so that "¥1.00" would read as "Refund of ¥199.00". In a real
// browser the pending list flags the row and the proposal page shows every
// such code point as ⟨U+…⟩ in both columns and in the context, under a
// warning. The screenshot goes to docs/screenshots/proposal-hidden.png with
// COUNTERSIGN_UPDATE_SCREENSHOTS=1.
func TestBrowserRevealsHiddenCharacters(t *testing.T) {
	t.Parallel()
	j := newJourney(t)
	shot, step, text := j.shot, j.step, j.text
	base, creds := serveDemo(t)
	agent := &agentClient{t: t, base: base, key: creds.AgentKey}

	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)
	p := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1004","amount_minor":100,"currency":"CNY",` +
		`"reason":"Refund of \u202e00.991¥\u202c as agreed\u200b, cafe\u0301 voucher"},` +
		`"context":"Approved by the team lead \u202eyadretsey\u202c.\nTicket 4711."}`)

	step("pending row flagged", chromedp.WaitVisible(chromedp.CSS(`[data-testid=row-hidden]`)))
	if got := text(`[data-testid=pending-row] [data-testid=summary]`); !strings.Contains(got, "hidden characters") {
		t.Errorf("pending summary = %q, want the hidden-characters flag", got)
	}

	step("open proposal",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/proposals/%s"]`, p.ID))),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=hidden-warning]`)),
	)
	reason := `[data-testid=proposal-field][data-field=reason] `
	for _, col := range []string{"machine-value", "display-value"} {
		got := text(reason + `[data-testid=` + col + `]`)
		for _, want := range []string{"⟨U+202E⟩00.991¥⟨U+202C⟩", "agreed⟨U+200B⟩", "cafe⟨U+0301⟩"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s = %q, want it to contain %q", col, got, want)
			}
		}
		if strings.ContainsAny(got, "\u202e\u202c\u200b\u0301") {
			t.Errorf("%s still renders a hidden code point: %q", col, got)
		}
	}
	warning := text(`[data-testid=hidden-warning]`)
	for _, want := range []string{"direction control", "U+202E", "invisible character", "U+200B", "non-NFC", "U+0301"} {
		if !strings.Contains(warning, want) {
			t.Errorf("warning %q lacks %q", warning, want)
		}
	}
	if got := text(`[data-testid=context]`); !strings.Contains(got, "lead ⟨U+202E⟩yadretsey⟨U+202C⟩.") {
		t.Errorf("context = %q", got)
	}
	if got := text(`[data-testid=proposal-field][data-field=amount_minor] [data-testid=display-value]`); got != "¥1.00" {
		t.Errorf("amount display = %q, want ¥1.00", got)
	}
	shot("proposal-hidden.png")
}
