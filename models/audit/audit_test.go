package audit_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/descope/virtualwebauthn"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/audit"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/checkpoint"
	"github.com/countersign/countersign/models/internal/verified"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// Every test opens its own database, so they run in parallel, more at once
// than there are cores: most of their time is spent waiting on it.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(8)
	pgtest.Main(m)
}

var b64 = base64.RawURLEncoding

// world is a real service on a real database with one click-approved and
// one security-key-approved execution, and the receipts of both.
type world struct {
	url       string
	ctx       context.Context
	clock     *models.FixedClock
	st        *store.Store
	tokens    *token.Service
	svc       *writes.Service
	tenant    models.Tenant
	agent     models.Agent
	reviewer  models.User
	admin     models.User
	click     string // receipt of the click-approved refund, whose approver was shown its effect preview
	stepup    string // receipt of the security-key-approved refund
	stepupRC  models.SignedReceipt
	firstKID  string
	evidenceD string // the security-key approval's decision id
}

func newWorld(t *testing.T, kind string) *world {
	t.Helper()
	return newWorldWith(t, kind, registry.Demo())
}

// newWorldWith is newWorld under another registry of the demo's tools.
func newWorldWith(t *testing.T, kind string, reg *registry.Registry) *world {
	t.Helper()
	w := &world{ctx: context.Background(), clock: models.NewFixedClock(time.Date(2026, 9, 1, 6, 0, 0, 0, time.UTC))}
	url := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
	if kind == "postgres" {
		url = pgtest.DSN(t)
	}
	w.url = url
	st, err := store.Open(url, store.Options{Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(w.ctx); err != nil {
		t.Fatal(err)
	}
	demo, err := st.SeedDemo(w.ctx, store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: "x",
		AdminName: "admin", AdminPasswordHash: "x", AgentName: "bot", AgentKeyHash: "sha256:k"})
	if err != nil {
		t.Fatal(err)
	}
	ledger := demoledger.New(st)
	if err := ledger.Seed(w.ctx, demo.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	w.st, w.tenant, w.agent, w.reviewer, w.admin = st, demo.Tenant, demo.Agent, demo.Reviewer, demo.Admin
	w.tokens = token.New(st, token.Config{Issuer: "countersign", Audience: "countersign:execute", Clock: w.clock})
	adapters := map[string]models.Adapter{}
	for _, tool := range reg.Tools() {
		adapters[tool.Name] = ledger
	}
	w.svc, err = writes.New(w.ctx, writes.Config{Store: st, Registry: reg, Tokens: w.tokens, Adapters: adapters, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := st.SigningKeys(w.ctx)
	w.firstKID = keys[0].ID

	refund := func(order string, amount int) *models.Proposal {
		args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "lost"})
		p, _, err := w.svc.Propose(w.ctx, demo.Agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var lastExec string
	execute := func(p *models.Proposal) string {
		t.Helper()
		e, err := w.svc.Execute(w.ctx, demo.Agent, p.ID, p.Token.Compact)
		if err != nil || e.Status != models.StatusSucceeded || e.ReceiptJWS == "" {
			t.Fatalf("execute: %v %+v", err, e)
		}
		lastExec = e.ID
		compact, _, err := w.svc.Receipt(w.ctx, w.tenant.ID, e.ID)
		if err != nil || compact != e.ReceiptJWS {
			t.Fatalf("receipt: %v (same as in the execute answer: %v)", err, compact == e.ReceiptJWS)
		}
		return compact
	}

	// A click approval.
	p := refund("ord_1001", 1000)
	c, err := w.svc.Confirm(w.ctx, writes.ConfirmInput{Reviewer: demo.Reviewer, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
		EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(demo.Reviewer, nil)})
	if err != nil {
		t.Fatal(err)
	}
	w.click = execute(c)

	// A security-key approval: a software authenticator signs the
	// transaction challenge; its credential is registered to alice.
	w.clock.Advance(time.Minute)
	p = refund("ord_2001", 30000)
	if p.Tier.Confirmation != models.ConfirmWebAuthn {
		t.Fatalf("tier %s is not a security-key tier", p.Tier.Name)
	}
	ev := assertion(t, w, demo.Reviewer, p)
	c, err = w.svc.Confirm(w.ctx, writes.ConfirmInput{Reviewer: demo.Reviewer, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
		Evidence: verified.StepUp(auth.ApprovalEvidence(demo.Reviewer, nil), p.ID, p.ArgsDigest, ev)})
	if err != nil {
		t.Fatal(err)
	}
	w.evidenceD = c.Decisions[0].ID
	w.stepup = execute(c)
	if _, w.stepupRC, err = w.svc.Receipt(w.ctx, w.tenant.ID, lastExec); err != nil {
		t.Fatal(err)
	}
	return w
}

// assertion registers a software authenticator's credential to u and
// returns its evidence of approving p.
func assertion(t *testing.T, w *world, u models.User, p *models.Proposal) json.RawMessage {
	t.Helper()
	rp := virtualwebauthn.RelyingParty{ID: "countersign.test", Name: "countersign", Origin: "https://countersign.test"}
	auth := virtualwebauthn.NewAuthenticatorWithOptions(virtualwebauthn.AuthenticatorOptions{UserHandle: []byte(u.ID)})
	cred := webauthntest.NewCredential()
	if _, err := w.st.CreateSecurityKey(w.ctx, models.SecurityKey{ID: models.NewID("key"), TenantID: u.TenantID, UserID: u.ID,
		Name: "YubiKey 5C", CredentialID: cred.ID, PublicKey: cred.Key.AttestationData(), PublicKeyAlgorithm: -7,
		Flags: models.KeyFlags{UserPresent: true, UserVerified: true}, CreatedAt: w.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	nonce := bytes.Repeat([]byte{7}, stepup.NonceSize)
	challenge := stepup.Challenge(p.ID, p.ArgsDigest, nonce)
	resp := virtualwebauthn.CreateAssertionResponse(rp, auth, cred, virtualwebauthn.AssertionOptions{Challenge: challenge, RelyingPartyID: rp.ID})
	var r struct {
		ID       string `json:"id"`
		Response struct {
			AuthenticatorData string `json:"authenticatorData"`
			ClientDataJSON    string `json:"clientDataJSON"`
			Signature         string `json:"signature"`
			UserHandle        string `json:"userHandle"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(resp), &r); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(stepup.Evidence{Format: stepup.EvidenceFormat, ProposalID: p.ID, ArgsDigest: p.ArgsDigest,
		CredentialID: r.ID, AuthenticatorData: r.Response.AuthenticatorData, ClientDataJSON: r.Response.ClientDataJSON,
		Signature: r.Response.Signature, UserHandle: r.Response.UserHandle, PublicKey: b64.EncodeToString(cred.Key.AttestationData()),
		PublicKeyAlgorithm: -7, Nonce: b64.EncodeToString(nonce), Challenge: b64.EncodeToString(challenge), RPID: rp.ID,
		Origin: rp.Origin, SignCount: 0, UserVerified: true, KeyName: "YubiKey 5C"})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (w *world) export(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	x := audit.Exporter{Checkpointer: checkpoint.Checkpointer{Store: w.st, Tokens: w.tokens}}
	if _, err := x.Export(w.ctx, &buf, w.tenant, time.Time{}, w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// resign signs rc as a receipt with the server's own key, as someone
// holding a leaked key could.
func (w *world) resign(t *testing.T, rc models.SignedReceipt) string {
	t.Helper()
	payload, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	compact, _, err := w.tokens.SignDocument(w.ctx, token.TypeReceipt, payload)
	if err != nil {
		t.Fatal(err)
	}
	return compact
}

func verify(t *testing.T, export []byte, receipt string) *audit.Report {
	t.Helper()
	var x audit.Export
	if err := x.Read("export", bytes.NewReader(export)); err != nil {
		return &audit.Report{Checks: []audit.Check{{Element: "export", Detail: err.Error()}}}
	}
	return x.VerifyReceipt(receipt)
}

func TestUntouchedExportVerifies(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			w := newWorld(t, kind)
			export := w.export(t)
			for name, rc := range map[string]string{"click": w.click, "security key": w.stepup} {
				r := verify(t, export, rc)
				if err := r.Err(); err != nil {
					t.Fatalf("%s receipt: %v\n%+v", name, err, r.Checks)
				}
			}
			rc := w.stepupRC
			if len(rc.Approvers) != 1 || rc.Approvers[0].Method != models.MethodSecurityKey || rc.Approvers[0].EvidenceDigest == "" ||
				rc.RequestKey == "" || rc.TokenID == "" || rc.PolicyVersion == "" || rc.ResultDigest == "" || rc.Attempts != 1 {
				t.Fatalf("receipt claims incomplete: %+v", rc)
			}
		})
	}
}

// TestReceiptsVerifyAfterRotation: a receipt signed before a key rotation
// verifies against the JWKS published after it, as does a new one.
func TestReceiptsVerifyAfterRotation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	kid, err := w.tokens.Rotate(w.ctx)
	if err != nil || kid == w.firstKID {
		t.Fatal(kid, err)
	}
	jwks, err := w.svc.JWKS(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := token.ParseJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := keys.Verify(token.TypeReceipt, w.click); err != nil || got != w.firstKID {
		t.Fatalf("old receipt: kid %s, %v", got, err)
	}
	// A receipt is never a confirmation token, and the other way round.
	if _, err := w.tokens.Verify(w.ctx, w.click); !models.IsCode(err, models.EInvalidSignature) {
		t.Fatalf("a receipt passed as a confirmation token: %v", err)
	}
	// The export written after the rotation verifies both receipts.
	if err := verify(t, w.export(t), w.stepup).Err(); err != nil {
		t.Fatal(err)
	}
}

// tamper returns export with the line holding marker changed by edit.
func tamper(t *testing.T, export []byte, pick func(line string) bool, edit func(line string) string) []byte {
	t.Helper()
	lines := strings.Split(strings.TrimRight(string(export), "\n"), "\n")
	for i, l := range lines {
		if pick(l) {
			lines[i] = edit(l)
			return []byte(strings.Join(lines, "\n") + "\n")
		}
	}
	t.Fatal("no line to tamper with")
	return nil
}

// flip changes the byte at the middle of the first occurrence of field's
// string value in a JSON line, to another base64url / hex character.
func flip(field string) func(string) string {
	return func(l string) string {
		i := strings.Index(l, `"`+field+`":"`) + len(field) + 4
		j := i + strings.Index(l[i:], `"`)
		k := (i + j) / 2
		for !strings.ContainsRune("0123456789abcdef", rune(l[k])) {
			k++
		}
		c := byte('0')
		if l[k] == '0' {
			c = '1'
		}
		return l[:k] + string(c) + l[k+1:]
	}
}

func has(kind string) func(string) bool {
	return func(l string) bool { return strings.Contains(l, kind) }
}

func TestTamperingIsNamed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	export := w.export(t)
	var x audit.Export
	if err := x.Read("export", bytes.NewReader(export)); err != nil {
		t.Fatal(err)
	}
	rc := w.stepupRC
	decisionEntry := func(l string) bool {
		return strings.Contains(l, `"type":"entry"`) && strings.Contains(l, models.AuditDecisionApproved) && strings.Contains(l, rc.ProposalID)
	}
	tests := []struct {
		name    string
		export  []byte
		receipt string
		want    string
	}{
		{"entry body", tamper(t, export, decisionEntry, flip("body")), w.stepup, "audit entry"},
		{"entry hash", tamper(t, export, decisionEntry, flip("hash")), w.stepup, "audit entry"},
		{"evidence", tamper(t, export, has(`"type":"evidence"`), flip("evidence")), w.stepup, "evidence of decision " + w.evidenceD},
		{"checkpoint", tamper(t, export, has(`"type":"checkpoint"`), flip("jws")), w.stepup, "checkpoint"},
		{"receipt", export, flip("r")(`"r":"` + w.stepup + `"`)[5 : len(w.stepup)+5], "receipt"},
		{"deleted entry", tamper(t, export, decisionEntry, func(string) string { return "" }), w.stepup, "audit entry"},
		{"reordered", swapEntries(t, export), w.stepup, "audit entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := verify(t, tt.export, tt.receipt)
			err := r.Err()
			if err == nil {
				t.Fatalf("tampered %s verified", tt.name)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

// swapEntries exchanges two adjacent entry lines.
func swapEntries(t *testing.T, export []byte) []byte {
	lines := strings.Split(string(export), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if strings.Contains(lines[i], `"type":"entry"`) && strings.Contains(lines[i+1], `"type":"entry"`) {
			lines[i], lines[i+1] = lines[i+1], lines[i]
			return []byte(strings.Join(lines, "\n"))
		}
	}
	t.Fatal("no adjacent entries")
	return nil
}
