package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/countersign/countersign/models"
)

// historyRow returns the history row of proposal id.
func historyRow(t *testing.T, doc *html.Node, id string) *html.Node {
	t.Helper()
	for _, n := range all(doc, "history-row") {
		if attr(n, "data-id") == id {
			return n
		}
	}
	t.Fatalf("no history row for %s", id)
	return nil
}

func TestHistoryShowsReceipt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.confirm(e.refund("ord_1001", 19900), e.alice)
	exec, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	if err != nil {
		t.Fatal(err)
	}
	if exec.Status != models.StatusSucceeded {
		t.Fatalf("execution %s", exec.Status)
	}
	e.refund("ord_1002", 19900) // pending: not history

	r := e.get("/history", "bob")
	wantStatus(t, r, http.StatusOK)
	if got := len(all(r.doc, "history-row")); got != 1 {
		t.Fatalf("%d history rows, want 1 (pending proposals are not history)", got)
	}
	row := historyRow(t, r.doc, p.ID)
	wantContains(t, "status", text(one(t, row, "status")), "Succeeded")
	wantContains(t, "approvers", text(one(t, row, "approvers")), "alice")
	rc := one(t, row, "receipt")
	if got := text(one(t, rc, "execution-id")); got != exec.ID {
		t.Errorf("execution id = %q, want %q", got, exec.ID)
	}
	if got := text(one(t, rc, "request-key")); got != p.RequestKey {
		t.Errorf("request key = %q, want %q", got, p.RequestKey)
	}
	if got := text(one(t, rc, "provider-ref")); got == "" || got != exec.ProviderRef {
		t.Errorf("provider ref = %q, want %q", got, exec.ProviderRef)
	}
	if got := text(one(t, rc, "completed-at")); !strings.Contains(got, "2026-09-01 06:20:00 UTC") {
		t.Errorf("completed at = %q", got)
	}
	for _, id := range []string{"digest-requested", "digest-approved", "digest-executed"} {
		if got := attr(one(t, one(t, rc, id), "digest"), "title"); got != p.ArgsDigest {
			t.Errorf("%s = %q, want %q", id, got, p.ArgsDigest)
		}
	}
	wantContains(t, "digest check", text(one(t, rc, "digest-check")), "identical")
	if len(all(row, "revoke")) != 0 {
		t.Error("revoke offered for an executed proposal")
	}

	// The proposal page shows the same receipt.
	page := e.get("/proposals/"+p.ID, "bob")
	if got := text(one(t, one(t, page.doc, "receipt"), "execution-id")); got != exec.ID {
		t.Errorf("proposal page execution id = %q", got)
	}
}

func TestHistoryFilterByStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	declined := e.refund("ord_1001", 19900)
	wantStatus(t, e.post("/proposals/"+declined.ID+"/decline", "alice",
		url.Values{"digest": {declined.ArgsDigest}, "reason": {"duplicate"}}), http.StatusSeeOther)
	confirmed := e.confirm(e.refund("ord_1002", 19900), e.alice)

	all2 := e.get("/history", "alice")
	if got := len(all(all2.doc, "history-row")); got != 2 {
		t.Fatalf("%d rows, want 2", got)
	}
	r := e.get("/history?status=declined", "alice")
	wantStatus(t, r, http.StatusOK)
	rows := all(r.doc, "history-row")
	if len(rows) != 1 || attr(rows[0], "data-id") != declined.ID {
		t.Fatalf("status=declined: %d rows", len(rows))
	}
	wantContains(t, "decliner", text(one(t, rows[0], "decliner")), "alice", "duplicate")
	wantContains(t, "status", text(one(t, rows[0], "status")), "Declined")

	r = e.get("/history?status=confirmed", "alice")
	rows = all(r.doc, "history-row")
	if len(rows) != 1 || attr(rows[0], "data-id") != confirmed.ID {
		t.Fatalf("status=confirmed: %d rows", len(rows))
	}
	r = e.get("/history?status=succeeded", "alice")
	if got := len(all(r.doc, "history-row")); got != 0 {
		t.Errorf("status=succeeded: %d rows, want 0", got)
	}
	one(t, r.doc, "empty-state")

	wantStatus(t, e.get("/history?status=awaiting_confirmation", "alice"), http.StatusBadRequest)
	wantStatus(t, e.get("/history?status=bogus", "alice"), http.StatusBadRequest)
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.confirm(e.refund("ord_1001", 19900), e.alice)

	// A reviewer sees no revoke button, and posting is refused.
	if len(all(e.get("/history", "alice").doc, "revoke")) != 0 {
		t.Error("revoke offered to a reviewer")
	}
	r := e.post("/proposals/"+p.ID+"/revoke", "alice", url.Values{"return": {"history"}})
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "administrator", "Nothing was revoked")
	if got := e.reload(p.ID); got.Status != models.StatusConfirmed || got.Token.Status != models.TokenIssued {
		t.Fatalf("after a reviewer's revoke: status %s, token %s", got.Status, got.Token.Status)
	}

	// An administrator revokes from the history.
	hist := e.get("/history", "admin")
	one(t, historyRow(t, hist.doc, p.ID), "revoke")
	r = e.post("/proposals/"+p.ID+"/revoke", "admin", url.Values{"return": {"history"}})
	wantStatus(t, r, http.StatusSeeOther)
	if got := r.Header().Get("Location"); got != "/history" {
		t.Errorf("Location = %q, want /history", got)
	}
	got := e.reload(p.ID)
	if got.Status != models.StatusRevoked || got.Token.Status != models.TokenRevoked {
		t.Fatalf("after revoke: status %s, token %s", got.Status, got.Token.Status)
	}
	row := historyRow(t, e.get("/history", "admin").doc, p.ID)
	wantContains(t, "status", text(one(t, row, "status")), "Revoked")
	if len(all(row, "revoke")) != 0 {
		t.Error("revoke still offered")
	}
	// The token can no longer be redeemed.
	if _, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); !models.IsCode(err, models.ERevoked) {
		t.Errorf("execute after revoke: %v, want revoked", err)
	}

	// Revoking twice is refused with the reason.
	r = e.post("/proposals/"+p.ID+"/revoke", "admin", nil)
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "Only a confirmed, unused confirmation", "is revoked", "Nothing was revoked")
}
