package stepup

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/internal/verified"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// Defaults for Config's zero values.
const (
	// DefaultApprovalTTL bounds an approval or removal ceremony: the nonce
	// of a transaction challenge is good for this long, once.
	DefaultApprovalTTL = 2 * time.Minute
	// DefaultRegistrationTTL bounds a registration ceremony.
	DefaultRegistrationTTL = 5 * time.Minute
	// DefaultPasskeySignIns and DefaultPasskeyWindow bound the passkey
	// sign-ins a source address may begin and leave unfinished, as the
	// password sign-in's defaults bound its failures.
	DefaultPasskeySignIns = 20
	DefaultPasskeyWindow  = 15 * time.Minute
	// DefaultRPName is the relying party's name browsers show.
	DefaultRPName = "countersign"
)

// MaxKeyName bounds a key's name, in characters.
const MaxKeyName = 64

// Protocol is what the step-up needs from the protocol;
// *writes.Service implements it.
type Protocol interface {
	// CheckApprove refuses early what Confirm would refuse anyway.
	CheckApprove(ctx context.Context, reviewer models.User, proposalID, digestSeen string) (*models.Proposal, error)
	Get(ctx context.Context, tenantID, id string) (*models.Proposal, error)
	Confirm(ctx context.Context, in writes.ConfirmInput) (*models.Proposal, error)
}

// Config configures a Service.
type Config struct {
	// RPID is the relying party id: the console's host name or a parent
	// domain of it, e.g. "localhost" or "example.com". Required.
	RPID string
	// RPName is shown by browsers during ceremonies; DefaultRPName when
	// empty.
	RPName string
	// Origins are the exact origins the console is served at, e.g.
	// "https://countersign.example.com". At least one.
	Origins []string

	Store    *store.Store
	Protocol Protocol
	Clock    models.Clock // models.SystemClock when nil

	// ApprovalTTL and RegistrationTTL bound ceremonies; the defaults when
	// zero.
	ApprovalTTL     time.Duration
	RegistrationTTL time.Duration

	// PasskeySignIns is how many passkey sign-ins one source address may
	// begin in PasskeyWindow without finishing them (a sign-in that
	// succeeds gives its count back); DefaultPasskeySignIns and
	// DefaultPasskeyWindow when zero. Each refused sign-in of one account is
	// recorded in the audit log up to PasskeySignIns times per window.
	PasskeySignIns int
	PasskeyWindow  time.Duration

	// Metadata, when set, is the attestation policy (LoadMetadata): keys
	// are asked for their attestation and registered only when it proves a
	// model the FIDO Metadata Service certifies, and a registered key whose
	// model it reports compromised or revoked (Metadata.Compromised)
	// approves nothing and signs nobody in. Nil accepts any authenticator
	// that verifies its user.
	Metadata *Metadata
}

// Service runs the security-key ceremonies. It keeps no state of its own
// beyond its configuration: every ceremony lives in the store. It is safe
// for concurrent use and across instances.
type Service struct {
	wa       *webauthn.WebAuthn
	enroll   *webauthn.WebAuthn // registrations: wa, or wa with the attestation policy
	rpID     string
	origins  []string
	store    *store.Store
	proto    Protocol
	clock    models.Clock
	approval time.Duration
	register time.Duration
	// passkeys per passkeyWindow: see Config.PasskeySignIns.
	passkeys      int
	passkeyWindow time.Duration
	mds           *Metadata // nil: no attestation policy
}

// New checks the configuration and makes the one WebAuthn relying party the
// service uses.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Protocol == nil {
		return nil, errors.New("stepup: store and protocol are required")
	}
	if err := CheckRelyingParty(cfg.RPID, cfg.Origins); err != nil {
		return nil, fmt.Errorf("stepup: %w", err)
	}
	s := &Service{rpID: cfg.RPID, origins: slices.Clone(cfg.Origins), store: cfg.Store, proto: cfg.Protocol,
		clock: cfg.Clock, approval: cfg.ApprovalTTL, register: cfg.RegistrationTTL,
		passkeys: cfg.PasskeySignIns, passkeyWindow: cfg.PasskeyWindow, mds: cfg.Metadata}
	if s.passkeys <= 0 {
		s.passkeys = DefaultPasskeySignIns
	}
	if s.passkeyWindow <= 0 {
		s.passkeyWindow = DefaultPasskeyWindow
	}
	if s.clock == nil {
		s.clock = models.SystemClock{}
	}
	if s.approval <= 0 {
		s.approval = DefaultApprovalTTL
	}
	if s.register <= 0 {
		s.register = DefaultRegistrationTTL
	}
	name := cfg.RPName
	if name == "" {
		name = DefaultRPName
	}
	// Ceremony expiry is the store's (with the server clock), not the
	// library's: the timeouts here only tell browsers how long to wait.
	wc := &webauthn.Config{
		RPID:                  cfg.RPID,
		RPDisplayName:         name,
		RPOrigins:             s.origins,
		AttestationPreference: protocol.PreferNoAttestation,
		AuthenticatorSelection: protocol.AuthenticatorSelection{
			ResidentKey:      protocol.ResidentKeyRequirementPreferred,
			UserVerification: protocol.VerificationRequired,
		},
		Timeouts: webauthn.TimeoutsConfig{
			Login:        webauthn.TimeoutConfig{Timeout: s.approval, TimeoutUVD: s.approval},
			Registration: webauthn.TimeoutConfig{Timeout: s.register, TimeoutUVD: s.register},
		},
	}
	wa, err := webauthn.New(wc)
	if err != nil {
		return nil, fmt.Errorf("stepup: %w", err)
	}
	s.wa, s.enroll = wa, wa
	if s.mds != nil {
		// Registrations ask for attestation and check it against the
		// metadata. Assertions do not go through the library's check, which
		// would refuse every key that does not meet the policy at every use,
		// locking out whoever registered before it: approvals and passkey
		// sign-ins refuse only keys of a model the metadata reports
		// compromised (Service.Compromised), and the keys page marks the
		// others.
		rc := *wc
		rc.AttestationPreference, rc.MDS = protocol.PreferDirectAttestation, s.mds.Provider
		if s.enroll, err = webauthn.New(&rc); err != nil {
			return nil, fmt.Errorf("stepup: %w", err)
		}
	}
	return s, nil
}

// Metadata returns the attestation policy, nil when there is none.
func (s *Service) Metadata() *Metadata { return s.mds }

// Uncertified says why the key does not meet the attestation policy as it
// stands now, "" when it does or when there is no policy (see
// Metadata.Uncertified).
func (s *Service) Uncertified(ctx context.Context, k models.SecurityKey) string {
	if s.mds == nil {
		return ""
	}
	return s.mds.Uncertified(ctx, k)
}

