package app_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/models"
)

// TestBrowserMandateGrantWithSecurityKey: an agent asks for a mandate
// covering the refund tool's high tier; in real Chromium with a virtual
// security key the reviewer grants it on its proposal page, which takes
// the key as the high tier does. A high-risk refund that fits is then
// confirmed without anyone, its token says amr ["mandate"], it executes,
// and the mandates page shows the spend.
func TestBrowserMandateGrantWithSecurityKey(t *testing.T) {
	t.Parallel()
	j := newJourney(t)
	ctx, step, text := j.ctx, j.step, j.text
	base, creds := serveDemoOnLocalhost(t)
	agent := &agentClient{t: t, base: base, key: creds.AgentKey}

	if _, err := chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		t.Fatalf("WebAuthn.enable: %v", err)
	}
	if _, err := chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
		Options: &webauthn.VirtualAuthenticatorOptions{
			Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21,
			Transport: webauthn.AuthenticatorTransportUsb, HasResidentKey: true, HasUserVerification: true,
			IsUserVerified: true, AutomaticPresenceSimulation: true,
		}}); err != nil {
		t.Fatalf("WebAuthn.addVirtualAuthenticator: %v", err)
	}
	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)
	step("register a key",
		chromedp.Navigate(base+"/settings/keys"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=no-keys]`)),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=key-name]`), "Desk key"),
		chromedp.Click(chromedp.CSS(`[data-testid=register-key]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=key-row]`)),
	)

	expires := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	res, body := agent.do("POST", "/api/v1/mandates", fmt.Sprintf(`{"terms":{"tool":"refund_order","tiers":["high"],
		"resource_pattern":"ord_2[0-9]{3}","money":{"field":"amount_minor","currency":"CNY","per_call_cap":50000,"budget":100000},
		"expires_at":%q,"reason":"damaged-goods refunds during the sale"}}`, expires), nil)
	if res.StatusCode != 201 {
		t.Fatalf("request mandate: %d %s", res.StatusCode, body)
	}
	var mp struct{ ID, Kind, MandateID string }
	json.Unmarshal(body, &mp)

	step("open the mandate proposal",
		chromedp.Navigate(base+"/proposals/"+mp.ID),
		chromedp.WaitVisible(chromedp.CSS(`form[data-webauthn-approve] [data-testid=approve]`)),
	)
	if got := text(`[data-testid=approve]`); got != "Approve with security key" {
		t.Errorf("approve button = %q", got)
	}
	if got := text(`h1`); !strings.Contains(got, "Standing mandate") {
		t.Errorf("title = %q", got)
	}
	step("grant with the key",
		chromedp.Click(chromedp.CSS(`[data-testid=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=decided-note]`)),
	)
	if got := text(`[data-testid=decision]`); !strings.Contains(got, "security key") {
		t.Errorf("decision = %q", got)
	}
	_, body = agent.do("GET", "/api/v1/proposals/"+mp.ID, "", nil)
	var granted struct {
		Status    string `json:"status"`
		MandateID string `json:"mandate_id"`
	}
	json.Unmarshal(body, &granted)
	if granted.Status != "confirmed" || granted.MandateID == "" {
		t.Fatalf("after the grant: %s", body)
	}

	// A high-risk refund that fits: confirmed at once, by the mandate.
	res, body = agent.do("POST", "/api/v1/proposals",
		`{"tool":"refund_order","arguments":{"order_id":"ord_2001","amount_minor":30000,"currency":"CNY","reason":"Damaged"}}`, nil)
	var p struct {
		ID        string `json:"id"`
		Status    string `json:"status"`
		RiskTier  string `json:"risk_tier"`
		MandateID string `json:"mandate_id"`
		Token     string `json:"confirmation_token"`
	}
	json.Unmarshal(body, &p)
	if res.StatusCode != 201 || p.Status != "confirmed" || p.RiskTier != "high" || p.MandateID != granted.MandateID || p.Token == "" {
		t.Fatalf("fitting refund: %d %s", res.StatusCode, body)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(p.Token, ".")[1])
	var claims models.Claims
	if err := json.Unmarshal(payload, &claims); err != nil || !slices.Equal(claims.AMR, []string{"mandate"}) || claims.MandateID != granted.MandateID {
		t.Errorf("token claims amr %v mandate %q (%v)", claims.AMR, claims.MandateID, err)
	}
	if exec := agent.execute(p.ID, p.Token); exec["status"] != "succeeded" {
		t.Fatalf("execution: %v", exec)
	}

	step("mandates page",
		chromedp.Navigate(base+"/mandates"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=mandate-row]`)),
	)
	if got := text(`[data-testid=mandate-spent]`); got != "¥300.00 / ¥1,000.00" {
		t.Errorf("spent = %q", got)
	}
	j.shot("mandates.png")
}
