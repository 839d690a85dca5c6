package models

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
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
	// AuditKeyFlagged: a security key's signature counter went backwards
	// or stood still, so a copy of it may exist; it approves nothing from
	// then on.
	AuditKeyFlagged = "security_key.flagged"
	AuditSignIn     = "session.signed_in"
	// AuditSignInFailed: a password sign-in to an existing account was
	// refused (wrong password, disabled account). Attempts the rate limits
	// turned away before checking the password, and attempts on names that
	// are no account's, are not recorded: the limits bound how many
	// entries an attacker can add, and no attacker-chosen name enters a
	// chain that cannot be edited.
	AuditSignInFailed  = "session.sign_in_failed"
	AuditStepUpFailed  = "stepup.failed"
	AuditReaderCreated = "admin.audit_reader_created"
	// AuditProposalSuperseded: a reviewer edited the proposal into a new
	// version (whose proposal.created entry names the editor as actor).
	AuditProposalSuperseded = "proposal.superseded"
	// AuditGroupChanged: a reviewer group was created or a member added
	// or removed.
	AuditGroupChanged = "admin.group_changed"
	// AuditWebhookCreated: a webhook endpoint was registered, by an
	// administrator for the whole organization or by an agent for its own
	// proposals (endpoint_id, url, scope "tenant" or "agent", agent_id).
	// From then on it receives every event of its scope; its signing
	// secret never enters the log.
	AuditWebhookCreated = "admin.webhook_created"
	// AuditWebhookDisabled: a webhook endpoint was disabled (deleted), by
	// an administrator or by the agent it belongs to; the same data as
	// AuditWebhookCreated and how many pending deliveries it cancelled.
	AuditWebhookDisabled = "admin.webhook_disabled"
	// AuditDeliveryRedelivered: an administrator made a delivery of an
	// event due again (delivery_id, event_id, proposal_id, channel and,
	// for a webhook, the endpoint's id, url and scope).
	AuditDeliveryRedelivered = "admin.delivery_redelivered"
	// AuditMandateGranted: the approvals of a mandate proposal made a
	// standing mandate live (its id, terms digest and grantors' decisions).
	// A token it issues is a token.issued entry naming the mandate.
	AuditMandateGranted = "mandate.granted"
	// AuditMandateRevoked: an administrator ended a mandate.
	AuditMandateRevoked = "mandate.revoked"
	// AuditSigningKeyAdded: a token signing key (kid, Ed25519 public key
	// in base64url, the key it replaced as the active one) began to sign
	// tokens, checkpoints and receipts; it is recorded in every
	// organization's chain, and a new organization's chain begins with
	// the keys that exist when it is created (previous_kid empty, active
	// says whether the key is the one signing).
	AuditSigningKeyAdded = "signing_key.added"
	// AuditRegistryLoaded: a server started with another tool registry
	// than the chain last recorded (digest, previous_digest, each tool's
	// policy_version and declaration digest, the tools added, removed and
	// changed since the last record), or the chain recorded none yet.
	AuditRegistryLoaded = "registry.loaded"
)

// ActorSystem is the actor of entries no person or agent caused directly
// (expiry sweeps, reconciliation).
const ActorSystem = "system"

// ActorAnonymous is the actor of entries caused by someone not signed in
// (a refused sign-in: who tried is not known, only which account).
const ActorAnonymous = "anonymous"

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

// Template returns the body's template (Prev and Seq are ignored). Only
// the data is canonicalized (RFC 8785); the fixed members are written in
// their canonical order and form directly, which Encode's full
// canonicalization agrees with byte for byte.
func (b AuditBody) Template() (AuditTemplate, error) {
	data := []byte("{}")
	if len(b.Data) > 0 {
		var err error
		if data, err = Canonical(b.Data); err != nil {
			return AuditTemplate{}, Wrap(EInternal, err, "audit data cannot be canonicalized")
		}
	}
	return b.template(data)
}

// Template returns the template of the entry that records ev in tenant's
// chain at at (Unix milliseconds): AuditBody.Template of the body with ev's
// data encoded as JSON. Data that is a flat object of strings, booleans,
// nulls and integers (what most events record) is written in canonical
// form directly, without encoding and then re-parsing it; anything else is
// encoded and canonicalized.
func (ev AuditEvent) Template(tenant string, at int64) (AuditTemplate, error) {
	b := AuditBody{Tenant: tenant, At: at, Kind: ev.Kind, Actor: ev.Actor, ProposalID: ev.ProposalID}
	if m, ok := ev.Data.(map[string]any); ok {
		if data, ok := canonicalFlatObject(m); ok {
			return b.template(data)
		}
	}
	b.Data = []byte("{}")
	if ev.Data != nil {
		var err error
		if b.Data, err = json.Marshal(ev.Data); err != nil {
			return AuditTemplate{}, Wrap(EInternal, err, "audit data cannot be encoded")
		}
	}
	return b.Template()
}