// Compromised says why the key approves nothing under the attestation policy
// as it stands now: the metadata reports its model compromised or revoked
// (Metadata.Compromised, at the service's clock). "" when it does not, or
// when there is no policy.
func (s *Service) Compromised(ctx context.Context, k models.SecurityKey) string {
	statuses := s.compromised(ctx, k)
	if len(statuses) == 0 {
		return ""
	}
	return "the FIDO Metadata Service reports its model compromised or revoked (status " + strings.Join(statuses, ", ") + ")"
}

// compromised is Metadata.Compromised under the service's policy and clock.
func (s *Service) compromised(ctx context.Context, k models.SecurityKey) []string {
	if s.mds == nil {
		return nil
	}
	return s.mds.Compromised(ctx, k, s.clock.Now())
}

// compromisedKey is the refusal of an assertion by a key whose model the
// metadata reports compromised: what the key no longer does, what to do
// instead, and where the key is marked.
func compromisedKey(k models.SecurityKey, statuses []string, what, instead, nothing string) error {
	return &models.Error{Code: models.EKeyModelRevoked,
		Message: fmt.Sprintf("The FIDO Metadata Service reports the model of your key %q compromised or revoked (status %s), so it no longer %s here. "+
			"%s Register a certified security key under Security keys (/settings/keys), where this one is marked, and remove this one. %s",
			k.Name, strings.Join(statuses, ", "), what, instead, nothing),
		Details: map[string]any{"key_id": k.ID, "statuses": statuses}}
}

// RPID returns the relying party id.
func (s *Service) RPID() string { return s.rpID }

// Origins returns the accepted origins.
func (s *Service) Origins() []string { return slices.Clone(s.origins) }

// ---- The user adapter -------------------------------------------------------

// user adapts a reviewer and their keys to webauthn.User. The user handle is
// the user id, which is stable, unique across tenants and not personal.
type user struct {
	u     models.User
	creds []webauthn.Credential
}

var _ webauthn.User = (*user)(nil)

func (w *user) WebAuthnID() []byte                         { return []byte(w.u.ID) }
func (w *user) WebAuthnName() string                       { return w.u.Name }
func (w *user) WebAuthnDisplayName() string                { return w.u.Name }
func (w *user) WebAuthnCredentials() []webauthn.Credential { return w.creds }

// newUser adapts u with the given keys.
func newUser(u models.User, keys []models.SecurityKey) (*user, error) {
	w := &user{u: u}
	for _, k := range keys {
		c, err := credential(k)
		if err != nil {
			return nil, err
		}
		w.creds = append(w.creds, c)
	}
	return w, nil
}

// credential is the go-webauthn credential record of a stored key.
func credential(k models.SecurityKey) (webauthn.Credential, error) {
	c := webauthn.Credential{
		ID: k.CredentialID, PublicKey: k.PublicKey,
		AttestationType: k.AttestationType, AttestationFormat: k.AttestationFormat,
		Flags: webauthn.NewCredentialFlags(protocol.AuthenticatorFlags(k.Flags.Raw)),
		Authenticator: webauthn.Authenticator{AAGUID: k.AAGUID, SignCount: k.SignCount,
			Attachment: protocol.AuthenticatorAttachment(k.Attachment)},
	}
	for _, t := range k.Transports {
		c.Transport = append(c.Transport, protocol.AuthenticatorTransport(t))
	}
	if len(k.Attestation) > 0 {
		if err := json.Unmarshal(k.Attestation, &c.Attestation); err != nil {
			return c, fmt.Errorf("security key %s attestation: %w", k.ID, err)
		}
	}
	return c, nil
}

func keyFlags(f protocol.AuthenticatorFlags) models.KeyFlags {
	return models.KeyFlags{UserPresent: f.UserPresent(), UserVerified: f.UserVerified(),
		BackupEligible: f.HasBackupEligible(), BackupState: f.HasBackupState(), Raw: byte(f)}
}

// ---- Keys ---------------------------------------------------------------------

// Keys returns u's keys (flagged ones included, removed ones not), oldest
// first.
func (s *Service) Keys(ctx context.Context, u models.User) ([]models.SecurityKey, error) {
	return s.store.SecurityKeys(ctx, u.TenantID, u.ID)
}

// usableKeys are u's keys that may sign: prove possession before another
// key is registered, confirm a removal. A key of a compromised model is
// one of them (see approvingKeys).
func (s *Service) usableKeys(ctx context.Context, u models.User) ([]models.SecurityKey, error) {
	keys, err := s.Keys(ctx, u)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(keys, func(k models.SecurityKey) bool { return !k.Usable() }), nil
}

// approvingKeys are u's usable keys that may approve: all but those of a
// model the metadata reports compromised. Those still prove possession
// when their owner registers a certified key: were they not counted there,
// a reviewer whose only key is of such a model could register another
// with the password alone, and so could anyone with a stolen session.
func (s *Service) approvingKeys(ctx context.Context, u models.User) (approving, usable []models.SecurityKey, err error) {
	usable, err = s.usableKeys(ctx, u)
	if err != nil {
		return nil, nil, err
	}
	approving = slices.DeleteFunc(slices.Clone(usable), func(k models.SecurityKey) bool { return len(s.compromised(ctx, k)) > 0 })
	return approving, usable, nil
}

// HasUsableKey reports whether u has a key that may approve: usable, and
// not of a model the metadata reports compromised.
func (s *Service) HasUsableKey(ctx context.Context, u models.User) (bool, error) {
	keys, _, err := s.approvingKeys(ctx, u)
	return len(keys) > 0, err
}

// CleanKeyName trims a key's name and checks it: at most MaxKeyName
// characters, no control characters. EInvalidRequest otherwise.
func CleanKeyName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxKeyName ||
		strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return "", &models.Error{Code: models.EInvalidRequest,
			Message: fmt.Sprintf("a key's name is at most %d characters, without control characters", MaxKeyName),
			Fields:  []models.FieldProblem{{Pointer: "/name", Message: "invalid name"}}}
	}
	return name, nil
}

// RenameKey renames one of u's keys. EInvalidRequest for a bad or empty
// name; ENotFound for keys that are not u's.
func (s *Service) RenameKey(ctx context.Context, u models.User, keyID, name string) (models.SecurityKey, error) {
	name, err := CleanKeyName(name)
	if err != nil {
		return models.SecurityKey{}, err
	}
	if name == "" {
		return models.SecurityKey{}, &models.Error{Code: models.EInvalidRequest, Message: "give the key a name",
			Fields: []models.FieldProblem{{Pointer: "/name", Message: "a name is required"}}}
	}
	return s.store.RenameSecurityKey(ctx, u.TenantID, u.ID, keyID, name)
}

