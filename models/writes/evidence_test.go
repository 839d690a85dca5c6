package writes_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// Confirm records an approval only with evidence made for it: not the zero
// value, not another reviewer's, and a security-key assertion only over
// this very proposal and digest. Every refusal leaves the proposal as it
// was.
func TestConfirmAcceptsOnlyEvidenceMadeForThisApproval(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		small := e.propose("ord_1001", 19900)
		big := e.propose("ord_2001", 30000) // a security-key tier
		other := e.propose("ord_2002", 30000)
		if big.Tier.Confirmation != models.ConfirmWebAuthn || other.Tier.Confirmation != models.ConfirmWebAuthn {
			t.Fatalf("tiers %s, %s", big.Tier.Confirmation, other.Tier.Confirmation)
		}
		assertion := json.RawMessage(`{"test":"assertion"}`)
		cases := []struct {
			name string
			p    *models.Proposal
			ev   writes.Evidence
			want models.Code
		}{
			{"zero evidence", small, writes.Evidence{}, models.EUnauthenticated},
			{"zero evidence, security-key tier", big, writes.Evidence{}, models.EUnauthenticated},
			{"another reviewer's sign-in", small, auth.ApprovalEvidence(bob, nil), models.EForbidden},
			{"another reviewer's security key", big, steppedUp(bob, big.ID, big.ArgsDigest, nil, assertion), models.EForbidden},
			{"a sign-in naming webauthn", big, auth.ApprovalEvidence(e.alice, []string{models.AMRStepUp}), models.EStepUpRequired},
			{"a security key over another proposal", big, steppedUp(e.alice, other.ID, other.ArgsDigest, nil, assertion), models.EArgsMismatch},
			{"a security key over other arguments", big, steppedUp(e.alice, big.ID, other.ArgsDigest, nil, assertion), models.EArgsMismatch},
			{"a step-up over a zero sign-in", big, steppedUp(models.User{}, big.ID, big.ArgsDigest, nil, assertion), models.EUnauthenticated},
		}
		for _, c := range cases {
			_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: c.p.ID, DigestSeen: c.p.ArgsDigest, EffectSeen: c.p.EffectDigest, Evidence: c.ev})
			if !models.IsCode(err, c.want) {
				t.Errorf("%s: %v, want %s", c.name, err, c.want)
			}
			if got, err := e.svc.Get(e.ctx, e.tenant, c.p.ID); err != nil || got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
				t.Fatalf("%s: the proposal changed: %v %+v", c.name, err, got)
			}
		}
		// The same approvals with the right evidence go through.
		if _, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: small.ID, DigestSeen: small.ArgsDigest, EffectSeen: small.EffectDigest,
			Evidence: auth.ApprovalEvidence(e.alice, nil)}); err != nil {
			t.Fatal(err)
		}
		got, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: big.ID, DigestSeen: big.ArgsDigest, EffectSeen: big.EffectDigest,
			Evidence: steppedUp(e.alice, big.ID, big.ArgsDigest, nil, assertion)})
		if err != nil {
			t.Fatal(err)
		}
		if d := got.Approvals()[0]; string(d.Evidence) != string(assertion) || !reflect.DeepEqual(d.AMR, []string{"pwd", "webauthn"}) {
			t.Errorf("stored approval: amr %v evidence %s", d.AMR, d.Evidence)
		}
	})
}

// writes.Evidence has no exported field, so outside its package no
// struct literal can fill one in; with its package internal to models, only
// models/auth and models/stepup make it (TestEvidenceCannotBeForged in
// handlers/console compiles the attempts).
func TestEvidenceHasNoExportedField(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[writes.Evidence]()
	if typ.NumField() == 0 {
		t.Fatal("Evidence has no fields at all")
	}
	for i := range typ.NumField() {
		if f := typ.Field(i); f.IsExported() {
			t.Errorf("Evidence.%s is exported: code outside models could forge evidence", f.Name)
		}
	}
}
