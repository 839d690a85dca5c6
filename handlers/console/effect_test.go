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
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "describes what this write would do differently", "Nothing was approved")
	e.wantDecisions(p.ID, 0)

	r = e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, r, http.StatusSeeOther)
	if got := e.wantDecisions(p.ID, 1); got.Decisions[0].EffectSeen != p.EffectDigest {
		t.Errorf("decision records effect %q, want %q", got.Decisions[0].EffectSeen, p.EffectDigest)
	}
}
