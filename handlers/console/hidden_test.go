package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A reason that hides a right-to-left override, a zero-width space and a
// decomposed letter shows each as ⟨U+…⟩ in both columns, in the agent's
// context and in the pending list, with a warning.
func TestHiddenCharactersAreRevealed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reason := "Refund of \u202E00.991¥\u202C for ord\u200B_1001, cafe\u0301 order"
	args, _ := json.Marshal(map[string]any{"order_id": "ord_1001", "amount_minor": 100, "currency": "CNY", "reason": reason})
	p := e.propose("refund_order", args, "Customer asked\u2066 nicely\u2069.\nSecond line.")

	r := e.get("/proposals/"+p.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	f := field(t, r.doc, "reason")
	for _, col := range []string{"machine-value", "display-value"} {
		got := text(one(t, f, col))
		wantContains(t, "reason "+col, got, "⟨U+202E⟩00.991¥⟨U+202C⟩", "ord⟨U+200B⟩_1001", "cafe⟨U+0301⟩")
		if strings.ContainsAny(got, "\u202E\u200B\u0301") {
			t.Errorf("%s still holds a hidden code point: %q", col, got)
		}
	}
	one(t, f, "hidden-chars")
	if n := len(all(field(t, r.doc, "amount_minor"), "hidden-chars")); n != 0 {
		t.Errorf("the amount is marked as hiding characters")
	}
	wantContains(t, "warning", text(one(t, r.doc, "hidden-warning")),
		"direction control", "U+202E", "invisible character", "U+200B", "non-NFC", "U+0301")
	ctx := text(one(t, r.doc, "context"))
	wantContains(t, "context", ctx, "asked⟨U+2066⟩ nicely⟨U+2069⟩.", "Second line.")
	if strings.Contains(ctx, "⟨U+000A⟩") || !strings.Contains(r.Body.String(), "⟩.\nSecond line.") {
		t.Errorf("the context's line break should stay a line break: %q", ctx)
	}

	list := e.get("/", "alice")
	wantStatus(t, list, http.StatusOK)
	wantContains(t, "pending row", text(one(t, list.doc, "row-hidden")), "hidden characters")

	// A decline reason is shown the same way in the history.
	d := e.post("/proposals/"+p.ID+"/decline", "alice", url.Values{"digest": {p.ArgsDigest}, "reason": {"amount \u202Ewrong"}})
	wantStatus(t, d, http.StatusSeeOther)
	hist := e.get("/history", "alice")
	if got := text(historyRow(t, hist.doc, p.ID)); !strings.Contains(got, "amount ⟨U+202E⟩wrong") || strings.Contains(got, "\u202E") {
		t.Errorf("history row = %q, want the decline reason with its escape", got)
	}

	// A clean proposal carries no warning.
	clean := e.refund("ord_1002", 100)
	r = e.get("/proposals/"+clean.ID, "alice")
	if len(all(r.doc, "hidden-warning")) != 0 || len(all(r.doc, "hidden-chars")) != 0 {
		t.Error("a clean proposal is flagged")
	}
}
