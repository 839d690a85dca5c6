package app_test

import (
	"testing"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
)

// TestBrowserKeysPageAtPhoneWidth: with a key registered, the security
// keys page reads at 360 px without scrolling sideways — each key's last
// use, status and its Rename and Remove within the screen.
func TestBrowserKeysPageAtPhoneWidth(t *testing.T) {
	t.Parallel()
	j := newJourney(t)
	base, creds := serveDemoOnLocalhost(t)
	if _, err := chromedp.Call(j.ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatalf("WebAuthn.enable: %v", err)
	}
	if _, err := chromedp.Call(j.ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
		Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21,
			Transport: webauthn.AuthenticatorTransportUsb, HasResidentKey: true, HasUserVerification: true,
			IsUserVerified: true, AutomaticPresenceSimulation: true,
		}}); err != nil {
		t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}
	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)
	j.step("register a key",
		chromedp.Navigate(base+"/settings/keys"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=no-keys]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=key-name]`), "Desk key with a name that is rather long indeed"),
		chromedp.Click(chromedp.CSS(`[data-testid=register-key]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=key-row]`)),
	)
	for _, s := range screens {
		j.step("keys at "+s.name, chromedp.EmulateViewport(s.width, s.height),
			chromedp.Navigate(base+"/settings/keys"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=key-row]`)))
		if got := j.outOfView(`[data-testid=key-name-cell]`, `[data-testid=key-last-used]`, `[data-testid=key-status]`,
			`details.rename summary`, `[data-testid=remove-key]`); got != "" {
			j.shot("keys-" + s.name + ".png")
			t.Errorf("keys at %s px: out of view: %s", s.name, got)
		}
	}
}
