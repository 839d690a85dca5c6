package stepup

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"strings"

	"github.com/go-webauthn/webauthn/protocol"

	"github.com/countersign/countersign/models"
)

// EvidenceFormat names the layout of Evidence; it changes if the layout does.
const EvidenceFormat = "countersign.webauthn.assertion.v1"

var b64 = base64.RawURLEncoding

// Evidence is what an approval with a security key leaves behind, stored as
// the decision's evidence (JSON). The assertion itself — credential id,
// authenticator data, client data JSON and signature — is kept byte for
// byte, with the public key it verified under and the nonce, so that anyone
// can later check, from these fields and the proposal alone, that this key
// signed the challenge derived from this proposal's id and digest (see
// Challenge and VerifyEvidence). Binary fields are base64url without
// padding.
type Evidence struct {
	Format     string `json:"format"` // EvidenceFormat
	ProposalID string `json:"proposal_id"`
	ArgsDigest string `json:"args_digest"`

	// The assertion, as the browser returned it.
	CredentialID      string `json:"credential_id"`
	AuthenticatorData string `json:"authenticator_data"`
	ClientDataJSON    string `json:"client_data_json"`
	Signature         string `json:"signature"`
	UserHandle        string `json:"user_handle,omitempty"`

	// PublicKey is the key's COSE_Key as registered; PublicKeyAlgorithm its
	// COSE algorithm (e.g. -7 for ES256).
	PublicKey          string `json:"public_key"`
	PublicKeyAlgorithm int64  `json:"public_key_algorithm,omitempty"`

	// Nonce is the server nonce; Challenge = Challenge(ProposalID,
	// ArgsDigest, Nonce), base64url.
	Nonce     string `json:"nonce"`
	Challenge string `json:"challenge"`

	// What the server checked when the assertion arrived.
	RPID         string `json:"rp_id"`
	Origin       string `json:"origin"`
	SignCount    uint32 `json:"sign_count"`
	UserVerified bool   `json:"user_verified"`

	// KeyID and KeyName name the registered key at the time of approval;
	// informational, not covered by the signature.
	KeyID   string `json:"key_id,omitempty"`
	KeyName string `json:"key_name,omitempty"`
}

// ParseEvidence decodes a decision's evidence. EInvalidRequest when it is
// not evidence of this format.
func ParseEvidence(raw json.RawMessage) (Evidence, error) {
	var ev Evidence
	if len(raw) == 0 {
		return ev, models.Errorf(models.EInvalidRequest, "there is no security-key evidence")
	}
	if err := json.Unmarshal(raw, &ev); err != nil {
		return ev, models.Wrap(models.EInvalidRequest, err, "the evidence is not valid JSON")
	}
	if ev.Format != EvidenceFormat {
		return ev, models.Errorf(models.EInvalidRequest, "the evidence has format %q, not %q", ev.Format, EvidenceFormat)
	}
	return ev, nil
}

