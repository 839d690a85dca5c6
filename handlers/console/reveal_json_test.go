package console_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// A NUL in a value is one hidden character wherever it is shown: the
// machine value, JSON text where it is the escape \u0000, shows it as
// ⟨U+0000⟩ like the display value, as the warning says. An e-mail body's
// line breaks stay \n in its machine value and flag nothing.
func TestMachineValuesShowEscapedHiddenCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args, _ := json.Marshal(map[string]any{"order_id": "ord_1001", "amount_minor": 100, "currency": "CNY",
		"reason": "body\u0000nul? \\u0000 \u0007"})
	p := e.propose("refund_order", args, "")
	r := e.get("/proposals/"+p.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	f := field(t, r.doc, "reason")
	machine := text(one(t, f, "machine-value"))
	// The agent's literal backslash-u stays as written (\\u0000).
	if want := `"body⟨U+0000⟩nul? \\u0000 ⟨U+0007⟩"`; machine != want {
		t.Errorf("machine value = %s, want %s", machine, want)
	}
	wantContains(t, "display value", text(one(t, f, "display-value")), "body⟨U+0000⟩nul?")
	one(t, f, "hidden-chars")
	wantContains(t, "warning", text(one(t, r.doc, "hidden-warning")), "U+0000", "U+0007")

	email, _ := json.Marshal(map[string]any{"customer_id": "cus_001", "template": "apology", "subject": "Sorry",
		"body": "Dear Li Wei,\n\tyour parcel is late.", "send_at": nil})
	m := e.propose("send_customer_email", email, "")
	r = e.get("/proposals/"+m.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	body := field(t, r.doc, "body")
	if got := text(one(t, body, "machine-value")); got != `"Dear Li Wei,\n\tyour parcel is late."` {
		t.Errorf("the e-mail body's machine value = %s", got)
	}
	if len(all(r.doc, "hidden-warning")) != 0 || len(all(body, "hidden-chars")) != 0 {
		t.Error("an e-mail body's line breaks are flagged as hidden characters")
	}
	list := e.get("/", "alice")
	wantStatus(t, list, http.StatusOK)
	if n := len(all(list.doc, "row-hidden")); n != 1 {
		t.Errorf("%d pending rows warn of hidden characters, want 1 (the refund's)", n)
	}
	if strings.Contains(r.Body.String(), "\u0000") {
		t.Error("the page holds a raw NUL")
	}
}
