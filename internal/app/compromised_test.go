package app_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
)

// attestedBy makes k's registrations attested under m's vendor root, as a
// certified key of the model its AAGUID names.
func attestedBy(t *testing.T, m *webauthntest.MDS, k *key) {
	k.attest = func(body map[string]any) {
		resp := body["response"].(map[string]any)
		obj, err := base64.RawURLEncoding.DecodeString(resp["attestationObject"].(string))
		if err != nil {
			t.Fatal(err)
		}
		cd, err := base64.RawURLEncoding.DecodeString(resp["clientDataJSON"].(string))
		if err != nil {
			t.Fatal(err)
		}
		resp["attestationObject"] = base64.RawURLEncoding.EncodeToString(m.Attest(obj, cd))
	}
}

// auditData is the data of each audit entry of kind, in order.
func auditData(t *testing.T, entries []models.AuditEntry, kind string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, en := range entries {
		if en.Kind != kind {
			continue
		}
		b, err := en.Decode()
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(b.Data, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// With the attestation policy on, a key whose model the FIDO metadata
// comes to report compromised stops counting as a security key: once the
// operator installs that BLOB (and restarts), an approval it signed —
// even one begun before, presented many times at once — is refused with
// key_model_revoked, once, and recorded nowhere but in the audit log (the
// proposal has no decision, the key no use), new approvals do not offer
// it, and a
// reviewer whose keys are all of that model is told to register a
// certified one, which the compromised key may still confirm. Its passkey
// signs nobody in, and the session it began before ends. A certified model's key keeps approving, and so does a
// key registered before the policy whose model is merely unknown; the
// keys page tells them apart.
func TestKeysOfACompromisedModelApproveNothing(t *testing.T) {
	t.Parallel()
	m := webauthntest.NewMDS(t)
	modelX, modelY := [16]byte{0xc1, 0x0a}, [16]byte{0xc1, 0x0b}
	before := m.Blob("before.jwt", nil, map[[16]byte]string{modelX: "FIDO_CERTIFIED_L1", modelY: "FIDO_CERTIFIED_L1"})
	after := m.BlobReports("after.jwt", nil, map[[16]byte][]webauthntest.Report{
		modelX: {{Status: "FIDO_CERTIFIED_L1"}, {Status: "USER_VERIFICATION_BYPASS", Effective: "2026-08-01"}},
		modelY: {{Status: "FIDO_CERTIFIED_L1"}}})
	c := openConsole(t, func(cfg *app.Config) { cfg.RPID, cfg.Origins = testRPID, []string{testOrigin} })
	alice := mustUser(t, c, "alice")

	// Before the policy: carol's key claims model X (without proving it),
	// dave's names no model.
	c.user("demo", "carol", models.RoleReviewer, "carol-password-123")
	c.user("demo", "dave", models.RoleReviewer, "dave-password-123")
	carolB := c.browser()
	carolB.mustLogin("demo", "carol", "carol-password-123")
	carol := newKey(t, carolB)
	carol.auth.Aaguid = modelX
	carol.register("Carol's old key")
	dave := c.reviewerWithKey("dave", "dave-password-123", "Dave's old key")

	// Under the policy, alice registers a passkey of model X and a key of
	// model Y, both proven.
	c.cfg.FIDOMetadata, c.cfg.FIDOMetadataRoot = before, m.RootFile
	c.restart()
	b := c.alice()
	kx := newKey(t, b)
	kx.auth.Aaguid = modelX
	kx.auth.Options.UserHandle = []byte(alice.ID)
	attestedBy(t, m, kx)
	kx.register("Passkey X")
	ky := newKey(t, b)
	ky.auth.Aaguid = modelY
	attestedBy(t, m, ky)
	ky.register("Key Y", kx)
	kx.approve(c.propose("ord_2001", 50000))
	px := passkeySignIn(t, c, kx)
	if !signedIn(t, px) {
		t.Fatal("the passkey of model X signed nobody in under the old BLOB")
	}

	// An approval with X begun under the old BLOB, finished under the new.
	p := c.propose("ord_2002", 50000)
	kx.cred.Counter = 7
	inFlight := kx.sign(kx.begin(stepUpPath(p, "begin"), digestBody(p)))
	c.clock.Advance(time.Second) // a use now would be recorded at another time
	c.cfg.FIDOMetadata = after
	c.restart()
	keysBefore, err := c.app.StepUp.Keys(t.Context(), alice)
	if err != nil {
		t.Fatal(err)
	}
	// The session the passkey of model X began ends at its next request;
	// alice's password session does not.
	if signedIn(t, px) {
		t.Error("the session begun with the passkey of model X is still signed in")
	}
	if !signedIn(t, b) {
		t.Error("alice's password session ended with the passkey of model X")
	}
	// Presented eight times at once: one refusal says why, the others
	// find the ceremony used up.
	answer := withEffect(t, inFlight, p.EffectDigest)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		refusal []byte
		codes   = map[int]int{}
	)
	for range 8 {
		wg.Go(func() {
			status, out := b.postJSON(stepUpPath(p, "finish"), answer)
			mu.Lock()
			defer mu.Unlock()
			codes[status]++
			if status == http.StatusForbidden {
				refusal = out
			}
		})
	}
	wg.Wait()
	if codes[http.StatusForbidden] != 1 || codes[http.StatusConflict] != 7 {
		t.Fatalf("statuses %v, want one 403 and seven 409", codes)
	}
	wantRefusal(t, "an approval by a key of model X", http.StatusForbidden, refusal, http.StatusForbidden, models.EKeyModelRevoked,
		`"Passkey X"`, "USER_VERIFICATION_BYPASS", "Register a certified security key", "/settings/keys", "Nothing was approved")
	if got := c.reloadProposal(p.ID); got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 || got.Token != nil {
		t.Fatalf("the refused approval changed the proposal: %s, %d decisions", got.Status, len(got.Decisions))
	}
	keysAfter, err := c.app.StepUp.Keys(t.Context(), alice)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keysAfter {
		a, b := keysAfter[i], keysBefore[i]
		if a.SignCount != b.SignCount || (a.LastUsedAt == nil) != (b.LastUsedAt == nil) ||
			(a.LastUsedAt != nil && !a.LastUsedAt.Equal(*b.LastUsedAt)) {
			t.Errorf("the refused assertion was recorded as a use of %s", keysAfter[i].Name)
		}
	}
	entries, err := c.app.Store.ProposalAudit(t.Context(), p.TenantID, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	failed := auditData(t, entries, models.AuditStepUpFailed)
	if len(failed) != 1 || failed[0]["code"] != string(models.EKeyModelRevoked) ||
		failed[0]["credential_id"] != base64.RawURLEncoding.EncodeToString(kx.cred.ID) {
		t.Errorf("stepup.failed entries: %v", failed)
	}

	// A new approval names only the key of model Y, which approves.
	o := kx.begin(stepUpPath(p, "begin"), digestBody(p))
	if kx.cred.IsAllowedForAssertion(*o) || !ky.cred.IsAllowedForAssertion(*o) {
		t.Errorf("an approval offers %v", o.AllowCredentials)
	}
	ky.approve(p)
	if got := c.reloadProposal(p.ID); got.Status != models.StatusConfirmed {
		t.Fatalf("approval with the key of model Y: %s", got.Status)
	}

	// The keys page marks the key of model X, and only it.
	page := b.get("/settings/keys")
	rows := findAll(page.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "key-row" })
	marked := map[string]string{}
	for _, row := range rows {
		if n := find(row, func(n *html.Node) bool { return attr(n, "data-testid") == "key-compromised" }); n != nil {
			marked[testid(row, "key-name-cell")] = textOf(row)
		}
	}
	if len(rows) != 2 || len(marked) != 1 || !strings.Contains(marked["Passkey X"], "Model compromised") ||
		!strings.Contains(marked["Passkey X"], "reports its model compromised or revoked (status USER_VERIFICATION_BYPASS)") ||
		!strings.Contains(marked["Passkey X"], "no longer approves anything") {
		t.Errorf("keys marked compromised: %q", marked)
	}

	// The passkey of model X signs nobody in; alice's password still does.
	pb, status, out := tryPasskeySignIn(t, c, kx)
	wantRefusal(t, "a passkey of model X", status, out, http.StatusForbidden, models.EKeyModelRevoked,
		"Sign in with your password", "Nobody was signed in")
	if r := pb.get("/history"); r.status == http.StatusOK {
		t.Error("the refused passkey signed someone in")
	}
	all, err := c.app.Store.AuditEntries(t.Context(), alice.TenantID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	signIns := auditData(t, all, models.AuditSignInFailed)
	if len(signIns) != 1 || signIns[0]["reason"] != string(models.EKeyModelRevoked) || signIns[0]["user_id"] != alice.ID {
		t.Errorf("sign-in refusals: %v", signIns)
	}

	// Carol's only key claims model X: she is told to register a certified
	// key, before anything is begun, and the page blocks Approve.
	q := c.propose("ord_2003", 50000)
	status, out = carolB.postJSON(stepUpPath(q, "begin"), digestBody(q))
	wantRefusal(t, "begin with only a key of model X", status, out, http.StatusForbidden, models.EKeyModelRevoked,
		`"Carol's old key"`, "Register a certified security key")
	if testid(carolB.get("/proposals/"+q.ID).doc, "approve-blocked") == "" {
		t.Error("Approve is not blocked with only a key of model X")
	}
	// Her key still proves possession for a certified one, which approves.
	cy := newKey(t, carolB)
	cy.auth.Aaguid = modelY
	attestedBy(t, m, cy)
	cy.register("Carol's key Y", carol)
	cy.approve(q)
	if got := c.reloadProposal(q.ID); got.Status != models.StatusConfirmed {
		t.Fatalf("carol's approval with a certified key: %s", got.Status)
	}

	// Dave's key names no model: it is marked as not certified, and
	// keeps approving.
	dpage := dave.b.get("/settings/keys")
	if testid(dpage.doc, "key-compromised") != "" || testid(dpage.doc, "key-uncertified") == "" {
		t.Errorf("dave's key status: %q", testid(dpage.doc, "key-status"))
	}
	r := c.propose("ord_2004", 50000)
	dave.approve(r)
	if got := c.reloadProposal(r.ID); got.Status != models.StatusConfirmed {
		t.Fatalf("dave's approval with a key from before the policy: %s", got.Status)
	}
}
