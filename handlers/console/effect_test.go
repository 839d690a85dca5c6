package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// The proposal page shows the effect preview — each changed value before
// → after, display and machine values side by side — and its approve form
// carries the effect digest; an approval naming another effect digest is
// refused and records nothing.
func TestProposalPageShowsTheEffectBeforeAndAfter(t *testing.T) {
	e := newEnv(t)
	p := e.refund("ord_1001", 5000)
	r := e.get("/proposals/"+p.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	effect := one(t, r.doc, "effect")
	wantContains(t, "facts", text(effect), "Paid", "¥199.00 CNY")
	var refundable *html.Node
	for _, c := range all(effect, "change") {
		if attr(c, "data-field") == "refundable_minor" {
			refundable = c
		}
	}
	if refundable == nil {
		t.Fatal("no refundable_minor row in the effect preview")
	}
	wantContains(t, "before", text(one(t, refundable, "change-before")), "¥199.00 CNY", "19900")
	wantContains(t, "after", text(one(t, refundable, "change-after")), "¥149.00 CNY", "14900")
	if got := attr(one(t, r.doc, "effect-digest"), "title"); got != p.EffectDigest || got == "" {
		t.Errorf("effect digest shown %q, want %q", got, p.EffectDigest)
	}
	if !strings.Contains(r.Body.String(), `name="effect" value="`+p.EffectDigest+`"`) {
		t.Error("the approve form does not carry the effect digest")
	}

	stale := "sha256:" + strings.Repeat("0", 64)
	r = e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {stale}})
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "not the one stored with this proposal", "Nothing was approved")
	e.wantDecisions(p.ID, 0)

	r = e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, r, http.StatusSeeOther)
	if got := e.wantDecisions(p.ID, 1); got.Decisions[0].EffectSeen != p.EffectDigest {
		t.Errorf("decision records effect %q, want %q", got.Decisions[0].EffectSeen, p.EffectDigest)
	}
}

// Text the business system wrote into the effect preview is shown like
// the agent's: a hidden code point becomes ⟨U+…⟩ and the page warns about
// it, so a reviewer does not approve a preview that reads otherwise
// elsewhere; a line break in a display value is escaped, not kept.
func TestEffectPreviewWarnsOfHiddenCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.store.Gorm().Exec("UPDATE demo_orders SET label = ? WHERE id = ?",
		"Order \u202E1001\u202C\nfor Alice", "ord_1001").Error; err != nil {
		t.Fatal(err)
	}
	p := e.refund("ord_1001", 5000)
	r := e.get("/proposals/"+p.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	facts := text(one(t, r.doc, "effect"))
	wantContains(t, "effect", facts, "Order ⟨U+202E⟩1001⟨U+202C⟩⟨U+000A⟩for Alice")
	if strings.ContainsAny(facts, "\u202E\u202C") {
		t.Errorf("the effect preview still holds a hidden code point: %q", facts)
	}
	wantContains(t, "warning", text(one(t, r.doc, "hidden-warning")), "direction control", "U+202E")
}
