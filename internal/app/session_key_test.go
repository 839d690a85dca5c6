package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/descope/virtualwebauthn"

	"github.com/countersign/countersign/models"
)

// passkeySignIn signs a fresh browser in to demo with k's passkey.
func passkeySignIn(t *testing.T, c *console, k *key) *browser {
	t.Helper()
	b, status, out := tryPasskeySignIn(t, c, k)
	if status != http.StatusOK {
		t.Fatalf("passkey finish: %d %s", status, out)
	}
	return b
}

// tryPasskeySignIn runs a passkey sign-in to demo with k in a fresh
// browser and returns the browser with the finish's answer.
func tryPasskeySignIn(t *testing.T, c *console, k *key) (*browser, int, []byte) {
	t.Helper()
	b := c.browser()
	b.csrf = inputValue(t, b.get("/login").doc, "csrf_token")
	status, out := b.postJSON("/login/passkey/begin", `{"org":"demo"}`)
	if status != http.StatusOK {
		t.Fatalf("passkey begin: %d %s", status, out)
	}
	o, err := virtualwebauthn.ParseAssertionOptions(string(out))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(k.signAny(o)), &m); err != nil {
		t.Fatal(err)
	}
	m["org"], m["next"] = "demo", "/history"
	body, _ := json.Marshal(m)
	status, out = b.postJSON("/login/passkey/finish", string(body))
	return b, status, out
}

// signedIn reports whether b's session still opens the history.
func signedIn(t *testing.T, b *browser) bool {
	t.Helper()
	page := b.get("/history")
	switch {
	case page.status == http.StatusOK:
		return true
	case page.status == http.StatusSeeOther && strings.HasPrefix(page.header.Get("Location"), "/login"):
		return false
	}
	t.Fatalf("history: status %d", page.status)
	return false
}

// TestSessionsEndWithTheirPasskey, through the console: removing a passkey
// ends the other sessions it began, not the one it is removed from;
// flagging a passkey (its counter went backwards during an approval) ends
// every session it began. Password sessions and the other key's sessions
// carry on, and the audit chain counts what ended.
func TestSessionsEndWithTheirPasskey(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	alice := mustUser(t, c, "alice")
	pw := c.alice()
	desk := newKey(t, pw)
	desk.auth.Options.UserHandle = []byte(alice.ID)
	desk.register("Desk passkey")
	travel := newKey(t, pw)
	travel.auth.Options.UserHandle = []byte(alice.ID)
	travel.register("Travel passkey", desk)

	deskA, deskB := passkeySignIn(t, c, desk), passkeySignIn(t, c, desk)
	travel.cred.Counter = 5
	travelA := passkeySignIn(t, c, travel)
	travel.cred.Counter = 6 // the virtual key does not count by itself
	travelB := passkeySignIn(t, c, travel)
	for name, b := range map[string]*browser{"desk A": deskA, "desk B": deskB, "travel A": travelA, "travel B": travelB} {
		if !signedIn(t, b) {
			t.Fatalf("%s: not signed in", name)
		}
	}

	// Remove the desk key from desk B, confirmed by the desk key itself.
	keys, err := c.app.StepUp.Keys(context.Background(), alice)
	if err != nil {
		t.Fatal(err)
	}
	var deskID string
	for _, k := range keys {
		if k.Name == "Desk passkey" {
			deskID = k.ID
		}
	}
	fromB := &key{t: t, b: deskB, rp: desk.rp, auth: desk.auth, cred: desk.cred}
	o := fromB.begin("/settings/keys/"+deskID+"/remove/begin", "{}")
	if status, out := deskB.postJSON("/settings/keys/"+deskID+"/remove/finish", fromB.sign(o)); status != http.StatusOK {
		t.Fatalf("removing the desk key: %d %s", status, out)
	}
	for name, want := range map[string]bool{"desk A": false, "desk B": true, "travel A": true, "password": true} {
		b := map[string]*browser{"desk A": deskA, "desk B": deskB, "travel A": travelA, "password": pw}[name]
		if got := signedIn(t, b); got != want {
			t.Errorf("after removing the desk key: %s signed in = %v, want %v", name, got, want)
		}
	}

	// The travel key presents a lower counter while approving from
	// travel A: flagged, and both its sessions end.
	p := c.propose("ord_2001", 50000)
	fromA := &key{t: t, b: travelA, rp: travel.rp, auth: travel.auth, cred: travel.cred}
	fromA.cred.Counter = 3
	status, out := travelA.postJSON(stepUpPath(p, "finish"), withEffect(t, fromA.assertionFor(p), p.EffectDigest))
	wantRefusal(t, "counter went backwards", status, out, http.StatusForbidden, models.EStepUpFailed, "went backwards")
	for name, want := range map[string]bool{"travel A": false, "travel B": false, "desk B": true, "password": true} {
		b := map[string]*browser{"travel A": travelA, "travel B": travelB, "desk B": deskB, "password": pw}[name]
		if got := signedIn(t, b); got != want {
			t.Errorf("after flagging the travel key: %s signed in = %v, want %v", name, got, want)
		}
	}

	entries, err := c.app.Store.AuditEntries(context.Background(), alice.TenantID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	ended := map[string]any{}
	for _, kind := range []string{"security_key.removed", "security_key.flagged"} {
		if data := auditData(t, entries, kind); len(data) == 1 {
			ended[kind] = data[0]["sessions_ended"]
		}
	}
	if ended["security_key.removed"] != float64(1) || ended["security_key.flagged"] != float64(2) {
		t.Errorf("sessions_ended = %v, want removed 1, flagged 2", ended)
	}
}