// maxExactInteger is 2^53: integers up to it in magnitude are numbers of
// their own in RFC 8785's (IEEE 754 double) form, written as plain digits.
const maxExactInteger = 1 << 53

// canonicalFlatObject returns the canonical JSON (RFC 8785) of m when its
// keys are ASCII and its values strings (valid UTF-8), booleans, nil or
// integers of at most 2^53 in magnitude (of those kinds, when their types
// have no JSON or text encoding of their own); ok is false for anything
// else.
func canonicalFlatObject(m map[string]any) (out []byte, ok bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		for i := 0; i < len(k); i++ {
			if k[i] >= utf8.RuneSelf {
				return nil, false
			}
		}
		keys = append(keys, k)
	}
	// Sorted by UTF-16 code units, which for ASCII is by bytes.
	slices.Sort(keys)
	out = make([]byte, 0, 64*len(keys)+2)
	out = append(out, '{')
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		out, _ = appendJCSString(out, k)
		out = append(out, ':')
		switch v := m[k].(type) {
		case nil:
			out = append(out, "null"...)
		case bool:
			out = strconv.AppendBool(out, v)
		case string:
			var err error
			if out, err = appendJCSString(out, v); err != nil {
				return nil, false
			}
		case int:
			if v > maxExactInteger || v < -maxExactInteger {
				return nil, false
			}
			out = strconv.AppendInt(out, int64(v), 10)
		case int64:
			if v > maxExactInteger || v < -maxExactInteger {
				return nil, false
			}
			out = strconv.AppendInt(out, v, 10)
		default:
			// A named string or integer type (an enum, say) encodes as its
			// kind unless it has a method of its own for JSON or text;
			// everything else is left to encoding/json.
			rv := reflect.ValueOf(v)
			if marshals(rv.Type()) {
				return nil, false
			}
			switch rv.Kind() {
			case reflect.String:
				var err error
				if out, err = appendJCSString(out, rv.String()); err != nil {
					return nil, false
				}
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				if n := rv.Int(); n > maxExactInteger || n < -maxExactInteger {
					return nil, false
				}
				out = strconv.AppendInt(out, rv.Int(), 10)
			default:
				return nil, false
			}
		}
	}
	return append(out, '}'), true
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// marshals reports whether t or *t has its own JSON or text encoding.
func marshals(t reflect.Type) bool {
	for _, x := range []reflect.Type{t, reflect.PointerTo(t)} {
		if x.Implements(jsonMarshaler) || x.Implements(textMarshaler) {
			return true
		}
	}
	return false
}

// template is the body's template with data, the canonical JSON of its
// data.
func (b AuditBody) template(data []byte) (AuditTemplate, error) {
	actor, err1 := jcsString(b.Actor)
	kind, err2 := jcsString(b.Kind)
	proposal, err3 := jcsString(b.ProposalID)
	tenant, err4 := jcsString(b.Tenant)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return AuditTemplate{}, err
		}
	}
	return AuditTemplate{
		Prefix: `{"actor":` + actor + `,"at":` + strconv.FormatInt(b.At, 10) + `,"data":` + string(data) +
			`,"kind":` + kind + `,"prev":"`,
		Middle: `","proposal_id":` + proposal + `,"seq":`,
		Suffix: `,"tenant":` + tenant + `}`,
	}, nil
}

// jcsString is a string in RFC 8785 form: quotes and backslashes escaped,
// control characters as \b \t \n \f \r or \u00xx, everything else as is.
func jcsString(v string) (string, error) {
	out, err := appendJCSString(make([]byte, 0, len(v)+2), v)
	return string(out), err
}

// appendJCSString appends v in RFC 8785 form (see jcsString) to dst; runs
// of bytes that need no escape are copied at once.
func appendJCSString(dst []byte, v string) ([]byte, error) {
	if !utf8.ValidString(v) {
		return dst, Errorf(EInternal, "audit entry holds a string that is not valid UTF-8")
	}
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, v[start:i]...)
		start = i + 1
		switch c {
		case '"':
			dst = append(dst, `\"`...)
		case '\\':
			dst = append(dst, `\\`...)
		case '\b':
			dst = append(dst, `\b`...)
		case '\t':
			dst = append(dst, `\t`...)
		case '\n':
			dst = append(dst, `\n`...)
		case '\f':
			dst = append(dst, `\f`...)
		case '\r':
			dst = append(dst, `\r`...)
		default:
			dst = append(dst, `\u00`...)
			dst = append(dst, hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	dst = append(dst, v[start:]...)
	return append(dst, '"'), nil
}

const hexDigits = "0123456789abcdef"

// Body returns the complete body for a position.
func (t AuditTemplate) Body(prev string, seq int64) string {
	return t.Prefix + prev + t.Middle + strconv.FormatInt(seq, 10) + t.Suffix
}