// ---- Registration -------------------------------------------------------------

// BeginRegistration starts registering a new security key or passkey for
// u. A reviewer who has a usable key already must first prove possession
// of one: otherwise a stolen password session could add its own key and
// approve high-risk writes with it. So:
//
//   - without a usable key, or with proof (the JSON of credential.toJSON()
//     answering an earlier {"confirm": …}), it returns the credential
//     creation options, {"publicKey": {...}} for
//     PublicKeyCredential.parseCreationOptionsFromJSON: user verification
//     required, a discoverable credential (passkey) preferred, u's keys
//     excluded;
//   - with a usable key and no proof, it returns {"confirm": {"publicKey":
//     {...}}}: request options the browser answers with one of u's keys
//     (user verification required) and sends back here as proof.
//
// Errors: EInvalidRequest (proof that is not an assertion), EStepUpFailed,
// EAlreadyConsumed, ECeremonyExpired (a proof that does not hold),
// EUnavailable.
func (s *Service) BeginRegistration(ctx context.Context, u models.User, proof []byte) (json.RawMessage, error) {
	usable, err := s.usableKeys(ctx, u)
	if err != nil {
		return nil, err
	}
	if len(usable) > 0 && len(proof) == 0 {
		return s.beginEnrollment(ctx, u, usable)
	}
	if len(usable) > 0 {
		if err := s.finishEnrollment(ctx, u, proof); err != nil {
			return nil, err
		}
	}
	keys, err := s.Keys(ctx, u)
	if err != nil {
		return nil, err
	}
	wu, err := newUser(u, keys)
	if err != nil {
		return nil, err
	}
	creation, sd, err := s.enroll.BeginRegistration(wu,
		webauthn.WithExclusions(webauthn.Credentials(wu.creds).CredentialDescriptors()),
		webauthn.WithExtensions(webauthn.WithExtensionCredProps()))
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot start the registration")
	}
	if err := s.saveCeremony(ctx, models.Ceremony{TenantID: u.TenantID, UserID: u.ID, Kind: models.CeremonyRegistration,
		Challenge: sd.Challenge}, sd, s.register); err != nil {
		return nil, err
	}
	return marshalOptions(creation)
}

// beginEnrollment asks for the proof of possession a further key needs.
func (s *Service) beginEnrollment(ctx context.Context, u models.User, usable []models.SecurityKey) (json.RawMessage, error) {
	wu, err := newUser(u, usable)
	if err != nil {
		return nil, err
	}
	assertion, sd, err := s.wa.BeginLogin(wu, webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot start the security-key confirmation")
	}
	if err := s.saveCeremony(ctx, models.Ceremony{TenantID: u.TenantID, UserID: u.ID, Kind: models.CeremonyEnrollment,
		Challenge: sd.Challenge}, sd, s.approval); err != nil {
		return nil, err
	}
	return marshalOptions(struct {
		Confirm *protocol.CredentialAssertion `json:"confirm"`
	}{assertion})
}

// finishEnrollment checks the proof of possession of one of u's keys.
func (s *Service) finishEnrollment(ctx context.Context, u models.User, proof []byte) error {
	const nothing = "No key was registered."
	parsed, err := protocol.ParseCredentialRequestResponseBytes(proof)
	if err != nil {
		return models.Wrap(models.EInvalidRequest, err, "the confirmation is not a security-key response")
	}
	c, sd, err := s.begun(ctx, u, models.CeremonyEnrollment, parsed.Response.CollectedClientData.Challenge, nothing)
	if err != nil {
		return err
	}
	if err := s.consume(ctx, c, nothing); err != nil {
		return err
	}
	_, err = s.verifyAssertion(ctx, u, sd, parsed, "", false, nothing)
	return err
}

// FinishRegistration verifies the browser's response to a registration
// begun by BeginRegistration (the JSON of credential.toJSON()) and stores
// the new key under name (a default name when empty).
//
// Errors: EInvalidRequest (not a registration response, bad name),
// EStepUpFailed (unknown request, wrong origin, no user verification, does
// not verify), EAlreadyConsumed, ECeremonyExpired, EAlreadyExists (the key
// is registered already), EUnavailable.
func (s *Service) FinishRegistration(ctx context.Context, u models.User, name string, response []byte) (models.SecurityKey, error) {
	const nothing = "No key was registered."
	name, err := CleanKeyName(name)
	if err != nil {
		return models.SecurityKey{}, err
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(response)
	if err != nil {
		return models.SecurityKey{}, models.Wrap(models.EInvalidRequest, err, "this is not a security-key registration response")
	}
	cd := parsed.Response.CollectedClientData
	c, sd, err := s.begun(ctx, u, models.CeremonyRegistration, cd.Challenge, nothing)
	if err != nil {
		return models.SecurityKey{}, err
	}
	if err := s.consume(ctx, c, nothing); err != nil {
		return models.SecurityKey{}, err
	}
	if err := s.checkClient(cd, protocol.CreateCeremony, parsed.Response.AttestationObject.AuthData, nothing); err != nil {
		return models.SecurityKey{}, err
	}
	keys, err := s.Keys(ctx, u)
	if err != nil {
		return models.SecurityKey{}, err
	}
	wu, err := newUser(u, keys)
	if err != nil {
		return models.SecurityKey{}, err
	}
	if s.mds != nil && parsed.Response.AttestationObject.Format == string(protocol.AttestationFormatNone) {
		// The library checks no metadata for an attestation that proves
		// nothing; under a policy that is a refusal.
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"Your organization registers only security keys that prove a model certified by the FIDO Metadata Service, and this key (or the browser) sent no attestation; some passkeys never do. Use a certified security key. %s", nothing)
	}
	cred, err := s.enroll.CreateCredential(wu, sd, parsed)
	if s.mds != nil && metadataRefusal(err) {
		return models.SecurityKey{}, models.Wrap(models.EStepUpFailed, err,
			"Your organization registers only security keys certified by the FIDO Metadata Service, and this one is not accepted ("+libraryReason(err)+"). Use a certified security key. "+nothing)
	}
	if err != nil {
		return models.SecurityKey{}, models.Wrap(models.EStepUpFailed, err,
			"Your security key's registration did not verify ("+libraryReason(err)+"). "+nothing)
	}
	if s.mds != nil && selfAttested(cred.AttestationType) {
		// Self attestation is signed by the new credential's own key: it
		// proves possession, not a model, whatever AAGUID it claims, even
		// where the metadata lists it for the model.
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"Your organization registers only security keys that prove a model certified by the FIDO Metadata Service, and this key's attestation is signed by the key itself, which proves no model. Use a certified security key. %s", nothing)
	}
	if name == "" {
		name = defaultName(cred, len(keys)+1)
	}
	att, err := json.Marshal(cred.Attestation)
	if err != nil {
		return models.SecurityKey{}, err
	}
	ext, err := json.Marshal(cred.Extensions)
	if err != nil {
		return models.SecurityKey{}, err
	}
	k := models.SecurityKey{TenantID: u.TenantID, UserID: u.ID, Name: name, CredentialID: cred.ID,
		PublicKey: cred.PublicKey, PublicKeyAlgorithm: cred.Attestation.PublicKeyAlgorithm,
		AttestationType: cred.AttestationType, AttestationFormat: cred.AttestationFormat,
		AAGUID: cred.Authenticator.AAGUID, SignCount: cred.Authenticator.SignCount,
		Flags: keyFlags(cred.Flags.ProtocolValue()), Attachment: string(cred.Authenticator.Attachment),
		Attestation: att, Extensions: ext, CreatedAt: s.clock.Now()}
	for _, t := range cred.Transport {
		k.Transports = append(k.Transports, string(t))
	}
	// A key registered by anyone since this ceremony began (e.g. by the
	// user while a stolen session had begun a proof-less registration)
	// makes this one start again, with proof.
	return s.store.CreateSecurityKeyIfNoneSince(ctx, k, c.CreatedAt)
}

