package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// A reviewer enrolled by the administrator who created the agent is told
// why the approval is refused; the page shows who enrolled each approver,
// and a voided approval says so.
func TestSeparationOfDutiesOnTheProposalPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agent, err := e.store.AdminCreateAgent(e.ctx, e.admin, "admins-bot", "", "sha256:admins-bot")
	if err != nil {
		t.Fatal(err)
	}
	dave, err := e.store.AdminCreateUser(e.ctx, e.admin, "dave", models.RoleReviewer, "x")
	if err != nil {
		t.Fatal(err)
	}
	e.signIn(models.Tenant{ID: dave.TenantID, Name: "demo"}, dave)
	p, _, err := e.svc.Propose(e.ctx, agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1003", 100)})
	if err != nil {
		t.Fatal(err)
	}
	r := e.post("/proposals/"+p.ID+"/approve", "dave", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "Separation of duties", "admin created or owns agent admins-bot",
		"enrolled by someone else", "Nothing was approved.")
	e.wantDecisions(p.ID, 0)

	// alice, enrolled from the command line, approves; the page says so.
	r = e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, r, http.StatusSeeOther)
	page := e.get("/proposals/"+p.ID, "alice")
	wantContains(t, "enrolment", text(one(t, page.doc, "enrolment")), "enrolled from the command line 2026-09-01")
	hist := e.get("/history", "alice")
	wantStatus(t, hist, http.StatusOK)
	wantContains(t, "history approvers", text(one(t, historyRow(t, hist.doc, p.ID), "approvers")),
		"alice (password) · enrolled from the command line 2026-09-01")

	// A quorum-2 approval by bob, voided when bob is disabled.
	q := e.refund("ord_2003", 300000)
	bob := e.sessions["bob"].User
	e.confirm(q, bob)
	if _, err := e.store.AdminSetPassword(e.ctx, e.admin, bob.ID, "y", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.AdminSetUserDisabled(e.ctx, e.admin, bob.ID, true, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	page = e.get("/proposals/"+q.ID, "alice")
	wantContains(t, "enrolment", text(one(t, page.doc, "enrolment")), "password reset by admin 2026-09-01")
	wantContains(t, "voided", text(one(t, page.doc, "voided")), "Voided", "does not count")
	wantContains(t, "quorum", text(one(t, page.doc, "quorum")), "0 of 2 approvals")
}
