package models

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Audit event kinds. Every change of state that matters to an auditor
// leaves exactly one entry of one of these kinds in the tenant's chain, in
// the same transaction as the change itself.
const (
	AuditProposalCreated   = "proposal.created"
	AuditProposalRejected  = "proposal.rejected"
	AuditProposalCancelled = "proposal.cancelled"
	AuditProposalExpired   = "proposal.expired"
	AuditDecisionApproved  = "decision.approved"
	AuditDecisionDeclined  = "decision.declined"
	AuditTokenIssued       = "token.issued"
	AuditTokenRevoked      = "token.revoked"
	AuditTokenConsumed     = "token.consumed"
	AuditTokenExpired      = "token.expired"
	AuditExecutionAttempt  = "execution.attempt"
	AuditExecutionOutcome  = "execution.outcome"
	AuditUserCreated       = "admin.user_created"
	AuditUserChanged       = "admin.user_changed"
	AuditAgentCreated      = "admin.agent_created"
	AuditAgentRevoked      = "admin.agent_revoked"
	AuditKeyRegistered     = "security_key.registered"
	AuditKeyRemoved        = "security_key.removed"
	AuditSignIn            = "session.signed_in"
	AuditStepUpFailed      = "stepup.failed"
	AuditReaderCreated     = "admin.audit_reader_created"
)

// ActorSystem is the actor of entries no person or agent caused directly
// (expiry sweeps, reconciliation).
const ActorSystem = "system"

// AuditEvent is what a state change contributes to the audit log: the
// store numbers, links and hashes it.
type AuditEvent struct {
	Kind string
	// Actor is the id of who caused it: an agent, a user or ActorSystem.
	Actor string
	// ProposalID links the entry to a proposal's story ("" if none).
	ProposalID string
	// Data is the event's details; it must encode to a JSON object.
	Data any
}

// AuditBody is one entry exactly as hashed. Its canonical JSON (RFC 8785) is
// stored byte for byte; the entry's hash is AuditHash of those bytes, and
// Prev is the hash of the entry before it in the tenant's chain ("" for the
// first), so that changing, removing or reordering any entry breaks every
// later link.
type AuditBody struct {
	Tenant     string          `json:"tenant"`
	Seq        int64           `json:"seq"`
	Prev       string          `json:"prev"`
	At         int64           `json:"at"` // Unix milliseconds
	Kind       string          `json:"kind"`
	Actor      string          `json:"actor"`
	ProposalID string          `json:"proposal_id"`
	Data       json.RawMessage `json:"data"`
}

// Encode returns the canonical bytes of the body and their hash.
func (b AuditBody) Encode() ([]byte, string, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, "", Wrap(EInternal, err, "audit entry cannot be encoded")
	}
	canon, err := Canonical(raw)
	if err != nil {
		return nil, "", Wrap(EInternal, err, "audit entry cannot be canonicalized")
	}
	return canon, AuditHash(canon), nil
}