// metadataRefusal reports whether err is (or wraps) the library's refusal
// of a key by the FIDO metadata.
func metadataRefusal(err error) bool {
	for err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			return false
		}
		if pe.Type == protocol.ErrMetadata.Type {
			return true
		}
		err = pe.Unwrap()
	}
	return false
}

// defaultName names a key the reviewer did not name.
func defaultName(c *webauthn.Credential, n int) string {
	kind := "Security key"
	if c.Authenticator.Attachment == protocol.Platform || c.Flags.BackupEligible {
		kind = "Passkey"
	}
	return fmt.Sprintf("%s %d", kind, n)
}

// ---- Approval -----------------------------------------------------------------

// BeginApproval starts the security-key step-up of reviewer's approval of
// a proposal, as seen with digestSeen. The assertion's challenge is
// Challenge(proposal id, args digest, nonce) with a fresh single-use nonce
// that lives DefaultApprovalTTL (or Config.ApprovalTTL); user verification
// is required; any of the reviewer's usable keys may answer, but for those
// of a model the metadata reports compromised, which the options do not
// name. It returns the request options as JSON ({"publicKey": {...}}, for
// PublicKeyCredential.parseRequestOptionsFromJSON).
//
// Errors: those of writes.Service.CheckApprove (ENotFound, EForbidden,
// EProposalExpired, EInvalidState, EArgsMismatch, ESelfApproval,
// EAlreadyDecided), EInvalidRequest (the tier needs no security key),
// EStepUpRequired (the reviewer has no usable key), EKeyModelRevoked (every
// usable key is of a compromised model), EUnavailable.
func (s *Service) BeginApproval(ctx context.Context, reviewer models.User, proposalID, digestSeen string) (json.RawMessage, error) {
	p, err := s.proto.CheckApprove(ctx, reviewer, proposalID, digestSeen)
	if err != nil {
		return nil, err
	}
	if p.Tier.Confirmation != models.ConfirmWebAuthn {
		return nil, models.Errorf(models.EInvalidRequest,
			"the %s tier needs no security key: approve this proposal with the Approve button", p.Tier.Name)
	}
	keys, usable, err := s.approvingKeys(ctx, reviewer)
	if err != nil {
		return nil, err
	}
	if len(usable) > 0 && len(keys) == 0 {
		k := usable[0]
		return nil, compromisedKey(k, s.compromised(ctx, k), "approves anything", "Approve with a certified key.", "Nothing was approved.")
	}
	if len(keys) == 0 {
		return nil, models.Errorf(models.EStepUpRequired,
			"You have no usable security key. Register one under Security keys (/settings/keys), then approve. Nothing was approved.")
	}
	nonce := make([]byte, NonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	wu, err := newUser(reviewer, keys)
	if err != nil {
		return nil, err
	}
	assertion, sd, err := s.wa.BeginLogin(wu,
		webauthn.WithChallenge(Challenge(p.ID, p.ArgsDigest, nonce)),
		webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot start the security-key confirmation")
	}
	if err := s.saveCeremony(ctx, models.Ceremony{TenantID: reviewer.TenantID, UserID: reviewer.ID,
		Kind: models.CeremonyAssertion, ProposalID: p.ID, ArgsDigest: p.ArgsDigest, Nonce: nonce,
		Challenge: sd.Challenge}, sd, s.approval); err != nil {
		return nil, err
	}
	return marshalOptions(assertion)
}

// ApprovalInput is the browser's answer to BeginApproval.
type ApprovalInput struct {
	Reviewer models.User
	// SignedIn is how the reviewer's session began (auth.ApprovalEvidence);
	// the verified assertion is added to it.
	SignedIn   writes.Evidence
	ProposalID string // the proposal the answer is posted to
	Response   []byte // credential.toJSON() of the assertion
	Comment    string // the reviewer's optional comment (ConfirmInput.Comment)
	// EffectSeen is the effect digest the page showed (ConfirmInput.EffectSeen).
	EffectSeen string
}

// FinishApproval verifies the browser's answer to BeginApproval and, when it
// holds, records the approval through writes.Service.Confirm with the
// evidence and returns the proposal as it stands. In order:
//
//  1. the response names a ceremony begun for this reviewer and for this
//     proposal (EArgsMismatch: "made for a different proposal");
//  2. the answer names the effect digest stored with the proposal
//     (writes.EffectNamed: EEffectChanged), checked before anything is
//     consumed;
//  3. the ceremony is consumed, once (EAlreadyConsumed: a response
//     presented twice; ECeremonyExpired);
//  4. the challenge is recomputed from the stored proposal's id and digest
//     and the ceremony's nonce, and must be the one signed (EArgsMismatch);
//  5. origin, RP ID, user presence and user verification, then the
//     signature under the registered key (EStepUpFailed);
//  6. the key must not be of a model the metadata now reports compromised
//     (EKeyModelRevoked; its use is not recorded);
//  7. the key's signature counter must move forward; a regression flags the
//     key and refuses (EStepUpFailed);
//  8. writes.Service.Confirm decides the rest (quorum, self-approval,
//     expiry, business state) with the sign-in plus the verified assertion
//     as evidence (AMR: the sign-in's methods and "webauthn").
//
// A refusal from step 5 on is recorded in the audit log (stepup.failed,
// with its code), once per ceremony, which it has used up.
//
// Errors: the above, EInvalidRequest (not an assertion), and those of
// Confirm.
func (s *Service) FinishApproval(ctx context.Context, in ApprovalInput) (*models.Proposal, error) {
	const nothing = "Nothing was approved."
	u := in.Reviewer
	if in.SignedIn.IsZero() || in.SignedIn.UserID() != u.ID {
		return nil, models.Errorf(models.EUnauthenticated, "a security-key approval needs the reviewer's own sign-in. %s", nothing)
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(in.Response)
	if err != nil {
		return nil, models.Wrap(models.EInvalidRequest, err, "this is not a security-key response")
	}
	cd := parsed.Response.CollectedClientData
	c, sd, err := s.begun(ctx, u, models.CeremonyAssertion, cd.Challenge, nothing)
	if err != nil {
		return nil, err
	}
	if c.ProposalID != in.ProposalID {
		return nil, models.Errorf(models.EArgsMismatch,
			"This approval was made for a different proposal (%s), not this one. %s", c.ProposalID, nothing)
	}
	p, err := s.proto.Get(ctx, u.TenantID, in.ProposalID)
	if err != nil {
		return nil, err
	}
	// An answer from a page that did not show the stored effect would be
	// refused by Confirm anyway; refused here, it consumes nothing.
	if err := writes.EffectNamed(p, in.EffectSeen); err != nil {
		return nil, err
	}
	if err := s.consume(ctx, c, nothing); err != nil {
		return nil, err
	}
	want := b64.EncodeToString(Challenge(p.ID, p.ArgsDigest, c.Nonce))
	if !equal(want, cd.Challenge) || !equal(want, sd.Challenge) || c.ArgsDigest != p.ArgsDigest {
		return nil, models.Errorf(models.EArgsMismatch,
			"This approval was made for a different proposal or other arguments: its challenge is not this proposal's. %s", nothing)
	}
	key, err := s.verifyAssertion(ctx, u, sd, parsed, "", true, nothing)
	if err != nil {
		// The ceremony is consumed; the failure is recorded (best effort:
		// the answer to the reviewer does not depend on it).
		_ = s.store.Audit(ctx, u.TenantID, s.clock.Now(), models.AuditEvent{Kind: models.AuditStepUpFailed, Actor: u.ID,
			ProposalID: p.ID, Data: map[string]any{"user_id": u.ID, "credential_id": b64.EncodeToString(parsed.RawID),
				"code": models.ErrorCode(err), "reason": models.ErrorMessage(err)}})
		return nil, err
	}
	ad := parsed.Response.AuthenticatorData
	ev := Evidence{Format: EvidenceFormat, ProposalID: p.ID, ArgsDigest: p.ArgsDigest,
		CredentialID:      b64.EncodeToString(parsed.RawID),
		AuthenticatorData: b64.EncodeToString(parsed.Raw.AssertionResponse.AuthenticatorData),
		ClientDataJSON:    b64.EncodeToString(parsed.Raw.AssertionResponse.ClientDataJSON),
		Signature:         b64.EncodeToString(parsed.Response.Signature),
		UserHandle:        b64.EncodeToString(parsed.Response.UserHandle),
		PublicKey:         b64.EncodeToString(key.PublicKey), PublicKeyAlgorithm: key.PublicKeyAlgorithm,
		Nonce: b64.EncodeToString(c.Nonce), Challenge: want, RPID: s.rpID, Origin: cd.Origin,
		SignCount: ad.Counter, UserVerified: ad.Flags.UserVerified(), KeyID: key.ID, KeyName: key.Name}
	raw, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	// The one place that makes step-up evidence: the assertion above
	// verified over this proposal's challenge.
	return s.proto.Confirm(ctx, writes.ConfirmInput{Reviewer: u, ProposalID: p.ID, DigestSeen: c.ArgsDigest,
		Evidence: verified.StepUp(in.SignedIn, p.ID, c.ArgsDigest, raw), Comment: in.Comment, EffectSeen: in.EffectSeen})
}

// CheckEvidence re-verifies one approval of p and says whose key signed
// it: the evidence must verify against p (VerifyEvidence), have been made
// for this console's relying party at one of its origins, and carry the
// public key of a key registered, in p's tenant, to the approver d.UserID
// (removed since or not). The evidence carries its own public key, so a
// signature that verifies proves nothing about whose key it is until it is
// matched with a registered one. It returns that registered key.
//
// Errors: those of VerifyEvidence (EInvalidRequest, EArgsMismatch,
// EStepUpFailed), EStepUpFailed (another relying party or origin, a key
// that is not the approver's), EUnavailable.
func (s *Service) CheckEvidence(ctx context.Context, p *models.Proposal, d models.Decision) (models.SecurityKey, error) {
	if err := VerifyEvidence(p, d.Evidence); err != nil {
		return models.SecurityKey{}, err
	}
	ev, err := ParseEvidence(d.Evidence)
	if err != nil {
		return models.SecurityKey{}, err
	}
	if ev.RPID != s.rpID || !slices.Contains(s.origins, ev.Origin) {
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"the assertion was made for %s at %s, not for this console (%s at %s)",
			ev.RPID, ev.Origin, s.rpID, strings.Join(s.origins, ", "))
	}
	k, err := s.store.SecurityKeyByCredentialID(ctx, p.TenantID, ev.CredentialIDBytes())
	switch {
	case models.IsCode(err, models.ENotFound):
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"the signing key (credential %s) was never registered in this organization", ev.CredentialID)
	case err != nil:
		return models.SecurityKey{}, err
	case k.UserID != d.UserID:
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"the signing key %q is registered to another user, not to the approver", k.Name)
	case !ev.SamePublicKey(k.PublicKey):
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"the evidence's public key is not the registered key %q", k.Name)
	}
	return k, nil
}

