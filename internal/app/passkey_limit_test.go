package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"testing"

	"github.com/descope/virtualwebauthn"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/stepup"
)

// Passkey sign-ins are bounded per source address: each one begun counts
// until it succeeds, so an address can leave only so many unfinished (each
// stores a ceremony) for an organization before it is told when to come
// back, while other addresses, other organization names (made-up ones
// included), a browser that signed in before and a later window are not
// affected. A refused sign-in that
// names an account of the organization is recorded in its audit log, with
// why, at most as many times per account and window, however many
// addresses the refusals come from; a refusal that names nobody is not.
func TestPasskeySignInsAreBoundedAndRecorded(t *testing.T) {
	t.Parallel()
	c := openConsole(t, func(cfg *app.Config) {
		cfg.RPID, cfg.Origins = testRPID, []string{testOrigin}
		cfg.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
	})
	ctx := context.Background()
	alice := mustUser(t, c, "alice")
	k := newKey(t, c.alice())
	k.auth.Options.UserHandle = []byte(alice.ID)
	k.register("Phone passkey")

	var signedIn *browser // the last browser a passkey signed in
	begin := func(org, from string) (*browser, int, []byte) {
		t.Helper()
		b := c.browser()
		b.csrf = inputValue(t, b.get("/login").doc, "csrf_token")
		b.from = from
		status, out := b.postJSON("/login/passkey/begin", `{"org":"`+org+`"}`)
		return b, status, out
	}
	signIn := func(org, from string) (int, []byte) {
		t.Helper()
		b, status, out := begin(org, from)
		if status != http.StatusOK {
			t.Fatalf("begin from %s: %d %s", from, status, out)
		}
		o, err := virtualwebauthn.ParseAssertionOptions(string(out))
		if err != nil {
			t.Fatal(err)
		}
		status, out = b.postJSON("/login/passkey/finish", finishBody(t, org, k.signAny(o)))
		if status == http.StatusOK {
			signedIn = b
		}
		return status, out
	}

	// Sign-ins begun with a made-up organization count apart, for that
	// name, and are bounded the same way (the limit does not tell which
	// names exist): a flood of them does not use up demo's count.
	const addr = "203.0.113.7"
	for i := range stepup.DefaultPasskeySignIns {
		if _, status, out := begin("nowhere", addr); status != http.StatusOK {
			t.Fatalf("begin %d, unknown organization: %d %s", i+1, status, out)
		}
	}
	_, status, out := begin("nowhere", addr)
	wantRefusal(t, "one more for an unknown organization", status, out, http.StatusTooManyRequests, models.ERateLimited)
	// The address bound: 19 unfinished, one that succeeds gives its count
	// back, then the 20th unfinished fills the window.
	for i := range stepup.DefaultPasskeySignIns - 1 {
		if _, status, out := begin("demo", addr); status != http.StatusOK {
			t.Fatalf("begin %d: %d %s", i+1, status, out)
		}
	}
	if status, out := signIn("demo", addr); status != http.StatusOK {
		t.Fatalf("a passkey sign-in within the bound: %d %s", status, out)
	}
	if _, status, out := begin("demo", addr); status != http.StatusOK {
		t.Fatalf("the bound's last: %d %s", status, out)
	}
	_, status, out = begin("demo", addr)
	wantRefusal(t, "one more unfinished passkey sign-in", status, out, http.StatusTooManyRequests, models.ERateLimited, "password")
	_, status, out = begin(" demo ", addr)
	wantRefusal(t, "the same organization with spaces around it", status, out, http.StatusTooManyRequests, models.ERateLimited)
	if _, status, out := begin("demo", "203.0.113.8"); status != http.StatusOK {
		t.Fatalf("another address: %d %s", status, out)
	}
	// A browser that signed in before counts against itself, not the
	// address: the flood does not keep it out.
	// (A browser of its own with only the device cookie: its session ended.)
	known := c.browser()
	u, _ := url.Parse(c.srv.URL + "/login")
	device := ""
	for _, ck := range signedIn.jar.Cookies(u) {
		if ck.Name == "countersign_device" {
			device = ck.Value
		}
	}
	if device == "" {
		t.Fatal("the passkey sign-in left no remembered-device cookie")
	}
	known.jar.SetCookies(u, []*http.Cookie{{Name: "countersign_device", Value: device, Path: "/login"}})
	known.csrf = inputValue(t, known.get("/login").doc, "csrf_token")
	known.from = addr
	if status, out := known.postJSON("/login/passkey/begin", `{"org":"demo"}`); status != http.StatusOK {
		t.Fatalf("a browser that signed in before, from the flooded address: %d %s", status, out)
	}
	c.clock.Advance(stepup.DefaultPasskeyWindow)
	if _, status, out := begin("demo", addr); status != http.StatusOK {
		t.Fatalf("the next window: %d %s", status, out)
	}

	// Refusals: recorded for the account they name, with the reason.
	head, err := c.app.Store.Head(ctx, alice.TenantID)
	if err != nil {
		t.Fatal(err)
	}
	bob := c.user("demo", "bob", models.RoleReviewer, "bob-password-123")
	k.auth.Options.UserHandle = []byte(bob.ID)
	status, out = signIn("demo", "198.51.100.1")
	wantRefusal(t, "alice's passkey under bob's handle", status, out, http.StatusUnauthorized, models.EUnauthenticated)
	k.auth.Options.UserHandle = []byte(alice.ID)
	status, out = signIn("nowhere", "198.51.100.2")
	wantRefusal(t, "an unknown organization", status, out, http.StatusUnauthorized, models.EUnauthenticated)
	k.auth.Options.UserNotVerified = true
	for i := range stepup.DefaultPasskeySignIns + 5 {
		status, out = signIn("demo", fmt.Sprintf("198.51.100.%d", 10+i))
		wantRefusal(t, "no user verification", status, out, http.StatusForbidden, models.EStepUpFailed)
	}
	refusals := func() map[string]int {
		t.Helper()
		entries, err := c.app.Store.AuditEntries(ctx, alice.TenantID, head.Seq, 1000)
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, en := range entries {
			if en.Kind != models.AuditSignInFailed {
				continue
			}
			b, err := en.Decode()
			if err != nil {
				t.Fatal(err)
			}
			var d struct {
				UserID       string `json:"user_id"`
				Method       string `json:"method"`
				Reason       string `json:"reason"`
				CredentialID string `json:"credential_id"`
			}
			if err := json.Unmarshal(b.Data, &d); err != nil {
				t.Fatal(err)
			}
			if b.Actor != models.ActorAnonymous || d.Method != models.MethodPasskeySession || d.CredentialID == "" {
				t.Errorf("entry %d: actor %s, data %s", en.Seq, b.Actor, b.Data)
			}
			n[d.UserID+" "+d.Reason]++
		}
		return n
	}
	want := map[string]int{bob.ID + " unknown_key": 1, alice.ID + " assertion_failed": stepup.DefaultPasskeySignIns}
	if got := refusals(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("refusals recorded %v, want %v", got, want)
	}
	// A new window records again.
	c.clock.Advance(stepup.DefaultPasskeyWindow)
	status, out = signIn("demo", "198.51.100.200")
	wantRefusal(t, "no user verification, a window later", status, out, http.StatusForbidden, models.EStepUpFailed)
	want[alice.ID+" assertion_failed"]++
	if got := refusals(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("refusals recorded a window later %v, want %v", got, want)
	}
}

// finishBody is a passkey answer as the sign-in page's script posts it.
func finishBody(t *testing.T, org, resp string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(resp), &m); err != nil {
		t.Fatal(err)
	}
	m["org"], m["next"] = org, "/history"
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
