package console_test

import (
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
)

// A reviewer edits a proposal from its page: the browser goes to the new
// version, which shows the edit (who, why, what changed), does not offer
// the editor to approve it (saying why) and refuses the editor's own
// approval; the original shows what replaced it.
func TestEditProposalFromItsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_2001", 10000)
	r := e.get("/proposals/"+p.ID, "bob")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, "edit form", text(one(t, r.doc, "edit-arguments")), `"amount_minor": 10000`)

	form := url.Values{"csrf_token": {"t"}, "digest": {p.ArgsDigest}, "reason": {"three items came back"},
		"arguments": {string(refundArgs("ord_2001", 30000))}}
	r = e.post("/proposals/"+p.ID+"/edit", "bob", form)
	wantStatus(t, r, http.StatusSeeOther)
	loc := r.Header().Get("Location")
	if !strings.HasPrefix(loc, "/proposals/prop_") || loc == "/proposals/"+p.ID {
		t.Fatalf("redirect to %q", loc)
	}
	revID := strings.TrimPrefix(loc, "/proposals/")
	rev, err := e.svc.Get(e.ctx, p.TenantID, revID)
	if err != nil {
		t.Fatal(err)
	}
	if rev.Tier.Confirmation != models.ConfirmWebAuthn {
		t.Fatalf("edited tier %+v, want the security-key tier", rev.Tier)
	}

	r = e.get(loc, "alice")
	wantStatus(t, r, http.StatusOK)
	sup := one(t, r.doc, "supersedes")
	wantContains(t, "supersedes", text(sup), "bob", p.ID, "three items came back", "/amount_minor", "10000", "30000")
	wantContains(t, "tier", text(one(t, r.doc, "tier")), "high")

	// The editor is not offered Approve on the edit, and is told why; the
	// server refuses it all the same.
	r = e.get(loc, "bob")
	wantStatus(t, r, http.StatusOK)
	if b := one(t, r.doc, "approve"); !hasAttr(b, "disabled") || hasAttr(b.Parent, "data-webauthn-approve") {
		t.Error("the editor is offered to approve their own edit")
	}
	wantContains(t, "approve blocked", text(one(t, r.doc, "approve-blocked")), "You edited this proposal", "another reviewer must approve it")
	if len(all(r.doc, "decline")) != 1 {
		t.Error("the editor is not offered to decline their own edit")
	}
	r = e.post(loc+"/approve", "bob", url.Values{"digest": {rev.ArgsDigest}, "effect": {rev.EffectDigest}, "csrf_token": {"t"}})
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "You edited this proposal", "Nothing was approved")

	r = e.get("/proposals/"+p.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, "superseded", text(one(t, r.doc, "superseded-by")), revID, "three items came back")
	if len(all(r.doc, "approve")) != 0 || len(all(r.doc, "edit-arguments")) != 0 {
		t.Error("a superseded proposal still offers to approve or edit it")
	}
}

// Arguments the tool refuses come back in the form, as typed, with 422;
// the proposal is not touched.
func TestEditRefusedKeepsTheForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 5000)
	bad := `{"order_id":"ord_1001","amount_minor":-3,"currency":"CNY","reason":"x"}`
	r := e.post("/proposals/"+p.ID+"/edit", "bob", url.Values{"csrf_token": {"t"}, "digest": {p.ArgsDigest},
		"reason": {"negative"}, "arguments": {bad}})
	wantStatus(t, r, http.StatusUnprocessableEntity)
	wantContains(t, "error", text(one(t, r.doc, "edit-error")), "Nothing was edited", "/amount_minor")
	if got := text(one(t, r.doc, "edit-arguments")); got != bad {
		t.Errorf("typed arguments %q not kept", got)
	}
	got, _ := e.svc.Get(e.ctx, p.TenantID, p.ID)
	if got.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("status %s after a refused edit", got.Status)
	}
	// A stale page (another digest) is refused as an alert.
	r = e.post("/proposals/"+p.ID+"/edit", "bob", url.Values{"csrf_token": {"t"}, "digest": {"sha256:00"},
		"reason": {"stale"}, "arguments": {string(refundArgs("ord_1001", 4000))}})
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "Nothing was edited")
}

