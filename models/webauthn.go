package models

import (
	"encoding/json"
	"time"
)

// SecurityKey is a reviewer's registered WebAuthn credential: a roaming
// security key or a platform passkey. Every field the relying party needs to
// verify later assertions is kept: the public key, the signature counter,
// the authenticator flags (backup eligibility never changes; backup state
// may), the transports, the AAGUID and the attestation as it was received.
type SecurityKey struct {
	ID           string // countersign's id, "key_…"
	TenantID     string
	UserID       string
	Name         string // chosen by the reviewer
	CredentialID []byte // the authenticator's credential id (rawId)
	PublicKey    []byte // the credential public key, a COSE_Key exactly as registered
	// PublicKeyAlgorithm is the COSE algorithm of PublicKey (e.g. -7, ES256).
	PublicKeyAlgorithm int64
	AttestationType    string // "none", "self", "basic_full", …
	AttestationFormat  string // "none", "packed", "tpm", …
	AAGUID             []byte // the authenticator model, 16 bytes (zero when not disclosed)
	SignCount          uint32 // the highest signature counter seen
	Flags              KeyFlags
	Transports         []string // "usb", "nfc", "ble", "internal", "hybrid", …
	Attachment         string   // "platform", "cross-platform" or "" when the browser did not say
	// Attestation is the registration's raw attestation (object, client
	// data, authenticator data), kept so that the key can be re-verified
	// against authenticator metadata later. Opaque to the domain.
	Attestation json.RawMessage
	// Extensions are the durable extension results of the registration
	// (e.g. whether the credential is discoverable). Opaque to the domain.
	Extensions json.RawMessage
	CreatedAt  time.Time
	LastUsedAt *time.Time
	// FlaggedAt is set when an assertion's signature counter went
	// backwards: two copies of the key may exist. A flagged key approves
	// nothing any more.
	FlaggedAt *time.Time
	RemovedAt *time.Time
}

// Usable reports whether the key may sign approvals: neither flagged nor
// removed.
func (k *SecurityKey) Usable() bool { return k.FlaggedAt == nil && k.RemovedAt == nil }

// KeyFlags are the authenticator data flags of a key's latest ceremony (WebAuthn
// §6.1): user present (UP), user verified (UV), backup eligible (BE) and
// backup state (BS). Raw is the flags byte itself.
type KeyFlags struct {
	UserPresent    bool
	UserVerified   bool
	BackupEligible bool
	BackupState    bool
	Raw            byte
}

// KeyUse is what one verified assertion tells about its key.
type KeyUse struct {
	SignCount uint32
	Flags     KeyFlags
}

// CeremonyKind says what a WebAuthn ceremony is for.
type CeremonyKind string

// Ceremony kinds.
const (
	// CeremonyRegistration creates a new key.
	CeremonyRegistration CeremonyKind = "registration"
	// CeremonyEnrollment is the fresh step-up with an existing key that
	// registering a further key requires.
	CeremonyEnrollment CeremonyKind = "enrollment"
	// CeremonyAssertion is a step-up approving one proposal: its challenge
	// is bound to the proposal and its digest.
	CeremonyAssertion CeremonyKind = "assertion"
	// CeremonyRemoval is the fresh step-up that removing a key requires.
	CeremonyRemoval CeremonyKind = "removal"
	// CeremonyLogin is a sign-in with a passkey (a discoverable
	// credential): it begins without a user, whom the key names.
	CeremonyLogin CeremonyKind = "login"
)

// Ceremony is the server-side state of one WebAuthn ceremony between its
// begin and its finish. It is kept in the database, never in a cookie or in
// one process's memory, so any instance can finish what another began, and
// it is consumed exactly once.
type Ceremony struct {
	ID       string
	TenantID string
	UserID   string
	Kind     CeremonyKind
	// ProposalID and ArgsDigest bind an assertion ceremony to the proposal
	// and the digest the reviewer saw.
	ProposalID string
	ArgsDigest string
	// KeyID names the key a removal ceremony removes.
	KeyID string
	// Nonce is the single-use server nonce of an assertion ceremony's
	// transaction challenge.
	Nonce []byte
	// Challenge is the challenge as the client data carries it: base64url
	// without padding. It is unique, and how a finish finds its ceremony.
	Challenge string
	// SessionData is the WebAuthn library's ceremony state. Opaque to the
	// domain.
	SessionData json.RawMessage
	CreatedAt   time.Time
	ExpiresAt   time.Time
	ConsumedAt  *time.Time
}