// VerifyEvidence re-verifies, from the proposal and the evidence alone, that
// the evidence's key signed, with the user verified, the challenge derived
// from this proposal's id and args digest and the evidence's nonce, at the
// evidence's origin and relying party:
//
//  1. Challenge(p.ID, p.ArgsDigest, nonce) equals the evidence's challenge
//     and the challenge in the signed client data (else EArgsMismatch: the
//     approval was for another proposal or other arguments);
//  2. the client data is a webauthn.get at the evidence's origin, whose host
//     is the RP ID or one of its subdomains;
//  3. the authenticator data's RP ID hash is SHA-256(rp_id), its flags say
//     user present and user verified, its counter is the evidence's;
//  4. the signature verifies under the evidence's public key over
//     authenticator data || SHA-256(client data JSON).
//
// It does not say whose key it is: compare PublicKey with the registered key
// (the CLI does). Errors: EInvalidRequest (not evidence), EArgsMismatch,
// EStepUpFailed.
func VerifyEvidence(p *models.Proposal, raw json.RawMessage) error {
	ev, err := ParseEvidence(raw)
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return models.Errorf(models.EStepUpFailed, format, args...)
	}
	credID, err1 := b64.DecodeString(ev.CredentialID)
	authData, err2 := b64.DecodeString(ev.AuthenticatorData)
	clientData, err3 := b64.DecodeString(ev.ClientDataJSON)
	sig, err4 := b64.DecodeString(ev.Signature)
	pub, err5 := b64.DecodeString(ev.PublicKey)
	nonce, err6 := b64.DecodeString(ev.Nonce)
	handle, err7 := b64.DecodeString(ev.UserHandle)
	for _, e := range []error{err1, err2, err3, err4, err5, err6, err7} {
		if e != nil {
			return models.Wrap(models.EInvalidRequest, e, "a field of the evidence is not base64url")
		}
	}
	if len(nonce) < 16 {
		return bad("the evidence's nonce is too short (%d bytes)", len(nonce))
	}

	// 1. The challenge is this proposal's.
	want := b64.EncodeToString(Challenge(p.ID, p.ArgsDigest, nonce))
	if ev.ProposalID != p.ID || ev.ArgsDigest != p.ArgsDigest ||
		subtle.ConstantTimeCompare([]byte(want), []byte(ev.Challenge)) != 1 {
		return models.Errorf(models.EArgsMismatch,
			"the security key signed a challenge that is not derived from proposal %s and digest %s", p.ID, p.ArgsDigest)
	}

	// 2–4: the library's assertion checks, against the evidence's own
	// relying party and origin.
	if !originMatchesRPID(ev.Origin, ev.RPID) {
		return bad("the origin %q is not within the relying party %q", ev.Origin, ev.RPID)
	}
	car := protocol.CredentialAssertionResponse{
		PublicKeyCredential: protocol.PublicKeyCredential{
			Credential: protocol.Credential{ID: ev.CredentialID, Type: string(protocol.PublicKeyCredentialType)},
			RawID:      credID,
		},
		AssertionResponse: protocol.AuthenticatorAssertionResponse{
			AuthenticatorResponse: protocol.AuthenticatorResponse{ClientDataJSON: clientData},
			AuthenticatorData:     authData,
			Signature:             sig,
			UserHandle:            handle,
		},
	}
	parsed, err := car.Parse()
	if err != nil {
		return models.Wrap(models.EStepUpFailed, err, "the evidence's assertion does not parse")
	}
	if subtle.ConstantTimeCompare([]byte(parsed.Response.CollectedClientData.Challenge), []byte(want)) != 1 {
		return models.Errorf(models.EArgsMismatch, "the signed client data carries another challenge than this proposal's")
	}
	if err := parsed.Verify(want, ev.RPID, "", []string{ev.Origin}, nil, nil, protocol.TopOriginExplicitVerificationMode,
		false, true, true, pub, protocol.SignaturePolicy{}); err != nil {
		return models.Wrap(models.EStepUpFailed, err, "the assertion does not verify: "+libraryReason(err))
	}
	ad := parsed.Response.AuthenticatorData
	if ad.Counter != ev.SignCount {
		return bad("the signed counter is %d, the evidence says %d", ad.Counter, ev.SignCount)
	}
	if !ev.UserVerified {
		return bad("the evidence does not record user verification")
	}
	return nil
}

// originMatchesRPID reports whether origin's host is rpID or a subdomain
// of it, as browsers require of a relying party ID.
func originMatchesRPID(origin, rpID string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || rpID == "" {
		return false
	}
	host := strings.ToLower(u.Hostname())
	rpID = strings.ToLower(rpID)
	return host == rpID || strings.HasSuffix(host, "."+rpID)
}

// libraryReason is the short, safe description of a go-webauthn failure
// for the person at the browser: the library's user-facing Details, or its
// error type. Its DevInfo (expected values, hashes) and any other error's
// text stay in the wrapped cause, for logs only.
func libraryReason(err error) string {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return "verification failed"
	}
	if msg := strings.Join(nonEmpty(pe.Details), ": "); msg != "" {
		return msg
	}
	if pe.Type != "" {
		return pe.Type
	}
	return "verification failed"
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Verdict is the outcome of checking one approval of a proposal.
type Verdict struct {
	Decision models.Decision
	// Evidence is the decoded evidence, when there was any.
	Evidence *Evidence
	// Required reports whether the tier required a security key.
	Required bool
	// Err is nil when the approval holds: its evidence verifies, or the
	// tier needed none and none was given.
	Err error
}

// VerifyApprovals checks every approval of p: an approval with evidence
// must verify (VerifyEvidence) and must have been given for the stored
// digest; on a tier that requires a security key, an approval without
// evidence fails.
func VerifyApprovals(p *models.Proposal) []Verdict {
	required := p.Tier.Confirmation == models.ConfirmWebAuthn
	var out []Verdict
	for _, d := range p.Approvals() {
		v := Verdict{Decision: d, Required: required}
		switch {
		case len(d.Evidence) == 0 && required:
			v.Err = models.Errorf(models.EStepUpRequired, "no security-key evidence, but the %s tier requires it", p.Tier.Name)
		case len(d.Evidence) == 0:
		case d.DigestSeen != p.ArgsDigest:
			v.Err = models.Errorf(models.EArgsMismatch, "approved digest %s, not the proposal's %s", d.DigestSeen, p.ArgsDigest)
		default:
			if ev, err := ParseEvidence(d.Evidence); err == nil {
				v.Evidence = &ev
			}
			v.Err = VerifyEvidence(p, d.Evidence)
		}
		out = append(out, v)
	}
	return out
}

// SamePublicKey reports whether the evidence was signed by the registered
// key pub (a COSE_Key).
func (ev Evidence) SamePublicKey(pub []byte) bool {
	got, err := b64.DecodeString(ev.PublicKey)
	return err == nil && bytes.Equal(got, pub)
}

// CredentialIDBytes returns the decoded credential id, or nil.
func (ev Evidence) CredentialIDBytes() []byte {
	b, err := b64.DecodeString(ev.CredentialID)
	if err != nil {
		return nil
	}
	return b
}
