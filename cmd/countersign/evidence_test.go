package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/descope/virtualwebauthn"

	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/writes"
)

func TestEvidenceVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newDemoFixture(t)
	alice, _, err := f.a.Store.UserCredentials(ctx, f.agent.TenantID, "alice")
	if err != nil {
		t.Fatal(err)
	}

	// Alice registers a software key and approves a high-risk refund with
	// it, through the same service the console uses (relying party
	// localhost, the default without a base URL).
	rp := virtualwebauthn.RelyingParty{ID: f.a.StepUp.RPID(), Name: "countersign", Origin: f.a.StepUp.Origins()[0]}
	authr := virtualwebauthn.NewAuthenticator()
	cred := webauthntest.NewCredential()
	opts, err := f.a.StepUp.BeginRegistration(ctx, alice, nil)
	if err != nil {
		t.Fatal(err)
	}
	ao, err := virtualwebauthn.ParseAttestationOptions(string(opts))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.StepUp.FinishRegistration(ctx, alice, "CLI test key",
		[]byte(virtualwebauthn.CreateAttestationResponse(rp, authr, cred, *ao))); err != nil {
		t.Fatal(err)
	}
	id := f.refund(t, "ord_2001", 50000)
	p, err := f.a.Protocol.Get(ctx, f.agent.TenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	opts, err = f.a.StepUp.BeginApproval(ctx, alice, id, p.ArgsDigest)
	if err != nil {
		t.Fatal(err)
	}
	as, err := virtualwebauthn.ParseAssertionOptions(string(opts))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.a.StepUp.FinishApproval(ctx, stepup.ApprovalInput{Reviewer: alice, SignedIn: auth.ApprovalEvidence(alice, nil), ProposalID: id, EffectSeen: p.EffectDigest,
		Response: []byte(virtualwebauthn.CreateAssertionResponse(rp, authr, cred, *as))}); err != nil {
		t.Fatal(err)
	}

	verify := func(id string) result {
		return invoke(t, nil, "", "evidence", "verify", id, "--db", f.db, "--tenant", "demo")
	}
	r := verify(id)
	if r.err != nil {
		t.Fatalf("evidence verify: %v\n%s", r.err, r.stdout)
	}
	for _, want := range []string{"✓ alice: verified: \"CLI test key\"", "user verified", "origin http://localhost", "✓ quorum: 1 verified approval, 1 required"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout does not say %q:\n%s", want, r.stdout)
		}
	}

	// A click-tier approval needs no evidence.
	low := f.refund(t, "ord_1001", 100)
	if _, err := f.a.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: low, DigestSeen: mustDigest(t, f, low), EffectSeen: mustEffect(t, f, low), Evidence: auth.ApprovalEvidence(alice, nil)}); err != nil {
		t.Fatal(err)
	}
	if r := verify(low); r.err != nil || !strings.Contains(r.stdout, "needs no security key") {
		t.Errorf("click tier: %v\n%s", r.err, r.stdout)
	}

	// Someone with write access to the database changes the approved
	// digest: the signature no longer covers the stored proposal.
	db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(f.db, "sqlite://")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	forged := "sha256:" + strings.Repeat("0", 64)
	if _, err := db.Exec(`UPDATE proposals SET args_digest = ? WHERE id = ?`, forged, id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE decisions SET digest_seen = ? WHERE proposal_id = ?`, forged, id); err != nil {
		t.Fatal(err)
	}
	r = verify(id)
	out, code := reported(r.err)
	if code != exitError || !models.IsCode(r.err, models.EStepUpFailed) || !strings.Contains(out, "step_up_failed") {
		t.Errorf("tampered digest: %v (exit %d)", r.err, code)
	}
	if !strings.Contains(r.stdout, "✗ alice: FAILED") || !strings.Contains(r.stdout, "not derived from proposal") ||
		!strings.Contains(r.stdout, "✗ quorum: FAILED") {
		t.Errorf("tampered digest, stdout:\n%s", r.stdout)
	}

	// Unknown proposals and missing flags.
	if r := verify("prop_nope"); !models.IsCode(r.err, models.ENotFound) {
		t.Errorf("unknown proposal: %v", r.err)
	}
	if r := invoke(t, nil, "", "evidence", "verify", id, "--db", f.db); r.err == nil || !strings.Contains(r.err.Error(), "--tenant") {
		t.Errorf("without --tenant: %v", r.err)
	}
}

// mustEffect is the effect digest of proposal id.
func mustEffect(t *testing.T, f *demoFixture, id string) string {
	t.Helper()
	p, err := f.a.Protocol.Get(context.Background(), f.agent.TenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	return p.EffectDigest
}

func mustDigest(t *testing.T, f *demoFixture, id string) string {
	t.Helper()
	p, err := f.a.Protocol.Get(context.Background(), f.agent.TenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	return p.ArgsDigest
}
