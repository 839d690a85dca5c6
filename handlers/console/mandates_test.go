package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/handlers/console"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/static"
)

// A granted mandate's proposal is confirmed but never executed (no token
// is issued for it): its page and the history say the mandate was
// granted, not that an execution is still to come, and the page links to
// the mandate's row on the mandates page.
func TestGrantedMandateSaysGranted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pw, err := secret.NewPasswords(secret.PasswordParams{MemoryKiB: 8, Time: 1, Threads: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	md := console.NewMandates(e.svc, auth.New(auth.Config{Store: e.store, Clock: e.clock, Passwords: pw}), static.New(), e.clock)
	e.echo.GET("/mandates", md.Page)

	mp, _, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: models.MandateTerms{
		Tool: "refund_order", Tiers: []string{"low"}, ResourcePattern: "ord_1[0-9]{3}",
		Money:   &models.MandateMoney{Field: "amount_minor", Currency: "CNY", PerCallCap: 1000, Budget: 5000},
		MaxUses: 10, ExpiresAt: start.Add(2 * time.Hour), Reason: "sale refunds"}})
	if err != nil {
		t.Fatal(err)
	}
	granted := e.confirm(mp, e.alice)
	if granted.Status != models.StatusConfirmed || granted.MandateID == "" || granted.Token != nil {
		t.Fatalf("granted: status %s mandate %q token %v", granted.Status, granted.MandateID, granted.Token)
	}

	r := e.get("/proposals/"+mp.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	status := text(one(t, r.doc, "status"))
	wantContains(t, "status", status, "Mandate granted")
	if strings.Contains(status, "executed") {
		t.Errorf("status = %q, speaks of an execution", status)
	}
	wantContains(t, "decided note", text(one(t, r.doc, "decided-note")), "Granted", "Nothing is executed")
	note := one(t, r.doc, "mandate")
	wantContains(t, "mandate note", text(note), "Granted as standing mandate "+granted.MandateID)
	wantContains(t, "mandate note's class", attr(note, "class"), "alert-ok")
	link := attr(one(t, r.doc, "mandate-link"), "href")
	if want := "/mandates#mandate-" + granted.MandateID; link != want {
		t.Errorf("mandate link %q, want %q", link, want)
	}
	list := e.get("/mandates", "alice")
	wantStatus(t, list, http.StatusOK)
	if got := attr(one(t, list.doc, "mandate-row"), "id"); "/mandates#"+got != link {
		t.Errorf("the mandate's row has id %q; the proposal page links %q", got, link)
	}

	h := e.get("/history", "alice")
	wantStatus(t, h, http.StatusOK)
	wantContains(t, "history status", text(one(t, historyRow(t, h.doc, mp.ID), "status")), "Mandate granted")
}