// The proposal page shows, per reviewer group the tier requires, how many
// approved and who.
func TestProposalPageShowsGroupProgress(t *testing.T) {
	t.Parallel()
	e := newEnvRegistry(t, lowRequires(t, "[{group: finance, count: 1}, {group: security, count: 1}]"))
	cli := store.GroupActor{TenantID: e.alice.TenantID}
	for g, member := range map[string]string{"finance": "alice", "security": "bob"} {
		if _, err := e.store.CreateGroup(e.ctx, cli, g, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.SetGroupMember(e.ctx, cli, g, member, true, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	p := e.refund("ord_1001", 5000)
	e.confirm(p, e.alice)
	r := e.get("/proposals/"+p.ID, "bob")
	wantStatus(t, r, http.StatusOK)
	wantContains(t, "quorum", text(one(t, r.doc, "quorum")), "1 of 2 approvals")
	rows := all(r.doc, "factor")
	if len(rows) != 2 {
		t.Fatalf("%d factor rows", len(rows))
	}
	wantContains(t, "finance", text(rows[0]), "1 of 1 from group finance", "alice")
	wantContains(t, "security", text(rows[1]), "0 of 1 from group security")
	if !hasAttr(rows[0], "data-met") || hasAttr(rows[1], "data-met") {
		t.Error("data-met marks the wrong factors")
	}

	// Two approvals, quorum reached, a factor still open: the count does
	// not read as complete, and the approver is told what it waits for.
	carol := e.newUser(e.alice.TenantID, "carol", models.RoleReviewer)
	e.confirm(p, carol)
	r = e.get("/proposals/"+p.ID, "alice")
	q := text(one(t, r.doc, "quorum"))
	wantContains(t, "quorum", q, "2 of 2 approvals", "still needs 1 from group security")
	if strings.Contains(q, "complete") {
		t.Errorf("quorum %q reads as complete", q)
	}
	wantContains(t, "note", text(one(t, r.doc, "decided-note")), "1 more approval: 1 from group security")
}

// A proposal a membership change made with the command line completed
// waits for a server's background pass; its page says so, and then shows
// it confirmed.
func TestProposalPageSaysAQueuedConfirmationWaits(t *testing.T) {
	t.Parallel()
	e := newEnvRegistry(t, lowRequires(t, "[{group: finance, count: 1}]"))
	cli := store.GroupActor{TenantID: e.alice.TenantID}
	if _, err := e.store.CreateGroup(e.ctx, cli, "finance", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	p := e.refund("ord_1001", 5000)
	e.confirm(p, e.alice)
	ch, err := e.store.SetGroupMember(e.ctx, cli, "finance", "alice", true, e.clock.Now())
	if err != nil || len(ch.Queued) != 1 {
		t.Fatalf("change %+v, %v", ch, err)
	}
	r := e.get("/proposals/"+p.ID, "alice")
	wantContains(t, "quorum", text(one(t, r.doc, "quorum")), "1 of 1 approval — complete")
	wantContains(t, "note", text(one(t, r.doc, "decided-note")), "complete since a change of group membership", "next try")
	if _, err := e.svc.Reconsider(e.ctx); err != nil {
		t.Fatal(err)
	}
	r = e.get("/proposals/"+p.ID, "alice")
	if got := e.reload(p.ID); got.Status != models.StatusConfirmed {
		t.Fatalf("after the background pass: %s", got.Status)
	}
	if strings.Contains(text(one(t, r.doc, "decided-note")), "change of group membership") {
		t.Errorf("a confirmed proposal still says it waits")
	}
}

// lowRequires is the demo registry with refund_order's low tier requiring
// the approver groups of require (a YAML list of factors).
func lowRequires(t *testing.T, require string) *registry.Registry {
	t.Helper()
	src, err := os.ReadFile("../../models/registry/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	old := "      - tier: low\n        confirmation: click\n"
	if !strings.Contains(string(src), old) {
		t.Fatal("demo registry changed; update the test")
	}
	reg, err := registry.Parse([]byte(strings.Replace(string(src), old, old+"        require: "+require+"\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}