// ---- Removal ------------------------------------------------------------------

// BeginRemoval starts the fresh step-up that removing one of u's keys
// requires: an assertion, with user verification, by any of u's usable
// keys — or by the key itself when it was flagged. It returns the request
// options as JSON. ENotFound for keys that are not u's; EStepUpRequired
// when no key can sign.
func (s *Service) BeginRemoval(ctx context.Context, u models.User, keyID string) (json.RawMessage, error) {
	target, err := s.store.SecurityKey(ctx, u.TenantID, u.ID, keyID)
	if err != nil {
		return nil, err
	}
	signers, err := s.usableKeys(ctx, u)
	if err != nil {
		return nil, err
	}
	if !target.Usable() {
		signers = append(signers, target)
	}
	if len(signers) == 0 {
		return nil, models.Errorf(models.EStepUpRequired, "no key of yours can confirm the removal")
	}
	wu, err := newUser(u, signers)
	if err != nil {
		return nil, err
	}
	assertion, sd, err := s.wa.BeginLogin(wu, webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot start the security-key confirmation")
	}
	if err := s.saveCeremony(ctx, models.Ceremony{TenantID: u.TenantID, UserID: u.ID, Kind: models.CeremonyRemoval,
		KeyID: target.ID, Challenge: sd.Challenge}, sd, s.approval); err != nil {
		return nil, err
	}
	return marshalOptions(assertion)
}

