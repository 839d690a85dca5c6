package app_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
)

// TestBrowserSecurityKeyApproval drives the security-key step-up in a real
// headless Chromium with the DevTools Protocol's virtual authenticator
// (CTAP2, user verification, automatic presence): the reviewer registers a
// key in /settings/keys, approves a high-risk refund with it, the agent
// receives a token whose amr says webauthn and executes it, and the history
// shows the evidence. Then, with the authenticator refusing user
// verification, an approval fails with a clear message and changes
// nothing. Last, the key signs the reviewer in as a passkey. The console is served at http://localhost:PORT: browsers allow
// WebAuthn on localhost without TLS, never on an IP address.
func TestBrowserSecurityKeyApproval(t *testing.T) {
	t.Parallel()
	j := newJourney(t)
	ctx, shot, step, text := j.ctx, j.shot, j.step, j.text
	base, creds := serveDemoOnLocalhost(t)
	agent := &agentClient{t: t, base: base, key: creds.AgentKey}

	// A virtual security key: CTAP2.1 over USB, with a PIN (user
	// verification) that succeeds, and a touch that happens by itself.
	if _, err := chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatalf("WebAuthn.enable: %v", err)
	}
	va, err := chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
		Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21,
			Transport: webauthn.AuthenticatorTransportUsb, HasResidentKey: true, HasUserVerification: true,
			IsUserVerified: true, AutomaticPresenceSimulation: true,
		}})
	if err != nil {
		t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}

	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)

	step("register a key",
		chromedp.Navigate(base+"/settings/keys"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=no-keys]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=key-name]`), "Desk YubiKey"),
		chromedp.Click(chromedp.CSS(`[data-testid=register-key]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=key-row]`)),
	)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid=wrong-site]').length`)); err != nil || n != 0 {
		t.Errorf("the keys page at localhost warns about the site (%d, %v)", n, err)
	}
	if got := text(`[data-testid=key-name-cell]`); got != "Desk YubiKey" {
		t.Errorf("key name = %q", got)
	}
	if got := text(`[data-testid=key-kind]`); !strings.Contains(got, "Security key") {
		t.Errorf("key kind = %q", got)
	}
	creds2, err := chromedp.Call(ctx, webauthn.GetCredentials, webauthn.GetCredentialsParams(va))
	if err != nil || len(creds2.Credentials) != 1 || creds2.Credentials[0].RpID != "localhost" {
		t.Fatalf("the virtual authenticator holds %+v (%v)", creds2, err)
	}
	shot("keys.png")

	// A high-risk refund (tier high: security key, one approver).
	refund := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_2001","amount_minor":50000,"currency":"CNY","reason":"Partial refund for a damaged item"}}`)
	polled := make(chan map[string]any, 1)
	go func() { polled <- agent.waitChange(refund.ID, refund.ETag) }()
	step("approve with the key",
		chromedp.Navigate(base+"/proposals/"+refund.ID),
		chromedp.WaitVisible(chromedp.CSS(`form[data-webauthn-approve] [data-testid=approve]`)),
	)
	if got := text(`[data-testid=approve]`); got != "Approve refund of ¥500.00 to ord_2001 with security key" {
		t.Errorf("approve button = %q", got)
	}
	// The security-key prompt names the consequence too.
	prompt, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('form[data-webauthn-approve]').dataset.prompt`))
	if err != nil || !strings.HasPrefix(prompt, "Approve refund of ¥500.00 to ord_2001") {
		t.Errorf("security-key prompt = %q (%v)", prompt, err)
	}
	step("approve with the key",
		chromedp.SendKeys(chromedp.CSS(`[data-testid=approve-comment]`), "Photos of the damage checked"),
		chromedp.Click(chromedp.CSS(`[data-testid=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=decided-note]`)),
	)
	if got := text(`[data-testid=decision]`); !strings.Contains(got, "password + security key") {
		t.Errorf("decision = %q", got)
	}
	if got := text(`[data-testid=decision-reason]`); got != "Photos of the damage checked" {
		t.Errorf("the approval's comment = %q", got)
	}
	var p map[string]any
	select {
	case p = <-polled:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's long-poll did not see the confirmation")
	}
	tok, _ := p["confirmation_token"].(string)
	if p["status"] != "confirmed" || tok == "" {
		t.Fatalf("after approval the agent sees status %v, token %q", p["status"], tok)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	var claims models.Claims
	if err := json.Unmarshal(payload, &claims); err != nil || !slices.Contains(claims.AMR, "webauthn") || len(claims.Approvers) != 1 {
		t.Errorf("token claims amr %v approvers %v (%v)", claims.AMR, claims.Approvers, err)
	}
	if exec := agent.execute(refund.ID, tok); exec["status"] != "succeeded" {
		t.Fatalf("execution: %v", exec)
	}

	step("history",
		chromedp.Navigate(base+"/history"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=evidence]`)),
	)
	ev := text(`[data-testid=evidence]`)
	for _, want := range []string{"Desk YubiKey", "the signature verifies", "http://localhost"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence %q does not show %q", ev, want)
		}
	}
	if got := text(`[data-testid=evidence-uv]`); got != "yes" {
		t.Errorf("user verified = %q", got)
	}
	shot("history-stepup.png")

	// The key no longer verifies its user: Chromium refuses the ceremony
	// and the page says why; nothing is approved.
	if _, err := chromedp.Call(ctx, webauthn.SetUserVerified, webauthn.SetUserVerifiedParams{
		AuthenticatorID: va.AuthenticatorID, IsUserVerified: false}); err != nil {
		t.Fatal(err)
	}
	second := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_2002","amount_minor":50000,"currency":"CNY","reason":"Damaged in transit"}}`)
	step("approve without user verification",
		chromedp.Navigate(base+"/proposals/"+second.ID),
		chromedp.WaitVisible(chromedp.CSS(`form[data-webauthn-approve] [data-testid=approve]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=stepup-error]`)),
	)
	msg := text(`[data-testid=stepup-error]`)
	if !strings.Contains(msg, "did not verify you (user verification is required)") || !strings.Contains(msg, "Nothing was approved") {
		t.Errorf("error message = %q", msg)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid=decided-note]').length`)); err != nil || n != 0 {
		t.Errorf("the page shows a decision (%d, %v)", n, err)
	}
	res, body := agent.do("GET", "/api/v1/proposals/"+second.ID, "", nil)
	if res.StatusCode != 200 || !strings.Contains(string(body), `"status":"awaiting_confirmation"`) {
		t.Errorf("the second proposal after the failed approval: %d %s", res.StatusCode, body)
	}
	shot("stepup-no-uv.png")

	// The key is also a passkey (a discoverable credential): with user
	// verification back, it signs alice in without her password.
	if _, err := chromedp.Call(ctx, webauthn.SetUserVerified, webauthn.SetUserVerifiedParams{
		AuthenticatorID: va.AuthenticatorID, IsUserVerified: true}); err != nil {
		t.Fatal(err)
	}
	// The answer carries the browser's zone, as the password form does.
	finish := make(chan []byte, 4)
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && strings.HasSuffix(e.Request.URL, "/login/passkey/finish") {
			var body []byte
			for _, p := range e.Request.PostDataEntries {
				body = append(body, p.Bytes...)
			}
			finish <- body
		}
	}); err != nil {
		t.Fatal(err)
	}
	step("sign out and in with the passkey",
		chromedp.Click(chromedp.CSS(`.who button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=passkey-form]`)),
		chromedp.SetValue(chromedp.CSS(`[data-testid=login-org]`), "demo"),
		chromedp.Click(chromedp.CSS(`[data-testid=passkey-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=whoami]`)),
	)
	if got := text(`[data-testid=whoami]`); !strings.Contains(got, creds.Reviewer) {
		t.Errorf("signed in with the passkey as %q", got)
	}
	select {
	case body := <-finish:
		var sent struct{ Zone string }
		if err := json.Unmarshal(body, &sent); err != nil {
			t.Fatalf("the passkey answer %q: %v", body, err)
		}
		if want := j.eval(`Intl.DateTimeFormat().resolvedOptions().timeZone`); sent.Zone == "" || sent.Zone != want {
			t.Errorf("the passkey answer carried the zone %q, want the browser's %q", sent.Zone, want)
		}
	default:
		t.Error("no passkey answer was seen")
	}
}

// serveDemoOnLocalhost is serveDemo with the console at
// http://localhost:PORT, where browsers allow WebAuthn without TLS; the
// relying party id defaults to localhost.
func serveDemoOnLocalhost(t *testing.T) (string, app.DemoCredentials) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	base := "http://localhost:" + port
	a, err := app.Open(ctx, app.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "c.db"), Addr: ln.Addr().String(),
		BaseURL: base, DefaultTenant: "demo", Logger: slog.New(slog.DiscardHandler), PollInterval: 100 * time.Millisecond,
		PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.StepUp.RPID(); got != "localhost" {
		t.Fatalf("RP ID = %q, want localhost", got)
	}
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return base, creds
}