// AuditHash is "sha256:" + lower-case hex of SHA-256(b): the hash of an
// audit entry's body, and of stored evidence.
func AuditHash(b []byte) string {
	sum := sha256.Sum256(b)
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// AuditEntry is one stored entry of a tenant's chain.
type AuditEntry struct {
	TenantID   string
	Seq        int64
	Prev       string
	Hash       string
	Kind       string
	ProposalID string
	// Body is the canonical JSON that Hash covers (an AuditBody).
	Body      string
	CreatedAt time.Time
}

// Decode parses the entry's body.
func (e AuditEntry) Decode() (AuditBody, error) {
	var b AuditBody
	if err := json.Unmarshal([]byte(e.Body), &b); err != nil {
		return b, Wrap(EInvalidRequest, err, "audit entry body is not JSON")
	}
	return b, nil
}

// Checkpoint is a signed statement of a chain's head: at Seq entries, the
// last one hashed Hash.
type Checkpoint struct {
	TenantID  string
	Seq       int64
	Hash      string
	KeyID     string
	JWS       string
	CreatedAt time.Time
}

// CheckpointClaims is the payload of a checkpoint JWS
// (typ countersign-audit-checkpoint+jwt).
type CheckpointClaims struct {
	Issuer string `json:"iss"`
	Tenant string `json:"tenant"`
	// Seq is the sequence number of the head entry; Count the number of
	// entries in the chain up to it (equal, as the chain starts at 1).
	Seq      int64  `json:"seq"`
	Count    int64  `json:"count"`
	Head     string `json:"head"`
	IssuedAt int64  `json:"iat"`
}

// AuditReader is a bearer principal that may read one tenant's audit log
// through the API and nothing else.
type AuditReader struct {
	ID        string
	TenantID  string
	Name      string
	CreatedAt time.Time
}

// Approval methods, as receipts and the audit log name them.
const (
	MethodPassword       = "password"        // a click in a session signed in with a password
	MethodPasskeySession = "passkey_session" // a click in a session signed in with a passkey
	MethodSecurityKey    = "security_key"    // a transaction-bound security-key assertion
)

// ApprovalMethod names how a decision was authenticated: a security-key
// step-up when it carries evidence, else the session's sign-in method.
func ApprovalMethod(amr []string, evidence json.RawMessage) string {
	switch {
	case len(evidence) > 0:
		return MethodSecurityKey
	case slices.Contains(amr, "webauthn"):
		return MethodPasskeySession
	default:
		return MethodPassword
	}
}

// EvidenceDigest is the digest of a decision's stored evidence bytes, "" when
// there is none.
func EvidenceDigest(evidence json.RawMessage) string {
	if len(evidence) == 0 {
		return ""
	}
	return AuditHash(evidence)
}

// AuditTemplate is an entry's canonical body with its two chain fields left
// open: Body(prev, seq) = Prefix + prev + Middle + decimal(seq) + Suffix is
// byte for byte the canonical JSON of the complete entry. It lets the
// database fill in the chain head inside the very statement that appends
// (hash strings and integers need no JSON escaping).
type AuditTemplate struct {
	Prefix, Middle, Suffix string
}

// prevMark stands for the previous hash while the template is made.
const prevMark = "countersign-prev-hash"

// Template returns the body's template (Prev and Seq are ignored).
func (b AuditBody) Template() (AuditTemplate, error) {
	b.Prev, b.Seq = prevMark, 0
	canon, _, err := b.Encode()
	if err != nil {
		return AuditTemplate{}, err
	}
	raw, err := json.Marshal(b.Tenant)
	if err != nil {
		return AuditTemplate{}, Wrap(EInternal, err, "audit entry cannot be encoded")
	}
	tenant, err := Canonical(raw)
	if err != nil {
		return AuditTemplate{}, Wrap(EInternal, err, "audit entry cannot be encoded")
	}
	s := string(canon)
	// The top-level members sort as actor, at, data, kind, prev,
	// proposal_id, seq, tenant: "prev" is the last of its kind before two
	// plain members, so its last occurrence is the top-level one.
	mark := `,"prev":"` + prevMark + `","proposal_id":`
	i := strings.LastIndex(s, mark)
	suffix := `,"tenant":` + string(tenant) + `}`
	tail := `,"seq":0` + suffix
	if i < 0 || !strings.HasSuffix(s, tail) {
		return AuditTemplate{}, Errorf(EInternal, "audit entry template cannot be made")
	}
	t := AuditTemplate{Prefix: s[:i+len(`,"prev":"`)], Middle: s[i+len(`,"prev":"`+prevMark) : len(s)-len(`0`+suffix)], Suffix: suffix}
	return t, nil
}

// Body returns the complete body for a position.
func (t AuditTemplate) Body(prev string, seq int64) string {
	return t.Prefix + prev + t.Middle + strconv.FormatInt(seq, 10) + t.Suffix
}
