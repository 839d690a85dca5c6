package models_test

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
)

func TestSummaryIsOneLine(t *testing.T) {
	at := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	p := &models.Proposal{Tool: "refund_order", Tier: models.Tier{Name: "high"}, ExpiresAt: at.Add(90 * time.Second),
		Preview: []models.PreviewField{
			{Label: "Amount", Display: "¥199.00"},
			{Label: "Order", Display: "ord_1001 · Alice"},
			{Label: "Reason", Display: "line one\nline two see https://x.example/" + strings.Repeat("y", 80)},
			{Label: "Empty", Display: ""},
		}}
	got := p.Summary(at)
	want := "refund_order: Amount ¥199.00, Order ord_1001 · Alice, Reason line one line two see https[:]//x[.]example/" +
		strings.Repeat("y", 19) + "…" + " — tier high, 1m30s left"
	if got != want {
		t.Errorf("summary\n got %q\nwant %q", got, want)
	}
	if got := p.Summary(at.Add(90 * time.Second)); !strings.HasSuffix(got, "tier high, expired") {
		t.Errorf("at the expiry: %q", got)
	}
}

// Text the agent wrote makes no link in a notification, however it is
// dressed, and hides nothing from the reviewer.
func TestNotificationTextIsUnlinkableAndVisible(t *testing.T) {
	for in, want := range map[string]string{
		"Approve: www.cs-approve.example/p":  "Approve: www[.]cs-approve[.]example/p",
		"https:\u200b//e.x/a":                "https:⟨U+200B⟩//e[.]x/a",
		"see https://x.example/ok":           "see https[:]//x[.]example/ok",
		"mail bob@example.com now":           "mail bob@example[.]com now",
		"go to 10.0.0.1:8080":                "go to 10[.]0[.]0[.]1:8080",
		"ex\u3002ample\uff0ecom":             "ex[.]ample[.]com",
		"invoice\u202Efdp.exe":               "invoice⟨U+202E⟩fdp[.]exe",
		"red \x1b[31malert":                  "red ⟨U+001B⟩[31malert",
		"¥3,000.00 in 1.2.3, 3.5 kg":         "¥3,000.00 in 1.2.3, 3.5 kg",
		"line\nbreak\u2028and\ttab":          "line break and tab",
		"looks like ⟨U+202E⟩ but is not one": "looks like ⟨U+27E8⟩U+202E⟩ but is not one",
	} {
		if got := models.NotificationText(in, 80); got != want {
			t.Errorf("NotificationText(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

func TestStatusEvent(t *testing.T) {
	for st, want := range map[models.Status]models.EventType{
		models.StatusAwaitingConfirmation: "proposal.awaiting_confirmation",
		models.StatusConfirmed:            "proposal.confirmed",
		models.StatusExecuting:            "execution.executing",
		models.StatusFailedRetryable:      "execution.failed_retryable",
		models.StatusUnknown:              "execution.unknown",
	} {
		if got := models.StatusEvent(st); got != want {
			t.Errorf("StatusEvent(%s) = %s, want %s", st, got, want)
		}
	}
}
