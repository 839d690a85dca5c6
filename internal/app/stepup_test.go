package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/descope/virtualwebauthn"
	gowebauthn "github.com/go-webauthn/webauthn/protocol"
	"golang.org/x/net/html"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/writes"
)

// These tests run security-key registrations and step-up approvals
// through the fully built server with a software authenticator
// (virtualwebauthn) standing in for the browser's navigator.credentials:
// the same JSON goes over the same endpoints as from static/js/webauthn.js.

const (
	testRPID   = "countersign.test"
	testOrigin = "https://countersign.test"
)

func stepUpConsole(t *testing.T) *console {
	return openConsole(t, func(cfg *app.Config) {
		cfg.RPID, cfg.Origins = testRPID, []string{testOrigin}
	})
}

// postJSON posts body as a script on a console page does: JSON, the CSRF
// token in its header.
func (b *browser) postJSON(path string, body string) (int, []byte) {
	b.c.t.Helper()
	req, err := http.NewRequest("POST", b.c.srv.URL+path, strings.NewReader(body))
	if err != nil {
		b.c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-CSRF-Token", b.csrf)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if b.from != "" {
		req.Header.Set("X-Forwarded-For", b.from)
	}
	res, err := b.client.Do(req)
	if err != nil {
		b.c.t.Fatal(err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		b.c.t.Fatal(err)
	}
	return res.StatusCode, out
}

// jsonError is a refusal's code and message.
func jsonError(t *testing.T, body []byte) (models.Code, string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    models.Code `json:"code"`
			Message string      `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("not a JSON error: %s", body)
	}
	return e.Error.Code, e.Error.Message
}

// wantRefusal checks a JSON refusal's status, code and words.
func wantRefusal(t *testing.T, what string, status int, body []byte, wantStatus int, wantCode models.Code, words ...string) {
	t.Helper()
	code, msg := jsonError(t, body)
	if status != wantStatus || code != wantCode {
		t.Fatalf("%s: %d %s %q, want %d %s", what, status, code, msg, wantStatus, wantCode)
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: message %q does not say %q", what, msg, w)
		}
	}
}

// key is a reviewer's browser with a software security key.
type key struct {
	t    *testing.T
	b    *browser
	rp   virtualwebauthn.RelyingParty
	auth virtualwebauthn.Authenticator
	cred virtualwebauthn.Credential
	// attest, when set, changes the registration answer before it is sent.
	attest func(body map[string]any)
}

func newKey(t *testing.T, b *browser) *key {
	return &key{t: t, b: b,
		rp:   virtualwebauthn.RelyingParty{ID: testRPID, Name: "countersign", Origin: testOrigin},
		auth: virtualwebauthn.NewAuthenticator(),
		cred: webauthntest.NewCredential()}
}

// register runs the registration ceremony on /settings/keys; confirm is
// one of the reviewer's registered keys, which must prove possession first
// when there is one.
func (k *key) register(name string, confirm ...*key) {
	k.t.Helper()
	status, out := k.tryRegister(name, confirm...)
	if status != http.StatusOK || !strings.Contains(string(out), `"redirect":"/settings/keys?notice=added"`) {
		k.t.Fatalf("register finish: %d %s", status, out)
	}
	k.auth.AddCredential(k.cred)
}

// tryRegister is register up to the server's answer to the key's
// attestation, which it returns.
func (k *key) tryRegister(name string, confirm ...*key) (int, []byte) {
	k.t.Helper()
	status, opts := k.b.postJSON("/settings/keys/register/begin", "{}")
	if status != http.StatusOK {
		k.t.Fatalf("register begin: %d %s", status, opts)
	}
	var first struct {
		Confirm json.RawMessage `json:"confirm"`
	}
	json.Unmarshal(opts, &first)
	if (first.Confirm != nil) != (len(confirm) > 0) {
		k.t.Fatalf("register begin asked for a confirmation: %v, want %v (%s)", first.Confirm != nil, len(confirm) > 0, opts)
	}
	if len(confirm) > 0 {
		o, err := virtualwebauthn.ParseAssertionOptions(string(first.Confirm))
		if err != nil {
			k.t.Fatal(err)
		}
		status, opts = k.b.postJSON("/settings/keys/register/begin", `{"confirm":`+confirm[0].sign(o)+`}`)
		if status != http.StatusOK {
			k.t.Fatalf("register begin with a confirmation: %d %s", status, opts)
		}
	}
	ao, err := virtualwebauthn.ParseAttestationOptions(string(opts))
	if err != nil {
		k.t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(virtualwebauthn.CreateAttestationResponse(k.rp, k.auth, k.cred, *ao)), &body); err != nil {
		k.t.Fatal(err)
	}
	body["name"] = name
	if k.attest != nil {
		k.attest(body)
	}
	raw, _ := json.Marshal(body)
	return k.b.postJSON("/settings/keys/register/finish", string(raw))
}

// begin starts a ceremony at path and returns its request options.
func (k *key) begin(path, body string) *virtualwebauthn.AssertionOptions {
	k.t.Helper()
	status, opts := k.b.postJSON(path, body)
	if status != http.StatusOK {
		k.t.Fatalf("begin %s: %d %s", path, status, opts)
	}
	o, err := virtualwebauthn.ParseAssertionOptions(string(opts))
	if err != nil {
		k.t.Fatal(err)
	}
	return o
}

// sign answers request options as the authenticator does now.
func (k *key) sign(o *virtualwebauthn.AssertionOptions) string {
	k.t.Helper()
	if !k.cred.IsAllowedForAssertion(*o) {
		k.t.Fatalf("the options do not allow this key: %v", o.AllowCredentials)
	}
	return virtualwebauthn.CreateAssertionResponse(k.rp, k.auth, k.cred, *o)
}

func stepUpPath(p *models.Proposal, step string) string {
	return "/proposals/" + p.ID + "/stepup/" + step
}

func digestBody(p *models.Proposal) string { return `{"digest":"` + p.ArgsDigest + `"}` }

// assertionFor begins a step-up approval of p and signs it.
func (k *key) assertionFor(p *models.Proposal) string {
	k.t.Helper()
	return k.sign(k.begin(stepUpPath(p, "begin"), digestBody(p)))
}

// approve runs a whole step-up approval of p and checks it succeeded.
func (k *key) approve(p *models.Proposal) {
	k.t.Helper()
	status, out := k.b.postJSON(stepUpPath(p, "finish"), withEffect(k.t, k.assertionFor(p), p.EffectDigest))
	if status != http.StatusOK || !strings.Contains(string(out), `"redirect":"/proposals/`+p.ID+`"`) {
		k.t.Fatalf("step-up approve: %d %s", status, out)
	}
}

// signedIn signs a user in and returns the browser with a key.
func (c *console) reviewerWithKey(name, password, keyName string) *key {
	c.t.Helper()
	b := c.browser()
	b.mustLogin("demo", name, password)
	k := newKey(c.t, b)
	k.register(keyName)
	return k
}

func claimsOf(t *testing.T, p *models.Proposal) models.Claims {
	t.Helper()
	if p.Token == nil {
		t.Fatalf("proposal %s has no token (status %s)", p.ID, p.Status)
	}
	parts := strings.Split(p.Token.Compact, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c models.Claims
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRegisterAKeyAndApproveWithIt(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	b := c.alice()
	p := c.propose("ord_2001", 50000) // tier high: webauthn
	if p.Tier.Confirmation != models.ConfirmWebAuthn || p.Tier.Quorum != 1 {
		t.Fatalf("tier %+v", p.Tier)
	}

	// Without a key, Approve is off and says where to get one.
	page := b.get("/proposals/" + p.ID)
	approve := find(page.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "approve" })
	if approve == nil || !hasAttr(approve, "disabled") || textOf(approve) != "Approve refund of ¥500.00 to ord_2001 with security key" {
		t.Fatalf("approve button without a key: %v", textOf(approve))
	}
	if link := find(page.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "register-key-link" }); link == nil || attr(link, "href") != "/settings/keys" {
		t.Error("no link to register a key")
	}
	k := newKey(t, b)
	status, out := b.postJSON(stepUpPath(p, "begin"), digestBody(p))
	wantRefusal(t, "begin without a key", status, out, http.StatusForbidden, models.EStepUpRequired, "Register one")

	// Registration.
	page = b.get("/settings/keys")
	wantStatus(t, "keys page", page, http.StatusOK)
	if testid(page.doc, "no-keys") == "" {
		t.Error("the empty keys page does not say there is no key")
	}
	// This test browser is at 127.0.0.1, not at the relying party: the
	// page says where keys work.
	wantContains(t, "wrong site", testid(page.doc, "wrong-site"), "bound to countersign.test", testOrigin)
	k.register("Blue YubiKey")
	page = b.get("/settings/keys?notice=added")
	if got := testid(page.doc, "key-name-cell"); got != "Blue YubiKey" {
		t.Errorf("key name = %q", got)
	}
	if got := testid(page.doc, "key-last-used"); got != "never" {
		t.Errorf("last used = %q", got)
	}
	if !strings.Contains(testid(page.doc, "keys-notice"), "registered") {
		t.Errorf("notice = %q", testid(page.doc, "keys-notice"))
	}
	keys, err := c.app.StepUp.Keys(context.Background(), mustUser(t, c, "alice"))
	if err != nil || len(keys) != 1 {
		t.Fatalf("stored keys: %v %v", keys, err)
	}
	if sk := keys[0]; !sk.Flags.UserVerified || !sk.Flags.UserPresent || sk.AttestationFormat != "packed" ||
		len(sk.PublicKey) == 0 || len(sk.AAGUID) != 16 || !bytes.Equal(sk.CredentialID, k.cred.ID) {
		t.Errorf("stored key %+v", sk)
	}

	// The proposal page now offers the security-key approval.
	page = b.get("/proposals/" + p.ID)
	form := find(page.doc, func(n *html.Node) bool { return hasAttr(n, "data-webauthn-approve") })
	if form == nil || attr(form, "data-begin") != stepUpPath(p, "begin") || attr(form, "data-finish") != stepUpPath(p, "finish") {
		t.Fatal("no security-key approve form")
	}
	if approve := find(page.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "approve" }); hasAttr(approve, "disabled") {
		t.Error("Approve still disabled with a key")
	}
	wantContains(t, "quorum", testid(page.doc, "quorum"), "0 of 1 approval with a security key")
	// Without the script, the form posts a plain approval: refused, saying why.
	plain := b.postForm("/proposals/"+p.ID+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, "plain approve on a security-key tier", plain, http.StatusForbidden)
	wantContains(t, "alert", testid(plain.doc, "alert"), "with security key", "Nothing was approved")

	// The options' challenge is bound to the proposal: a 32-byte hash,
	// user verification required, only alice's key allowed.
	status, raw := b.postJSON(stepUpPath(p, "begin"), digestBody(p))
	if status != http.StatusOK {
		t.Fatalf("begin: %d %s", status, raw)
	}
	var opts struct {
		PublicKey struct {
			Challenge        string                `json:"challenge"`
			UserVerification string                `json:"userVerification"`
			RPID             string                `json:"rpId"`
			AllowCredentials []struct{ ID string } `json:"allowCredentials"`
		} `json:"publicKey"`
	}
	if err := json.Unmarshal(raw, &opts); err != nil {
		t.Fatal(err)
	}
	if ch, _ := base64.RawURLEncoding.DecodeString(opts.PublicKey.Challenge); len(ch) != 32 ||
		opts.PublicKey.UserVerification != "required" || opts.PublicKey.RPID != testRPID || len(opts.PublicKey.AllowCredentials) != 1 {
		t.Errorf("request options %s", raw)
	}
	o, err := virtualwebauthn.ParseAssertionOptions(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	status, out = b.postJSON(stepUpPath(p, "finish"), withEffect(t, k.sign(o), p.EffectDigest))
	if status != http.StatusOK {
		t.Fatalf("finish: %d %s", status, out)
	}

	// Confirmed; the token carries alice and amr webauthn; the evidence is
	// the raw assertion and re-verifies offline.
	got := c.reloadProposal(p.ID)
	if got.Status != models.StatusConfirmed {
		t.Fatalf("status %s", got.Status)
	}
	cl := claimsOf(t, got)
	if !slices.Equal(cl.AMR, []string{"pwd", "webauthn"}) || len(cl.Approvers) != 1 || cl.Approvers[0] != mustUser(t, c, "alice").ID {
		t.Errorf("claims amr %v approvers %v", cl.AMR, cl.Approvers)
	}
	d := got.Approvals()[0]
	if !slices.Equal(d.AMR, []string{"pwd", "webauthn"}) {
		t.Errorf("decision amr %v", d.AMR)
	}
	ev, err := stepup.ParseEvidence(d.Evidence)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Challenge != opts.PublicKey.Challenge || ev.CredentialID != base64.RawURLEncoding.EncodeToString(k.cred.ID) ||
		ev.RPID != testRPID || ev.Origin != testOrigin || !ev.UserVerified || ev.KeyName != "Blue YubiKey" ||
		ev.ProposalID != p.ID || ev.ArgsDigest != p.ArgsDigest {
		t.Errorf("evidence %+v", ev)
	}
	if err := stepup.VerifyEvidence(got, d.Evidence); err != nil {
		t.Errorf("the stored evidence does not verify: %v", err)
	}
	tampered := *got
	tampered.ArgsDigest = c.propose("ord_2002", 50001).ArgsDigest
	if err := stepup.VerifyEvidence(&tampered, d.Evidence); !models.IsCode(err, models.EArgsMismatch) {
		t.Errorf("evidence against a tampered digest: %v", err)
	}

	// History shows the evidence, checked.
	page = b.get("/history")
	wantContains(t, "evidence", testid(page.doc, "evidence"), "Blue YubiKey", ev.Challenge, "the signature verifies")
	wantContains(t, "approvers", testid(page.doc, "approvers"), "alice (password + security key)")
	page = b.get("/settings/keys")
	if got := testid(page.doc, "key-last-used"); got == "never" {
		t.Error("last used not updated")
	}
}

func wantContains(t *testing.T, what, got string, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q does not contain %q", what, got, w)
		}
	}
}

func hasAttr(n *html.Node, key string) bool {
	if n == nil {
		return false
	}
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func mustUser(t *testing.T, c *console, name string) models.User {
	t.Helper()
	ctx := context.Background()
	tn, err := c.app.Store.TenantByName(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := c.app.Store.UserCredentials(ctx, tn.ID, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestStepUpRefusals(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	b := c.alice()
	k := newKey(t, b)
	k.register("")
	a := c.propose("ord_2001", 50000)
	bp := c.propose("ord_2002", 60000)

	// An assertion made for A, presented for B.
	forA := k.assertionFor(a)
	status, out := b.postJSON(stepUpPath(bp, "finish"), withEffect(t, forA, bp.EffectDigest))
	wantRefusal(t, "A's assertion for B", status, out, http.StatusForbidden, models.EArgsMismatch, "different proposal")
	if c.status(bp.ID) != models.StatusAwaitingConfirmation || len(c.reloadProposal(bp.ID).Decisions) != 0 {
		t.Fatal("B changed")
	}

	// The same assertion twice (here once at A, after the refusal at B):
	// the first counts, the second is refused.
	status, out = b.postJSON(stepUpPath(a, "finish"), withEffect(t, forA, a.EffectDigest))
	if status != http.StatusOK {
		t.Fatalf("A's assertion at A: %d %s", status, out)
	}
	status, out = b.postJSON(stepUpPath(a, "finish"), withEffect(t, forA, a.EffectDigest))
	wantRefusal(t, "the same assertion again", status, out, http.StatusConflict, models.EAlreadyConsumed, "already used")
	if n := len(c.reloadProposal(a.ID).Decisions); n != 1 {
		t.Errorf("decisions on A = %d", n)
	}

	// User verification missing.
	k.auth.Options.UserNotVerified = true
	status, out = b.postJSON(stepUpPath(bp, "finish"), withEffect(t, k.assertionFor(bp), bp.EffectDigest))
	wantRefusal(t, "no user verification", status, out, http.StatusForbidden, models.EStepUpFailed,
		"did not verify you (user verification is required)", "Nothing was approved")
	k.auth.Options.UserNotVerified = false

	// Wrong origin.
	k.rp.Origin = "https://evil.example"
	status, out = b.postJSON(stepUpPath(bp, "finish"), withEffect(t, k.assertionFor(bp), bp.EffectDigest))
	wantRefusal(t, "wrong origin", status, out, http.StatusForbidden, models.EStepUpFailed, "https://evil.example", "not this console's origin")
	k.rp.Origin = testOrigin

	// Wrong relying party (same origin).
	k.rp.ID = "evil.example"
	status, out = b.postJSON(stepUpPath(bp, "finish"), withEffect(t, k.assertionFor(bp), bp.EffectDigest))
	wantRefusal(t, "wrong rp id", status, out, http.StatusForbidden, models.EStepUpFailed, "relying party id")
	k.rp.ID = testRPID

	// A bad signature.
	resp := k.assertionFor(bp)
	var m map[string]any
	json.Unmarshal([]byte(resp), &m)
	r := m["response"].(map[string]any)
	sig, _ := base64.RawURLEncoding.DecodeString(r["signature"].(string))
	sig[len(sig)-1] ^= 1
	r["signature"] = base64.RawURLEncoding.EncodeToString(sig)
	forged, _ := json.Marshal(m)
	status, out = b.postJSON(stepUpPath(bp, "finish"), withEffect(t, string(forged), bp.EffectDigest))
	wantRefusal(t, "bad signature", status, out, http.StatusForbidden, models.EStepUpFailed, "did not verify")
	// Each refused assertion is in the audit log.
	entries, err := c.app.Store.ProposalAudit(context.Background(), bp.TenantID, bp.ID)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, e := range entries {
		if e.Kind == models.AuditStepUpFailed {
			failed++
		}
	}
	if failed != 4 {
		t.Errorf("%d stepup.failed entries for B, want 4 (no verification, origin, relying party, signature)", failed)
	}

	// A digest other than the stored one is refused at the start.
	status, out = b.postJSON(stepUpPath(bp, "begin"), digestBody(a))
	wantRefusal(t, "begin with A's digest for B", status, out, http.StatusForbidden, models.EArgsMismatch, "Nothing was approved")

	// Someone else's assertion in alice's session: no ceremony of hers.
	c.user("demo", "bob", models.RoleReviewer, "bob-password-123")
	kb := c.reviewerWithKey("bob", "bob-password-123", "Bob's key")
	status, out = b.postJSON(stepUpPath(bp, "finish"), withEffect(t, kb.assertionFor(bp), bp.EffectDigest))
	wantRefusal(t, "bob's ceremony in alice's session", status, out, http.StatusForbidden, models.EStepUpFailed, "does not answer a request")

	if got := c.reloadProposal(bp.ID); got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
		t.Fatalf("B after the refusals: %s, %d decisions", got.Status, len(got.Decisions))
	}
	// And with everything right, B is approved.
	k.approve(bp)
	if st := c.status(bp.ID); st != models.StatusConfirmed {
		t.Errorf("B = %s", st)
	}

	// An expired ceremony: the nonce is short-lived (the proposal, with a
	// quorum tier of 10 minutes, is still open).
	q := c.propose("ord_2003", 300000)
	o := k.begin(stepUpPath(q, "begin"), digestBody(q))
	c.clock.Advance(stepup.DefaultApprovalTTL)
	status, out = b.postJSON(stepUpPath(q, "finish"), withEffect(t, k.sign(o), q.EffectDigest))
	wantRefusal(t, "expired ceremony", status, out, http.StatusGone, models.ECeremonyExpired, "expired", "Start again")
	if n := len(c.reloadProposal(q.ID).Decisions); n != 0 {
		t.Errorf("an expired ceremony recorded %d decisions", n)
	}
}

func TestConcurrentFinishesOfOneAssertion(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	b := c.alice()
	k := newKey(t, b)
	k.register("k")
	p := c.propose("ord_2003", 300000) // quorum of two: the first approval leaves it awaiting
	resp := withEffect(t, k.assertionFor(p), p.EffectDigest)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 8 {
		wg.Go(func() {
			status, _ := b.postJSON(stepUpPath(p, "finish"), resp)
			mu.Lock()
			codes[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[http.StatusOK] != 1 || codes[http.StatusConflict] != 7 {
		t.Errorf("statuses %v, want one 200 and seven 409", codes)
	}
	if n := len(c.reloadProposal(p.ID).Decisions); n != 1 {
		t.Errorf("decisions = %d", n)
	}
}

func TestSignCounterRegressionFlagsTheKey(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	b := c.alice()
	k := newKey(t, b)
	k.register("Counting key")
	k.cred.Counter = 5
	k.approve(c.propose("ord_2001", 50000))

	// The same key now presents counter 3: a clone, or a broken key.
	p := c.propose("ord_2002", 50000)
	k.cred.Counter = 3
	status, out := b.postJSON(stepUpPath(p, "finish"), withEffect(t, k.assertionFor(p), p.EffectDigest))
	wantRefusal(t, "counter 5 → 3", status, out, http.StatusForbidden, models.EStepUpFailed, "went backwards", "flagged")
	if got := c.reloadProposal(p.ID); got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
		t.Fatalf("the refused approval changed the proposal: %s", got.Status)
	}
	keys, _ := c.app.StepUp.Keys(context.Background(), mustUser(t, c, "alice"))
	if len(keys) != 1 || keys[0].FlaggedAt == nil || keys[0].SignCount != 5 {
		t.Fatalf("key after the regression: %+v", keys)
	}
	page := b.get("/settings/keys")
	wantContains(t, "key status", testid(page.doc, "key-status"), "Possibly cloned")

	// A flagged key approves nothing, even with a higher counter.
	k.cred.Counter = 50
	status, out = b.postJSON(stepUpPath(p, "begin"), digestBody(p))
	wantRefusal(t, "begin with only a flagged key", status, out, http.StatusForbidden, models.EStepUpRequired, "no usable security key")
	page = b.get("/proposals/" + p.ID)
	if testid(page.doc, "approve-blocked") == "" {
		t.Error("Approve is not blocked with only a flagged key")
	}

	// It may confirm its own removal.
	o := k.begin("/settings/keys/"+keys[0].ID+"/remove/begin", "{}")
	status, out = b.postJSON("/settings/keys/"+keys[0].ID+"/remove/finish", k.sign(o))
	if status != http.StatusOK {
		t.Fatalf("removing the flagged key: %d %s", status, out)
	}
	if keys, _ := c.app.StepUp.Keys(context.Background(), mustUser(t, c, "alice")); len(keys) != 0 {
		t.Errorf("keys after removal: %v", keys)
	}
}

func TestQuorumNeedsDistinctReviewersEachWithAKey(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	c.user("demo", "bob", models.RoleReviewer, "bob-password-123")
	alice := c.reviewerWithKey("alice", c.creds.ReviewerPassword, "Alice's key")
	bob := c.reviewerWithKey("bob", "bob-password-123", "Bob's key")
	p := c.propose("ord_2004", 300000) // tier quorum: two approvers, each with a key
	if p.Tier.Quorum != 2 || p.Tier.Confirmation != models.ConfirmWebAuthn {
		t.Fatalf("tier %+v", p.Tier)
	}

	// Alice begins two ceremonies, then finishes both: one approval.
	first, second := alice.assertionFor(p), alice.assertionFor(p)
	if status, out := alice.b.postJSON(stepUpPath(p, "finish"), withEffect(t, first, p.EffectDigest)); status != http.StatusOK {
		t.Fatalf("alice: %d %s", status, out)
	}
	status, out := alice.b.postJSON(stepUpPath(p, "finish"), withEffect(t, second, p.EffectDigest))
	wantRefusal(t, "alice's second approval", status, out, http.StatusConflict, models.EAlreadyDecided, "already decided")
	status, out = alice.b.postJSON(stepUpPath(p, "begin"), digestBody(p))
	wantRefusal(t, "alice begins again", status, out, http.StatusConflict, models.EAlreadyDecided)
	got := c.reloadProposal(p.ID)
	if got.Status != models.StatusAwaitingConfirmation || got.Token != nil || len(got.Approvals()) != 1 {
		t.Fatalf("after alice twice: %s, %d approvals", got.Status, len(got.Approvals()))
	}
	page := bob.b.get("/proposals/" + p.ID)
	wantContains(t, "quorum", testid(page.doc, "quorum"), "1 of 2 approvals", "each with the reviewer's own security key")

	// Bob completes the quorum: the token names both, amr webauthn.
	bob.approve(p)
	got = c.reloadProposal(p.ID)
	if got.Status != models.StatusConfirmed {
		t.Fatalf("status %s", got.Status)
	}
	cl := claimsOf(t, got)
	want := []string{mustUser(t, c, "alice").ID, mustUser(t, c, "bob").ID}
	if !slices.Equal(cl.Approvers, want) || !slices.Contains(cl.AMR, "webauthn") {
		t.Errorf("claims approvers %v amr %v, want %v and webauthn", cl.Approvers, cl.AMR, want)
	}
	for _, v := range stepup.VerifyApprovals(got) {
		if v.Err != nil {
			t.Errorf("approval by %s: %v", v.Decision.UserName, v.Err)
		}
	}
}

func TestRequesterCannotApproveWithAKeyEither(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	ctx := context.Background()
	carol := c.user("demo", "carol", models.RoleReviewer, "carol-password-1")
	key, hash, err := secret.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.app.Store.CreateAgent(ctx, carol.TenantID, "carols-bot", carol.ID, hash); err != nil {
		t.Fatal(err)
	}
	agent, err := c.app.Protocol.AuthenticateAgent(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := c.app.Protocol.Propose(ctx, agent, writes.ProposeInput{Tool: "refund_order",
		Arguments: json.RawMessage(`{"order_id":"ord_2005","amount_minor":50000,"currency":"CNY","reason":"mine"}`)})
	if err != nil {
		t.Fatal(err)
	}
	k := c.reviewerWithKey("carol", "carol-password-1", "Carol's key")
	status, out := k.b.postJSON(stepUpPath(p, "begin"), digestBody(p))
	wantRefusal(t, "requester begins", status, out, http.StatusForbidden, models.ESelfApproval, "may not approve it yourself")
	// Past the console, Confirm refuses as well: the protocol decides.
	_, err = c.app.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: carol, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
		Evidence: auth.ApprovalEvidence(carol, nil)})
	if !models.IsCode(err, models.ESelfApproval) {
		t.Errorf("Confirm by the requester: %v", err)
	}
	if got := c.reloadProposal(p.ID); got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
		t.Errorf("after the requester's attempt: %s", got.Status)
	}
}

func TestCeremoniesSurviveARestart(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	b := c.alice()
	k := newKey(t, b)
	k.register("k")
	p := c.propose("ord_2006", 50000)
	o := k.begin(stepUpPath(p, "begin"), digestBody(p))
	// Another process finishes what this one began: nothing was kept in
	// memory or in a readable cookie.
	c.restart()
	status, out := b.postJSON(stepUpPath(p, "finish"), withEffect(t, k.sign(o), p.EffectDigest))
	if status != http.StatusOK {
		t.Fatalf("finish after a restart: %d %s", status, out)
	}
	u, _ := url.Parse(c.srv.URL)
	for _, ck := range b.jar.Cookies(u) {
		if strings.Contains(ck.Name, "webauthn") || len(ck.Value) > 400 {
			t.Errorf("cookie %s looks like ceremony state", ck.Name)
		}
	}
}

func TestRemovingAKeyNeedsAFreshStepUp(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	b := c.alice()
	k1 := newKey(t, b)
	k1.register("first")
	k2 := newKey(t, b)
	k2.register("second", k1)
	keys, _ := c.app.StepUp.Keys(context.Background(), mustUser(t, c, "alice"))
	if len(keys) != 2 {
		t.Fatalf("keys %v", keys)
	}
	first, second := keys[0], keys[1]
	path := func(id, step string) string { return "/settings/keys/" + id + "/remove/" + step }

	// A confirmation begun for removing the first key does not remove the second.
	o := k2.begin(path(first.ID, "begin"), "{}")
	resp := k2.sign(o)
	status, out := b.postJSON(path(second.ID, "finish"), resp)
	wantRefusal(t, "confirmation for another key", status, out, http.StatusForbidden, models.EArgsMismatch, "another key")
	// Without user verification: refused.
	k2.auth.Options.UserNotVerified = true
	status, out = b.postJSON(path(first.ID, "finish"), k2.sign(k2.begin(path(first.ID, "begin"), "{}")))
	wantRefusal(t, "removal without user verification", status, out, http.StatusForbidden, models.EStepUpFailed, "user verification")
	k2.auth.Options.UserNotVerified = false
	// The second key confirms the removal of the first; once.
	status, out = b.postJSON(path(first.ID, "finish"), resp)
	if status != http.StatusOK {
		t.Fatalf("remove: %d %s", status, out)
	}
	status, out = b.postJSON(path(first.ID, "finish"), resp)
	wantRefusal(t, "the same removal again", status, out, http.StatusConflict, models.EAlreadyConsumed)
	keys, _ = c.app.StepUp.Keys(context.Background(), mustUser(t, c, "alice"))
	if len(keys) != 1 || keys[0].ID != second.ID {
		t.Fatalf("keys after removal %v", keys)
	}
	// The removed key approves nothing.
	p := c.propose("ord_2007", 50000)
	o = k2.begin(stepUpPath(p, "begin"), digestBody(p))
	status, out = b.postJSON(stepUpPath(p, "finish"), withEffect(t, k1.signAny(o), p.EffectDigest))
	wantRefusal(t, "removed key", status, out, http.StatusForbidden, models.EStepUpFailed, "not registered to you")

	// Renaming.
	b.get("/settings/keys")
	got := b.postForm("/settings/keys/"+second.ID+"/rename", url.Values{"name": {"Office key"}})
	wantStatus(t, "rename", got, http.StatusSeeOther)
	got = b.postForm("/settings/keys/"+second.ID+"/rename", url.Values{"name": {"bad\x01name"}})
	wantStatus(t, "rename with a control character", got, http.StatusUnprocessableEntity)
	if testid(got.doc, "rename-error") == "" {
		t.Error("no rename error shown")
	}
	if got := testid(b.get("/settings/keys").doc, "key-name-cell"); got != "Office key" {
		t.Errorf("name %q", got)
	}
}

// signAny signs options whatever they allow: a key that is not (or no
// longer) registered.
func (k *key) signAny(o *virtualwebauthn.AssertionOptions) string {
	return virtualwebauthn.CreateAssertionResponse(k.rp, k.auth, k.cred, *o)
}

// A password session alone cannot add a key to a reviewer who has one: a
// stolen session could otherwise enroll its own key and approve with it.
func TestASecondKeyNeedsTheFirst(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	b := c.alice()
	first := newKey(t, b)
	first.register("first")
	intruder := newKey(t, b)

	// Without a proof, begin answers with a confirmation request for the
	// registered key only, and no creation options.
	status, out := b.postJSON("/settings/keys/register/begin", "{}")
	if status != http.StatusOK || !strings.Contains(string(out), `"confirm":`) || strings.Contains(string(out), `"pubKeyCredParams"`) {
		t.Fatalf("begin with a key registered: %d %s", status, out)
	}
	var req struct {
		Confirm json.RawMessage `json:"confirm"`
	}
	json.Unmarshal(out, &req)
	o, err := virtualwebauthn.ParseAssertionOptions(string(req.Confirm))
	if err != nil {
		t.Fatal(err)
	}
	if intruder.cred.IsAllowedForAssertion(*o) || !first.cred.IsAllowedForAssertion(*o) {
		t.Fatalf("the confirmation allows %v", o.AllowCredentials)
	}
	// The intruder's own key is no proof.
	status, out = b.postJSON("/settings/keys/register/begin", `{"confirm":`+intruder.signAny(o)+`}`)
	wantRefusal(t, "an unregistered key as proof", status, out, http.StatusForbidden, models.EStepUpFailed, "not registered to you")
	// Nor is a registered key without user verification.
	status, out = b.postJSON("/settings/keys/register/begin", "{}")
	if status != http.StatusOK {
		t.Fatalf("register begin: %d %s", status, out)
	}
	json.Unmarshal(out, &req)
	o, _ = virtualwebauthn.ParseAssertionOptions(string(req.Confirm))
	first.auth.Options.UserNotVerified = true
	status, out = b.postJSON("/settings/keys/register/begin", `{"confirm":`+first.sign(o)+`}`)
	wantRefusal(t, "proof without user verification", status, out, http.StatusForbidden, models.EStepUpFailed, "user verification")
	first.auth.Options.UserNotVerified = false
	// Nor an approval's assertion.
	p := c.propose("ord_2001", 50000)
	status, out = b.postJSON("/settings/keys/register/begin", `{"confirm":`+first.assertionFor(p)+`}`)
	wantRefusal(t, "an approval's assertion as proof", status, out, http.StatusForbidden, models.EStepUpFailed, "does not answer a request")
	// The finish cannot be reached without a registration ceremony.
	status, out = b.postJSON("/settings/keys/register/finish", intruderAttestation(t, intruder))
	wantRefusal(t, "finish without a begun registration", status, out, http.StatusForbidden, models.EStepUpFailed)

	// A proof counts once.
	status, out = b.postJSON("/settings/keys/register/begin", "{}")
	if status != http.StatusOK {
		t.Fatalf("register begin: %d %s", status, out)
	}
	json.Unmarshal(out, &req)
	o, _ = virtualwebauthn.ParseAssertionOptions(string(req.Confirm))
	proof := `{"confirm":` + first.sign(o) + `}`
	if status, out = b.postJSON("/settings/keys/register/begin", proof); status != http.StatusOK || !strings.Contains(string(out), `"pubKeyCredParams"`) {
		t.Fatalf("begin with a proof: %d %s", status, out)
	}
	status, out = b.postJSON("/settings/keys/register/begin", proof)
	wantRefusal(t, "the same proof again", status, out, http.StatusConflict, models.EAlreadyConsumed)

	// With the first key's proof, the second key registers.
	second := newKey(t, b)
	second.register("second", first)
	if keys, _ := c.app.StepUp.Keys(context.Background(), mustUser(t, c, "alice")); len(keys) != 2 {
		t.Fatalf("keys %v", keys)
	}
}

// intruderAttestation is a registration response to a challenge the server
// never issued.
func intruderAttestation(t *testing.T, k *key) string {
	t.Helper()
	ao := virtualwebauthn.AttestationOptions{Challenge: bytes.Repeat([]byte{1}, 32), RelyingPartyID: testRPID, UserID: "usr_x"}
	return virtualwebauthn.CreateAttestationResponse(k.rp, k.auth, k.cred, ao)
}

func TestPasskeySignIn(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	alice := mustUser(t, c, "alice")
	owner := c.alice()
	k := newKey(t, owner)
	k.auth.Options.UserHandle = []byte(alice.ID) // a discoverable credential knows its user
	k.register("Phone passkey")

	// start begins a passkey sign-in in a fresh browser and returns it
	// with the request options.
	start := func(org string) (*browser, *virtualwebauthn.AssertionOptions) {
		t.Helper()
		b := c.browser()
		page := b.get("/login?next=%2Fhistory")
		if find(page.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "passkey-form" }) == nil {
			t.Fatal("the sign-in page offers no passkey")
		}
		b.csrf = inputValue(t, page.doc, "csrf_token")
		status, out := b.postJSON("/login/passkey/begin", `{"org":"`+org+`"}`)
		if status != http.StatusOK {
			t.Fatalf("passkey begin: %d %s", status, out)
		}
		o, err := virtualwebauthn.ParseAssertionOptions(string(out))
		if err != nil {
			t.Fatal(err)
		}
		if len(o.AllowCredentials) != 0 {
			t.Errorf("a discoverable sign-in names credentials: %v", o.AllowCredentials)
		}
		return b, o
	}
	finish := func(b *browser, org, resp string) (int, []byte) {
		var m map[string]any
		json.Unmarshal([]byte(resp), &m)
		m["org"], m["next"], m["zone"] = org, "/history", "Asia/Kolkata"
		body, _ := json.Marshal(m)
		return b.postJSON("/login/passkey/finish", string(body))
	}

	b, o := start("demo")
	resp := k.signAny(o)
	status, out := finish(b, "demo", resp)
	if status != http.StatusOK || !strings.Contains(string(out), `"redirect":"/history"`) {
		t.Fatalf("passkey finish: %d %s", status, out)
	}
	page := b.get("/history")
	wantStatus(t, "signed in with a passkey", page, http.StatusOK)
	if !strings.Contains(testid(page.doc, "whoami"), "alice") {
		t.Errorf("whoami = %q", testid(page.doc, "whoami"))
	}
	// The browser's zone, sent with the answer, became alice's.
	if got := mustUser(t, c, "alice").TimeZone; got != "Asia/Kolkata" {
		t.Errorf("zone after the passkey sign-in = %q, want the browser's", got)
	}
	// The same answer again signs nobody in.
	again := c.browser()
	again.csrf = inputValue(t, again.get("/login").doc, "csrf_token")
	status, out = finish(again, "demo", resp)
	wantRefusal(t, "the same passkey answer again", status, out, http.StatusConflict, models.EAlreadyConsumed)

	// A click approval after a passkey sign-in never reads as a
	// security-key confirmation.
	low := c.propose("ord_1003", 100)
	b.get("/proposals/" + low.ID)
	wantStatus(t, "click approval", b.postForm("/proposals/"+low.ID+"/approve", url.Values{"digest": {low.ArgsDigest}, "effect": {low.EffectDigest}}), http.StatusSeeOther)
	if cl := claimsOf(t, c.reloadProposal(low.ID)); !slices.Equal(cl.AMR, []string{"passkey"}) {
		t.Errorf("amr of a click approval after a passkey sign-in = %v, want [passkey]", cl.AMR)
	}

	// Approving with a security key after a passkey sign-in: the token
	// names both, the sign-in ("passkey") and the step-up ("webauthn").
	kk := &key{t: t, b: b, rp: k.rp, auth: k.auth, cred: k.cred}
	p := c.propose("ord_2001", 50000)
	kk.approve(p)
	if cl := claimsOf(t, c.reloadProposal(p.ID)); !slices.Equal(cl.AMR, []string{"passkey", "webauthn"}) {
		t.Errorf("amr after a passkey sign-in = %v", cl.AMR)
	}

	// An unknown organization: options, but no sign-in, and the same
	// answer as any other failure.
	b, o = start("nowhere")
	status, out = finish(b, "nowhere", k.signAny(o))
	wantRefusal(t, "unknown organization", status, out, http.StatusUnauthorized, models.EUnauthenticated, "does not sign anyone in")

	// A user handle that names someone else.
	bob := c.user("demo", "bob", models.RoleReviewer, "bob-password-123")
	b, o = start("demo")
	k.auth.Options.UserHandle = []byte(bob.ID)
	status, out = finish(b, "demo", k.signAny(o))
	wantRefusal(t, "another user's handle", status, out, http.StatusUnauthorized, models.EUnauthenticated)
	k.auth.Options.UserHandle = []byte(alice.ID)

	// No user verification.
	b, o = start("demo")
	k.auth.Options.UserNotVerified = true
	status, out = finish(b, "demo", k.signAny(o))
	wantRefusal(t, "no user verification", status, out, http.StatusForbidden, models.EStepUpFailed, "user verification")
	k.auth.Options.UserNotVerified = false

	// Without the sign-in form's token: refused before anything happens.
	b, o = start("demo")
	b.csrf = "forged"
	status, _ = finish(b, "demo", k.signAny(o))
	if status != http.StatusForbidden {
		t.Errorf("finish without the form's token: %d", status)
	}

	// A disabled user's passkey signs nobody in.
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	wantStatus(t, "disable alice", admin.postForm("/admin/reviewers/"+alice.ID+"/disable", nil), http.StatusSeeOther)
	b, o = start("demo")
	status, out = finish(b, "demo", k.signAny(o))
	wantRefusal(t, "disabled user", status, out, http.StatusUnauthorized, models.EUnauthenticated)
}

// TestHistoryChecksWhoseKeySignedTheEvidence: evidence carries its own
// public key, so a signature that verifies proves nothing about whose key
// made it. Confirm cannot be handed such evidence (only the step-up service
// makes step-up evidence, from the reviewer's own ceremony), so here it is
// written into bob's stored approval afterwards: a genuine assertion over
// this very proposal's challenge, signed by carol's registered key. The
// history must not certify it as bob's approval.
func TestHistoryChecksWhoseKeySignedTheEvidence(t *testing.T) {
	t.Parallel()
	c := stepUpConsole(t)
	ctx := context.Background()
	c.user("demo", "carol", models.RoleReviewer, "carol-password-1")
	c.user("demo", "bob", models.RoleReviewer, "bob-password-1")
	carol := c.reviewerWithKey("carol", "carol-password-1", "Carol's key")
	bobKey := c.reviewerWithKey("bob", "bob-password-1", "Bob's key")
	p := c.propose("ord_2001", 50000)

	// Carol's key signs the transaction challenge of p; the answer is
	// never posted, but it verifies on its own.
	o := carol.begin(stepUpPath(p, "begin"), digestBody(p))
	parsed, err := gowebauthn.ParseCredentialRequestResponseBytes([]byte(carol.sign(o)))
	if err != nil {
		t.Fatal(err)
	}
	cer, err := c.app.Store.CeremonyByChallenge(ctx, p.TenantID, parsed.Response.CollectedClientData.Challenge)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := c.app.Store.SecurityKeys(ctx, p.TenantID, mustUser(t, c, "carol").ID)
	if err != nil || len(keys) != 1 {
		t.Fatalf("carol's keys: %v %v", keys, err)
	}
	b64 := base64.RawURLEncoding
	ev, err := json.Marshal(stepup.Evidence{Format: stepup.EvidenceFormat, ProposalID: p.ID, ArgsDigest: p.ArgsDigest,
		CredentialID:      b64.EncodeToString(parsed.RawID),
		AuthenticatorData: b64.EncodeToString(parsed.Raw.AssertionResponse.AuthenticatorData),
		ClientDataJSON:    b64.EncodeToString(parsed.Raw.AssertionResponse.ClientDataJSON),
		Signature:         b64.EncodeToString(parsed.Response.Signature),
		PublicKey:         b64.EncodeToString(keys[0].PublicKey), Nonce: b64.EncodeToString(cer.Nonce),
		Challenge: parsed.Response.CollectedClientData.Challenge, RPID: testRPID, Origin: testOrigin,
		SignCount: parsed.Response.AuthenticatorData.Counter, UserVerified: true, KeyName: "Bob's key"})
	if err != nil {
		t.Fatal(err)
	}
	bobKey.approve(p)
	res, err := c.app.Store.DB().ExecContext(ctx, "UPDATE decisions SET evidence = $1 WHERE proposal_id = $2 AND user_id = $3",
		string(ev), p.ID, mustUser(t, c, "bob").ID)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("replacing bob's evidence: %d rows, %v", n, err)
	}
	got := c.reloadProposal(p.ID)
	// The signature itself verifies: only the key's owner tells it apart.
	if err := stepup.VerifyEvidence(got, got.Approvals()[0].Evidence); err != nil {
		t.Fatalf("the borrowed evidence should verify on its own: %v", err)
	}

	page := c.alice().get("/history")
	check := testid(page.doc, "evidence-check")
	if strings.Contains(check, "the signature verifies") {
		t.Errorf("history certifies bob's approval signed with carol's key: %q", check)
	}
	wantContains(t, "evidence check", check, "does not verify", "another user")
}