// FinishRemoval verifies the answer to BeginRemoval and removes the key,
// which ends the sessions it began but the one the removal is confirmed
// in (session, its handle): that person has just proved a key again. A
// flagged key may confirm only its own removal.
//
// Errors: EInvalidRequest, EArgsMismatch (the confirmation was for another
// key), EAlreadyConsumed, ECeremonyExpired, EStepUpFailed, ENotFound,
// EUnavailable.
func (s *Service) FinishRemoval(ctx context.Context, u models.User, session, keyID string, response []byte) error {
	const nothing = "No key was removed."
	parsed, err := protocol.ParseCredentialRequestResponseBytes(response)
	if err != nil {
		return models.Wrap(models.EInvalidRequest, err, "this is not a security-key response")
	}
	c, sd, err := s.begun(ctx, u, models.CeremonyRemoval, parsed.Response.CollectedClientData.Challenge, nothing)
	if err != nil {
		return err
	}
	if c.KeyID != keyID {
		return models.Errorf(models.EArgsMismatch, "This confirmation was made for removing another key. %s", nothing)
	}
	if err := s.consume(ctx, c, nothing); err != nil {
		return err
	}
	if _, err := s.verifyAssertion(ctx, u, sd, parsed, keyID, false, nothing); err != nil {
		return err
	}
	return s.store.RemoveSecurityKey(ctx, u.TenantID, u.ID, keyID, session, s.clock.Now())
}

// ---- Passkey sign-in ----------------------------------------------------------

// badPasskey is the one answer to every failed passkey sign-in that is not
// a ceremony problem: unknown organization, key or user, disabled account.
func badPasskey(err error) error {
	return models.Wrap(models.EUnauthenticated, err,
		"This passkey does not sign anyone in to this organization. Check the organization, or sign in with your password.")
}

// BeginPasskeyLogin starts a sign-in with a passkey (a discoverable
// credential, user verification required) to the organization tenantName,
// from the source address clientIP, and returns the request options as
// JSON ({"publicKey": {...}}). An unknown organization gets options too,
// which no answer can complete, so that the answer does not tell which
// organizations exist. Every sign-in begun counts against the address,
// for the organization name as typed (PasskeySignIns per PasskeyWindow,
// apart from password sign-ins), until it succeeds: beyond that it is ERateLimited, saying when to come back,
// so that nobody can store ceremonies, or refusals in the audit log,
// without bound. A browser that signed in to the organization before
// (deviceID, its remembered-device id; "" for any other) counts against
// itself instead of the address, so that a flood from a shared address
// never keeps it from signing in.
// EUnavailable on database errors.
func (s *Service) BeginPasskeyLogin(ctx context.Context, tenantName, clientIP, deviceID string) (json.RawMessage, error) {
	now := s.clock.Now()
	retryAt, ok, err := s.store.ReserveLoginAttempt(ctx, now, s.passkeyWindow,
		[]models.LoginLimit{{Key: passkeyLimitKey(tenantName, clientIP, deviceID), Max: s.passkeys}})
	if err != nil {
		return nil, err
	}
	if !ok {
		wait := max(retryAt.Sub(now), time.Second)
		return nil, models.RateLimited("passkey_sign_ins", wait,
			"Too many passkey sign-ins from your address were not finished. Try again after %s, or sign in with your password.",
			retryAt.UTC().Format("15:04:05 UTC"))
	}
	assertion, sd, err := s.wa.BeginDiscoverableLogin(webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot start the passkey sign-in")
	}
	t, err := s.store.TenantByName(ctx, strings.TrimSpace(tenantName))
	switch {
	case models.IsCode(err, models.ENotFound):
		return marshalOptions(assertion)
	case err != nil:
		return nil, err
	}
	if err := s.saveCeremony(ctx, models.Ceremony{TenantID: t.ID, Kind: models.CeremonyLogin, Challenge: sd.Challenge},
		sd, s.approval); err != nil {
		return nil, err
	}
	return marshalOptions(assertion)
}

// passkeyLimitKey is the rate-limit key of a passkey sign-in to the
// organization typed as tenantName: the remembered device's when there is
// one, else the source address's for that name ("" when the address is
// not known: one count for all). Keyed by the name as typed, whether or
// not an organization has it, so that sign-ins begun with made-up names
// do not use up a real organization's count at a shared address, and
// the limit does not tell which names exist.
func passkeyLimitKey(tenantName, clientIP, deviceID string) string {
	if deviceID != "" {
		return "passkey-device:" + deviceID
	}
	name := sha256.Sum256([]byte(strings.TrimSpace(tenantName)))
	return "passkey-ip:" + clientIP + ":" + hex.EncodeToString(name[:8])
}

