package console_test

import (
	"github.com/descope/virtualwebauthn"

	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/stepup"
)

// softKey is a reviewer's software security key, registered with the
// step-up service.
type softKey struct {
	authr virtualwebauthn.Authenticator
	cred  virtualwebauthn.Credential
}

const (
	testRPID   = "localhost"
	testOrigin = "http://localhost"
)

// stepUpConfirm approves p as u the only way a security-key tier allows:
// a WebAuthn assertion over p's transaction challenge, verified by the
// step-up service, which then confirms through the protocol.
func (e *env) stepUpConfirm(p *models.Proposal, u models.User) *models.Proposal {
	e.t.Helper()
	if e.stepUp == nil {
		su, err := stepup.New(stepup.Config{RPID: testRPID, Origins: []string{testOrigin}, Store: e.store, Protocol: e.svc, Clock: e.clock})
		if err != nil {
			e.t.Fatal(err)
		}
		e.stepUp, e.keys = su, map[string]*softKey{}
	}
	rp := virtualwebauthn.RelyingParty{ID: testRPID, Name: "countersign", Origin: testOrigin}
	k := e.keys[u.ID]
	if k == nil {
		k = &softKey{authr: virtualwebauthn.NewAuthenticator(), cred: webauthntest.NewCredential()}
		opts, err := e.stepUp.BeginRegistration(e.ctx, u, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		ao, err := virtualwebauthn.ParseAttestationOptions(string(opts))
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.stepUp.FinishRegistration(e.ctx, u, u.Name+"'s key",
			[]byte(virtualwebauthn.CreateAttestationResponse(rp, k.authr, k.cred, *ao))); err != nil {
			e.t.Fatal(err)
		}
		e.keys[u.ID] = k
	}
	opts, err := e.stepUp.BeginApproval(e.ctx, u, p.ID, p.ArgsDigest)
	if err != nil {
		e.t.Fatal(err)
	}
	as, err := virtualwebauthn.ParseAssertionOptions(string(opts))
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := e.stepUp.FinishApproval(e.ctx, stepup.ApprovalInput{Reviewer: u, SignedIn: auth.ApprovalEvidence(u, nil),
		ProposalID: p.ID, EffectSeen: p.EffectDigest, Response: []byte(virtualwebauthn.CreateAssertionResponse(rp, k.authr, k.cred, *as))})
	if err != nil {
		e.t.Fatalf("step-up approval: %v", err)
	}
	return out
}
