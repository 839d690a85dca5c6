package stepup_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/descope/virtualwebauthn"

	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/stepup"
)

// The derivation is documented byte for byte so that third parties can
// recompute it; these vectors were computed independently (Python hashlib).
func TestChallengeVectors(t *testing.T) {
	nonce := make([]byte, 32)
	for i := range nonce {
		nonce[i] = byte(i)
	}
	tests := []struct {
		p, d  string
		nonce []byte
		want  string
	}{
		{"prop_01jexample", "sha256:" + strings.Repeat("ab", 32), nonce, "46a3447505cf04da0d21625b4c7d4cdaf28b12c789e75f2d10ae22920d1d900d"},
		{"", "", nil, "15ec7bf0b50732b49f8228e07d24365338f9e3ab994b00af08e5a3bffe55fd8b"},
	}
	for _, tt := range tests {
		if got := hex.EncodeToString(stepup.Challenge(tt.p, tt.d, tt.nonce)); got != tt.want {
			t.Errorf("Challenge(%q, %q, %x) = %s, want %s", tt.p, tt.d, tt.nonce, got, tt.want)
		}
	}
	// Moving bytes between fields changes the challenge: the encoding is
	// unambiguous.
	a := stepup.Challenge("prop_1", "sha256:2", []byte("n"))
	b := stepup.Challenge("prop_", "1sha256:2", []byte("n"))
	if bytes.Equal(a, b) {
		t.Error("shifting a byte from the id to the digest gave the same challenge")
	}
}

// signed is an assertion by a software authenticator over the transaction
// challenge of p, as evidence.
func signed(t *testing.T, p *models.Proposal, mutate func(*virtualwebauthn.Authenticator, *virtualwebauthn.RelyingParty)) (stepup.Evidence, json.RawMessage) {
	t.Helper()
	rp := virtualwebauthn.RelyingParty{ID: "countersign.test", Name: "countersign", Origin: "https://countersign.test"}
	auth := virtualwebauthn.NewAuthenticatorWithOptions(virtualwebauthn.AuthenticatorOptions{UserHandle: []byte("usr_1")})
	if mutate != nil {
		mutate(&auth, &rp)
	}
	cred := webauthntest.NewCredential()
	cred.Counter = 42
	nonce := bytes.Repeat([]byte{9}, stepup.NonceSize)
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
	ev := stepup.Evidence{Format: stepup.EvidenceFormat, ProposalID: p.ID, ArgsDigest: p.ArgsDigest,
		CredentialID: r.ID, AuthenticatorData: r.Response.AuthenticatorData, ClientDataJSON: r.Response.ClientDataJSON,
		Signature: r.Response.Signature, UserHandle: r.Response.UserHandle, PublicKey: b64(cred.Key.AttestationData()),
		PublicKeyAlgorithm: -7, Nonce: b64(nonce), Challenge: b64(challenge), RPID: "countersign.test",
		Origin: "https://countersign.test", SignCount: 42, UserVerified: true}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return ev, raw
}

func TestVerifyEvidence(t *testing.T) {
	p := &models.Proposal{ID: "prop_01jtest", ArgsDigest: "sha256:" + strings.Repeat("0f", 32)}
	ev, raw := signed(t, p, nil)
	if err := stepup.VerifyEvidence(p, raw); err != nil {
		t.Fatalf("genuine evidence: %v", err)
	}

	reencode := func(f func(*stepup.Evidence)) json.RawMessage {
		e := ev
		f(&e)
		b, _ := json.Marshal(e)
		return b
	}
	// The digest in the database was changed after the approval: the
	// challenge derived from it is not the one the key signed.
	tampered := *p
	tampered.ArgsDigest = "sha256:" + strings.Repeat("1f", 32)
	if err := stepup.VerifyEvidence(&tampered, raw); !models.IsCode(err, models.EArgsMismatch) {
		t.Errorf("tampered digest: %v, want args_mismatch", err)
	}
	other := *p
	other.ID = "prop_01jother"
	if err := stepup.VerifyEvidence(&other, raw); !models.IsCode(err, models.EArgsMismatch) {
		t.Errorf("another proposal: %v, want args_mismatch", err)
	}
	// Rewriting the evidence's own digest and challenge to match does not
	// help: the signed client data still carries the original challenge.
	forged := reencode(func(e *stepup.Evidence) {
		e.ArgsDigest = tampered.ArgsDigest
		e.Challenge = b64(stepup.Challenge(p.ID, tampered.ArgsDigest, bytes.Repeat([]byte{9}, stepup.NonceSize)))
	})
	if err := stepup.VerifyEvidence(&tampered, forged); !models.IsCode(err, models.EArgsMismatch) {
		t.Errorf("re-derived challenge: %v, want args_mismatch", err)
	}

	for name, f := range map[string]func(*stepup.Evidence){
		"signature":  func(e *stepup.Evidence) { e.Signature = flip(e.Signature) },
		"origin":     func(e *stepup.Evidence) { e.Origin = "https://evil.example" },
		"rp id":      func(e *stepup.Evidence) { e.RPID = "evil.example"; e.Origin = "https://evil.example" },
		"sign count": func(e *stepup.Evidence) { e.SignCount = 41 },
		"public key": func(e *stepup.Evidence) {
			_, o := signed(t, p, nil)
			var oe stepup.Evidence
			json.Unmarshal(o, &oe)
			e.PublicKey = oe.PublicKey
		},
		"uv recorded": func(e *stepup.Evidence) { e.UserVerified = false },
	} {
		if err := stepup.VerifyEvidence(p, reencode(f)); !models.IsCode(err, models.EStepUpFailed) {
			t.Errorf("%s changed: %v, want step_up_failed", name, err)
		}
	}

	// A key that did not verify its user.
	_, noUV := signed(t, p, func(a *virtualwebauthn.Authenticator, _ *virtualwebauthn.RelyingParty) {
		a.Options.UserNotVerified = true
	})
	if err := stepup.VerifyEvidence(p, noUV); !models.IsCode(err, models.EStepUpFailed) {
		t.Errorf("no user verification: %v", err)
	}

	for _, bad := range []string{``, `{}`, `{"format":"x"}`, `[1]`} {
		if err := stepup.VerifyEvidence(p, json.RawMessage(bad)); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("evidence %q: %v, want invalid_request", bad, err)
		}
	}
}

func TestVerifyApprovals(t *testing.T) {
	p := &models.Proposal{ID: "prop_01jtest", ArgsDigest: "sha256:" + strings.Repeat("0f", 32),
		Tier: models.Tier{Name: "high", Confirmation: models.ConfirmWebAuthn, Quorum: 2}}
	_, good := signed(t, p, nil)
	p.Decisions = []models.Decision{
		{UserID: "usr_a", Kind: models.DecisionApprove, DigestSeen: p.ArgsDigest, Evidence: good},
		{UserID: "usr_b", Kind: models.DecisionApprove, DigestSeen: p.ArgsDigest},
	}
	v := stepup.VerifyApprovals(p)
	if len(v) != 2 || v[0].Err != nil || v[0].Evidence == nil || !models.IsCode(v[1].Err, models.EStepUpRequired) {
		t.Fatalf("verdicts: %+v", v)
	}
	p.Tier.Confirmation = models.ConfirmClick
	if v := stepup.VerifyApprovals(p); v[1].Err != nil {
		t.Errorf("a click tier approval without evidence: %v", v[1].Err)
	}
}

func flip(s string) string {
	b := []byte(s)
	if b[len(b)/2] == 'A' {
		b[len(b)/2] = 'B'
	} else {
		b[len(b)/2] = 'A'
	}
	return string(b)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