// FinishPasskeyLogin verifies the answer to BeginPasskeyLogin and returns
// the tenant and the user the passkey belongs to, who may then be signed
// in: the ceremony is consumed once; origin, RP ID, user presence and
// verification and the signature are checked; the key must not be of a
// model the metadata reports compromised; the key's counter must move
// forward (else it is flagged); the user must be enabled. A success gives
// back the count its beginning took (from clientIP or deviceID, as there). A refusal once the
// answer names an account of the organization (disabled, a key that is
// not theirs or is flagged, an assertion that does not verify) is recorded
// in the organization's audit log (session.sign_in_failed), at most
// PasskeySignIns per account per window; refusals before that name nobody
// and are not.
//
// It returns the organization, the account and the key that signed in.
//
// Errors: EInvalidRequest, EStepUpFailed, EKeyModelRevoked,
// EAlreadyConsumed, ECeremonyExpired, EUnauthenticated (unknown
// organization or key, disabled user), EUnavailable.
func (s *Service) FinishPasskeyLogin(ctx context.Context, tenantName string, response []byte, clientIP, deviceID string) (models.Tenant, models.User, models.SecurityKey, error) {
	const nothing = "Nobody was signed in."
	parsed, err := protocol.ParseCredentialRequestResponseBytes(response)
	if err != nil {
		return models.Tenant{}, models.User{}, models.SecurityKey{}, models.Wrap(models.EInvalidRequest, err, "this is not a passkey response")
	}
	t, err := s.store.TenantByName(ctx, strings.TrimSpace(tenantName))
	if models.IsCode(err, models.ENotFound) {
		return models.Tenant{}, models.User{}, models.SecurityKey{}, badPasskey(err)
	}
	if err != nil {
		return models.Tenant{}, models.User{}, models.SecurityKey{}, err
	}
	anyone := models.User{TenantID: t.ID}
	c, sd, err := s.begun(ctx, anyone, models.CeremonyLogin, parsed.Response.CollectedClientData.Challenge, nothing)
	if err != nil {
		return models.Tenant{}, models.User{}, models.SecurityKey{}, err
	}
	if err := s.consume(ctx, c, nothing); err != nil {
		return models.Tenant{}, models.User{}, models.SecurityKey{}, err
	}
	// The account the answer names, when it names one of the organization:
	// a refusal from here on is recorded in its name.
	handle := parsed.Response.UserHandle
	var u models.User
	named := false
	if len(handle) > 0 && len(handle) <= 64 {
		u, err = s.store.UserByID(ctx, t.ID, string(handle))
		switch {
		case err == nil:
			named = true
		case !models.IsCode(err, models.ENotFound):
			return models.Tenant{}, models.User{}, models.SecurityKey{}, err
		}
	}
	refuse := func(reason string, err error) (models.Tenant, models.User, models.SecurityKey, error) {
		if named && reason != "" {
			s.passkeyRefused(ctx, u, reason, parsed.RawID)
		}
		return models.Tenant{}, models.User{}, models.SecurityKey{}, err
	}
	if err := s.checkClient(parsed.Response.CollectedClientData, protocol.AssertCeremony, parsed.Response.AuthenticatorData, nothing); err != nil {
		return refuse("assertion_failed", err)
	}
	if !named {
		return models.Tenant{}, models.User{}, models.SecurityKey{}, badPasskey(errors.New("no user of the organization has this user handle"))
	}
	if u.Disabled {
		return refuse("account_disabled", badPasskey(errors.New("user disabled")))
	}
	// The rest is an assertion by one of u's keys; the library checks the
	// user handle against u.
	key, reason, err := s.verifyPasskey(ctx, u, sd, parsed, nothing)
	if err != nil {
		return refuse(reason, err)
	}
	if err := s.store.ReleaseLoginAttempt(ctx, passkeyLimitKey(tenantName, clientIP, deviceID)); err != nil {
		return models.Tenant{}, models.User{}, models.SecurityKey{}, err
	}
	return t, u, key, nil
}

// passkeyRefused records a refused passkey sign-in to u's account. It is
// best effort, as for passwords (the answer does not depend on it), and
// bounded per account and window: past the bound a flood of refusals
// leaves the entries it has made.
func (s *Service) passkeyRefused(ctx context.Context, u models.User, reason string, credentialID []byte) {
	now := s.clock.Now()
	_, ok, err := s.store.ReserveLoginAttempt(ctx, now, s.passkeyWindow,
		[]models.LoginLimit{{Key: "passkey-refused:" + u.ID, Max: s.passkeys}})
	if err != nil || !ok {
		return
	}
	_ = s.store.Audit(ctx, u.TenantID, now, models.AuditEvent{Kind: models.AuditSignInFailed, Actor: models.ActorAnonymous,
		Data: map[string]any{"user_id": u.ID, "method": models.MethodPasskeySession, "reason": reason,
			"credential_id": b64.EncodeToString(credentialID)}})
}

// verifyPasskey is verifyAssertion for a discoverable login. A refusal of
// the assertion comes with its reason for the audit log ("" for errors
// that refuse nothing, such as an unavailable database).
func (s *Service) verifyPasskey(ctx context.Context, u models.User, sd webauthn.SessionData,
	parsed *protocol.ParsedCredentialAssertionData, nothing string) (models.SecurityKey, string, error) {
	keys, err := s.Keys(ctx, u)
	if err != nil {
		return models.SecurityKey{}, "", err
	}
	i := slices.IndexFunc(keys, func(k models.SecurityKey) bool { return subtle.ConstantTimeCompare(k.CredentialID, parsed.RawID) == 1 })
	if i < 0 {
		return models.SecurityKey{}, "unknown_key", badPasskey(errors.New("credential not registered to the user handle's user"))
	}
	key := keys[i]
	if key.FlaggedAt != nil {
		return models.SecurityKey{}, "key_flagged", models.Errorf(models.EStepUpFailed,
			"The passkey %q was flagged as possibly cloned and signs nobody in; sign in with your password and remove it. %s", key.Name, nothing)
	}
	wu, err := newUser(u, keys)
	if err != nil {
		return models.SecurityKey{}, "", err
	}
	handler := func(rawID, userHandle []byte) (webauthn.User, error) { return wu, nil }
	if _, _, err := s.wa.ValidatePasskeyLogin(handler, sd, parsed); err != nil {
		return models.SecurityKey{}, "assertion_failed", models.Wrap(models.EStepUpFailed, err,
			"Your passkey's response did not verify ("+libraryReason(err)+"). "+nothing)
	}
	if statuses := s.compromised(ctx, key); len(statuses) > 0 {
		return models.SecurityKey{}, string(models.EKeyModelRevoked),
			compromisedKey(key, statuses, "signs you in", "Sign in with your password instead.", nothing)
	}
	ad := parsed.Response.AuthenticatorData
	used, err := s.store.RecordKeyUse(ctx, u.TenantID, u.ID, key.ID, models.KeyUse{SignCount: ad.Counter, Flags: keyFlags(ad.Flags)}, s.clock.Now())
	if models.IsCode(err, models.EStepUpFailed) {
		return models.SecurityKey{}, "counter_regressed", models.Wrap(models.EStepUpFailed, err, models.ErrorMessage(err)+". "+nothing)
	}
	return used, "", err
}

// ---- Shared steps -------------------------------------------------------------

// saveCeremony stores a ceremony that has begun, with the library's
// session data, expiring ttl from now.
func (s *Service) saveCeremony(ctx context.Context, c models.Ceremony, sd *webauthn.SessionData, ttl time.Duration) error {
	raw, err := json.Marshal(sd)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	c.SessionData, c.CreatedAt, c.ExpiresAt = raw, now, now.Add(ttl)
	_, err = s.store.CreateCeremony(ctx, c)
	return err
}

// begun finds the ceremony of kind that issued challenge to u. Anything
// else — no such challenge, another user's, another kind — gets the same
// answer.
func (s *Service) begun(ctx context.Context, u models.User, kind models.CeremonyKind, challenge, nothing string) (models.Ceremony, webauthn.SessionData, error) {
	var sd webauthn.SessionData
	unknown := models.Errorf(models.EStepUpFailed,
		"This security-key response does not answer a request this console made to you (it may have expired). %s Start again.", nothing)
	if challenge == "" {
		return models.Ceremony{}, sd, unknown
	}
	c, err := s.store.CeremonyByChallenge(ctx, u.TenantID, challenge)
	if models.IsCode(err, models.ENotFound) {
		return models.Ceremony{}, sd, unknown
	}
	if err != nil {
		return models.Ceremony{}, sd, err
	}
	if c.UserID != u.ID || c.Kind != kind {
		return models.Ceremony{}, sd, unknown
	}
	if err := json.Unmarshal(c.SessionData, &sd); err != nil {
		return models.Ceremony{}, sd, fmt.Errorf("ceremony %s session data: %w", c.ID, err)
	}
	return c, sd, nil
}

// consume uses the ceremony up, saying why not in the reviewer's words.
func (s *Service) consume(ctx context.Context, c models.Ceremony, nothing string) error {
	err := s.store.ConsumeCeremony(ctx, c.TenantID, c.ID, s.clock.Now())
	switch {
	case err == nil:
		return nil
	case models.IsCode(err, models.EAlreadyConsumed):
		what := "security-key response"
		if c.Kind == models.CeremonyAssertion {
			what = "security-key approval"
		}
		return models.Wrap(models.EAlreadyConsumed, err,
			fmt.Sprintf("This %s was already used: each one counts once. %s", what, nothing))
	case models.IsCode(err, models.ECeremonyExpired):
		return models.Wrap(models.ECeremonyExpired, err,
			fmt.Sprintf("The security-key request expired (it is good for %s). %s Start again.", c.ExpiresAt.Sub(c.CreatedAt), nothing))
	default:
		return err
	}
}

// checkClient says in words what a browser's response got wrong before the
// library checks it all again: the ceremony type, the origin, the RP ID,
// user presence and user verification.
func (s *Service) checkClient(cd protocol.CollectedClientData, ceremony protocol.CeremonyType, ad protocol.AuthenticatorData, nothing string) error {
	fail := func(format string, args ...any) error {
		return models.Errorf(models.EStepUpFailed, format+" "+nothing, args...)
	}
	rpHash := sha256.Sum256([]byte(s.rpID))
	switch {
	case cd.Type != ceremony:
		return fail("This security-key response is a %q, not a %q.", cd.Type, ceremony)
	case !protocol.IsOriginInHaystack(cd.Origin, s.origins):
		return fail("This security-key response was made at %s, which is not this console's origin (%s).",
			cd.Origin, strings.Join(s.origins, ", "))
	case cd.CrossOrigin:
		return fail("This security-key response was made inside a frame of another site.")
	case subtle.ConstantTimeCompare(ad.RPIDHash, rpHash[:]) != 1:
		return fail("This security-key response was made for another site than %s (relying party id).", s.rpID)
	case !ad.Flags.UserPresent():
		return fail("Your security key did not register your presence (touch the key when it blinks).")
	case !ad.Flags.UserVerified():
		return fail("Your security key did not verify you (user verification is required): use a key with a PIN or biometrics and unlock it when asked.")
	}
	return nil
}

// verifyAssertion checks an assertion by one of u's keys against the
// ceremony's session data and records the key's use. A flagged key may
// sign only when it is only: the removal of itself. For an approval, a key
// of a model the metadata reports compromised is refused once its
// signature verifies, and its use is not recorded.
func (s *Service) verifyAssertion(ctx context.Context, u models.User, sd webauthn.SessionData,
	parsed *protocol.ParsedCredentialAssertionData, only string, approval bool, nothing string) (models.SecurityKey, error) {
	if err := s.checkClient(parsed.Response.CollectedClientData, protocol.AssertCeremony, parsed.Response.AuthenticatorData, nothing); err != nil {
		return models.SecurityKey{}, err
	}
	keys, err := s.Keys(ctx, u)
	if err != nil {
		return models.SecurityKey{}, err
	}
	i := slices.IndexFunc(keys, func(k models.SecurityKey) bool { return subtle.ConstantTimeCompare(k.CredentialID, parsed.RawID) == 1 })
	if i < 0 {
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"This security key is not registered to you (or was removed). %s", nothing)
	}
	key := keys[i]
	if key.FlaggedAt != nil && key.ID != only {
		return models.SecurityKey{}, models.Errorf(models.EStepUpFailed,
			"The security key %q was flagged as possibly cloned on %s (its signature counter went backwards) and can no longer approve anything; remove it and register a new one. %s",
			key.Name, key.FlaggedAt.UTC().Format("2006-01-02 15:04 MST"), nothing)
	}
	wu, err := newUser(u, keys)
	if err != nil {
		return models.SecurityKey{}, err
	}
	if _, err := s.wa.ValidateLogin(wu, sd, parsed); err != nil {
		return models.SecurityKey{}, models.Wrap(models.EStepUpFailed, err,
			"Your security key's response did not verify ("+libraryReason(err)+"). "+nothing)
	}
	if key.FlaggedAt != nil {
		return key, nil // its counter is not trusted any more; it only removes itself
	}
	if approval {
		if statuses := s.compromised(ctx, key); len(statuses) > 0 {
			return models.SecurityKey{}, compromisedKey(key, statuses, "approves anything", "Approve with another key that is certified.", nothing)
		}
	}
	ad := parsed.Response.AuthenticatorData
	used, err := s.store.RecordKeyUse(ctx, u.TenantID, u.ID, key.ID, models.KeyUse{SignCount: ad.Counter, Flags: keyFlags(ad.Flags)}, s.clock.Now())
	if err != nil {
		if models.IsCode(err, models.EStepUpFailed) {
			return models.SecurityKey{}, models.Wrap(models.EStepUpFailed, err, models.ErrorMessage(err)+". "+nothing)
		}
		return models.SecurityKey{}, err
	}
	return used, nil
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// marshalOptions encodes ceremony options for the browser.
func marshalOptions(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot encode the ceremony options")
	}
	return b, nil
}
