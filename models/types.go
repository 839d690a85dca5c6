package models

import (
	"encoding/json"
	"slices"
	"time"
)

// Tenant isolates everything: every query is scoped to one.
type Tenant struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// Agent is an API principal that proposes writes and redeems tokens.
// OwnerUserID, when set, names the console user the agent acts for; that user
// counts as the requester and may not approve the agent's proposals unless
// the tier allows self-approval.
//
// ReadAll grants reading every proposal of the tenant; without it an agent
// reads only its own (see MayRead).
type Agent struct {
	ID          string
	TenantID    string
	Name        string
	OwnerUserID string
	ReadAll     bool
	CreatedAt   time.Time
	RevokedAt   *time.Time
	// CreatedBy is the user id of the administrator who created the agent
	// (and so saw its key), EnrolledByCLI, or "" when not recorded.
	CreatedBy string
}

// MayRead reports whether the agent may see p: p is of the agent's tenant
// and is the agent's own, or the agent was granted tenant-wide read.
// Reading never includes acting: cancelling and redeeming stay with the
// proposing agent.
func (a Agent) MayRead(p *Proposal) bool {
	return p != nil && p.TenantID == a.TenantID && (p.AgentID == a.ID || a.ReadAll)
}

// MaySeeToken reports whether the agent may see p's confirmation token (a
// bearer credential): only the agent that proposed it, only while p is
// confirmed and its token issued and unexpired at now. Every other reader
// of the tenant sees only that a token exists. It looks at the agent's id
// and tenant alone.
func (a Agent) MaySeeToken(p *Proposal, now time.Time) bool {
	return p.AgentID == a.ID && p.TenantID == a.TenantID && p.Redeemable(now)
}

// User is a console user (reviewer or admin) of one tenant.
type User struct {
	ID        string
	TenantID  string
	Name      string
	Role      Role
	Disabled  bool
	CreatedAt time.Time
	// CreatedBy is the user id of the administrator who enrolled the user,
	// EnrolledByCLI, or "" for users made before this was recorded.
	CreatedBy string
	// PasswordResetBy is the administrator who last reset the password
	// (a user id), "" when it never was; PasswordResetAt is when.
	PasswordResetBy string
	PasswordResetAt *time.Time
	// TimeZone is the IANA zone the user reads times in ("" until the
	// browser's zone or the user's choice is stored; then UTC).
	TimeZone string
}

// Location is the user's zone, UTC when none is stored or it is unknown
// to this server.
func (u User) Location() *time.Location {
	if loc, err := LoadZone(u.TimeZone); err == nil {
		return loc
	}
	return time.UTC
}

// LoadZone returns the IANA time zone name, or EInvalidRequest for "",
// "Local" and names this server does not know.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" || len(name) > 64 {
		return nil, Errorf(EInvalidRequest, "%q is not a time zone name such as Europe/Berlin", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, Errorf(EInvalidRequest, "%q is not a time zone name such as Europe/Berlin", name)
	}
	return loc, nil
}

// EnrolledByCLI is the CreatedBy of users and agents made with the command
// line (countersign admin …, the demo data): no console administrator.
const EnrolledByCLI = "cli"

// PreviewField is one argument as a reviewer sees it: the machine value exactly
// as stored and a display value that is for eyes only and never parsed back.
type PreviewField struct {
	Name    string          `json:"name"`
	Label   string          `json:"label"`
	Value   json.RawMessage `json:"value"`
	Display string          `json:"display"`
}

// Tier is the outcome of a tool's risk rules for one set of arguments.
type Tier struct {
	Name              string
	Confirmation      Confirmation
	Quorum            int // distinct approvers needed; at least 1
	TTL               time.Duration
	AllowSelfApproval bool
	// Require lists the approver-group factors the tier needs on top of
	// its quorum, all of them (see ApprovalsMet); none means the quorum
	// alone decides.
	Require []Factor
}

// Proposal is an immutable snapshot of one proposed write plus its lifecycle
// state. Arguments, ArgsDigest, Resource*, StateVersion, Tier and
// PolicyVersion never change after creation.
type Proposal struct {
	ID        string
	TenantID  string
	AgentID   string
	AgentName string
	// AgentOwnerID and AgentOwnerName are the person who answers for the
	// agent ("" when it has no owner): the reviewer who may not approve
	// its proposals (see Proposal.MayApprove).
	AgentOwnerID      string
	AgentOwnerName    string
	Tool              string
	Arguments         json.RawMessage // normalized, canonical (JCS) JSON
	ArgsDigest        string
	Preview           []PreviewField
	Resource          string   // target resource id (single-resource tools)
	ResourceSet       []string // sorted ids (batch tools)
	ResourceSetDigest string
	ResourceCount     int
	ResourceLabel     string
	StateVersion      string
	Tier              Tier
	PolicyVersion     string
	RequestKey        string
	Context           string
	Status            Status
	Revision          int64 // increases on every change; basis of the ETag
	CreatedAt         time.Time
	ExpiresAt         time.Time
	UpdatedAt         time.Time
	Problems          []FieldProblem // why the business system rejected it (rejected only)
	// Kind is "" for a write and KindMandate for a request of a standing
	// mandate (Arguments are then its canonical terms).
	Kind string
	// MandateID names the mandate that confirmed this write without a
	// person, or for a mandate proposal the mandate its grant made live.
	MandateID string
	// MandateNote says why a mandate covering this write could not
	// confirm it ("over per-call cap", "budget exhausted", …): a person
	// must.
	MandateNote string
	// MandateGrantors are the user ids that granted MandateID.
	MandateGrantors []string
	// Effect is what the business system said the write would do when it
	// was proposed (DescribeAdapter), nil when its adapter describes
	// nothing; EffectDigest is its digest (DescriptionDigest), part of what
	// approvers confirm.
	Effect       *Description
	EffectDigest string

	Decisions []Decision
	Token     *Token     // set once confirmed
	Execution *Execution // set once execution started

	// Supersedes is set when a reviewer made this proposal by editing
	// another version; SupersededBy when this one was edited and ended
	// superseded. Both describe the same edit from either side.
	Supersedes   *Counter
	SupersededBy *Counter
	// Progress is where each approver-group factor of the tier stands
	// (ApprovalsMet), with memberships as stored when the proposal was
	// read; nil when the tier has no factors or the proposal was listed.
	Progress []FactorProgress
}

// MandateGranted reports whether p is a request for a standing mandate
// that its reviewers granted: confirmed, naming the mandate it made live.
// No token is issued for it and nothing is executed.
func (p *Proposal) MandateGranted() bool {
	return p.Kind == KindMandate && p.Status == StatusConfirmed && p.MandateID != ""
}

// Batch reports whether the proposal targets a fixed resource set.
func (p *Proposal) Batch() bool { return p.ResourceSetDigest != "" }

// Intact reports, with EArgsMismatch, a stored proposal whose arguments no
// longer hash to its args_digest, or whose resource set no longer hashes
// to its resource_set_digest: the database was changed behind
// countersign's back. The digests are what reviewers confirm and tokens
// bind, while the arguments are what a reviewer reads and the business
// system executes, so the two must never be allowed to part: an approval
// is not recorded, and a token not redeemed, over a proposal that fails
// this.
func (p *Proposal) Intact() error {
	if CanonicalDigest(p.Arguments) != p.ArgsDigest {
		return Errorf(EArgsMismatch, "the stored arguments of %s do not match the digest they were proposed under; "+
			"they were changed outside countersign, and nothing was written", p.ID)
	}
	if p.Batch() {
		if _, d, err := ResourceSet(p.ResourceSet); err != nil || d != p.ResourceSetDigest {
			return Errorf(EArgsMismatch, "the stored resource set of %s does not match its digest; "+
				"it was changed outside countersign, and nothing was written", p.ID)
		}
	}
	return nil
}

// Expired reports whether the confirmation window has closed at now. Windows
// are right-open: at now == ExpiresAt it has expired.
func (p *Proposal) Expired(now time.Time) bool { return !now.Before(p.ExpiresAt) }

// Decidable reports whether a reviewer's decision can still be recorded at
// now: the proposal awaits confirmation and its window is open. Pages show
// the Approve and Decline forms only while it holds; the deciding
// transaction checks it again.
func (p *Proposal) Decidable(now time.Time) bool {
	return p.Status == StatusAwaitingConfirmation && !p.Expired(now)
}

// DecidedBy reports whether the user has recorded a decision already.
func (p *Proposal) DecidedBy(userID string) bool {
	for _, d := range p.Decisions {
		if d.UserID == userID {
			return true
		}
	}
	return false
}

// OwnedBy reports whether userID owns the agent that proposed p.
func (p *Proposal) OwnedBy(userID string) bool {
	return p.AgentOwnerID != "" && p.AgentOwnerID == userID
}

// MayApprove reports whether the separation-of-duties rule lets userID
// approve p: the agent's owner may not where SelfApprovalForbidden says so.
func (p *Proposal) MayApprove(userID string) bool {
	return !p.OwnedBy(userID) || !SelfApprovalForbidden(p.Tier)
}

// SharedTargets counts, among ps, the proposals of each target that more
// than one of them writes to: two pending writes to one resource are worth
// a reviewer's second look (a duplicate, or two that cannot both succeed).
// Batches count by their set digest.
func SharedTargets(ps []*Proposal) map[string]int {
	n := map[string]int{}
	for _, p := range ps {
		if k := p.Target(); k != "" {
			n[k]++
		}
	}
	for k, c := range n {
		if c < 2 {
			delete(n, k)
		}
	}
	return n
}

// Target is the resource the proposal writes to: the resource id, or a
// batch's set digest.
func (p *Proposal) Target() string {
	if p.Batch() {
		return p.ResourceSetDigest
	}
	return p.Resource
}

// Approvals returns the distinct reviewers whose approvals count: voided
// approvals (their reviewer was disabled while the proposal was awaiting
// confirmation) do not.
func (p *Proposal) Approvals() []Decision {
	var out []Decision
	seen := map[string]bool{}
	for _, d := range p.Decisions {
		if d.Kind == DecisionApprove && d.VoidedAt == nil && !seen[d.UserID] {
			seen[d.UserID] = true
			out = append(out, d)
		}
	}
	return out
}

// ApprovedBy reports whether the approvals p carries are those of exactly
// the users ids names, in any order: a token names its approvers when it
// is issued, and no approval of a confirmed proposal changes after that.
func (p *Proposal) ApprovedBy(ids []string) bool {
	approvals := p.Approvals()
	if len(approvals) != len(ids) {
		return false
	}
	for _, d := range approvals {
		if !slices.Contains(ids, d.UserID) {
			return false
		}
	}
	return true
}

// QuorumMet reports whether enough distinct reviewers approved for the
// tier, not counting its group factors (ApprovalsMet decides those).
func (p *Proposal) QuorumMet() bool { return len(p.Approvals()) >= p.Tier.Approvers() }

// Redeemable reports whether p holds a token that may still be redeemed at
// now: confirmed, the token issued and unused, and now before its expiry
// (right-open). Execute decides atomically; this is the same rule for
// showing the token and the actions that depend on it.
func (p *Proposal) Redeemable(now time.Time) bool {
	return p.Status == StatusConfirmed && p.Token != nil && p.Token.Status == TokenIssued &&
		p.Token.Compact != "" && now.Before(p.Token.ExpiresAt)
}

// Retryable reports whether a failed_retryable execution of p may be
// attempted again at now: the business system refused for now (nothing was
// written), the token was redeemed and is neither revoked nor past its
// expiry (right-open). A retry is a write, and no write may reach the
// business system at or after the confirmation's exp.
func (p *Proposal) Retryable(now time.Time) bool {
	return p.Status == StatusFailedRetryable && p.Token != nil && p.Token.Status == TokenConsumed &&
		now.Before(p.Token.ExpiresAt)
}

// Revocable reports whether an administrator may still withdraw p's
// confirmation at now: while its token is redeemable, and while its
// execution is failed_retryable (a retry would be a new attempt at the
// write; revoking it ends the execution failed_terminal with nothing
// written). An unknown or executing execution cannot be revoked: the write
// may already have happened.
func (p *Proposal) Revocable(now time.Time) bool {
	if p.Redeemable(now) {
		return true
	}
	return p.Status == StatusFailedRetryable && p.Token != nil && p.Token.Status == TokenConsumed
}

// DecisionKind is approve or decline.
type DecisionKind string

// Decision kinds.
const (
	DecisionApprove DecisionKind = "approve"
	DecisionDecline DecisionKind = "decline"
)

// Decision is one reviewer's structured decision on one proposal: bound to the
// proposal id, the reviewer and the digest the reviewer saw.
type Decision struct {
	ID         string
	ProposalID string
	UserID     string
	UserName   string
	Kind       DecisionKind
	Reason     string // a decline's reason, or an approval's optional comment
	DigestSeen string
	// EffectSeen is the digest of the effect preview the reviewer was
	// shown (the proposal's EffectDigest), "" when there was none.
	EffectSeen string
	AMR        []string        // authentication methods, e.g. ["pwd","webauthn"]
	Evidence   json.RawMessage // raw step-up assertion, when there was one
	CreatedAt  time.Time
	// VoidedAt is set when the decision stopped counting: the reviewer
	// was disabled while the proposal still awaited confirmation.
	VoidedAt *time.Time
	// Decider is how the deciding reviewer came to be, as stored now.
	Decider Enrolment
}

// Enrolment tells who made a console user and who last reset their
// password, by name, for reviewers of approvals to judge.
type Enrolment struct {
	// EnrolledBy is the enrolling administrator's name, EnrolledByCLI, or
	// "" when not recorded; EnrolledAt is when the user was created.
	EnrolledBy string
	EnrolledAt time.Time
	// PasswordResetBy names the administrator who last reset the
	// password ("" when never); PasswordResetAt is when.
	PasswordResetBy string
	PasswordResetAt *time.Time
}

// DutyConflict reports whether reviewer may not approve a proposal of agent
// under separation of duties, and names the administrator at the root of
// it: an administrator who created or owns the agent and also enrolled the
// reviewer or last reset the reviewer's password could otherwise approve
// their own agent's writes through an account they control. The
// administrator who created the agent may not approve it either: they saw
// its key. Command-line enrolment ("cli") and unrecorded values name no
// administrator and never conflict.
//
// DutyConflictError is the error to return for a conflict.
func DutyConflict(reviewer User, agent Agent) (adminID string, conflict bool) {
	sides := []string{agent.CreatedBy, agent.OwnerUserID}
	for _, a := range sides {
		if a == "" || a == EnrolledByCLI {
			continue
		}
		if a == reviewer.CreatedBy || a == reviewer.PasswordResetBy || (a == agent.CreatedBy && a == reviewer.ID) {
			return a, true
		}
	}
	return "", false
}

// Token is the server-side record of a confirmation token: its consumption
// state is what prevents replay; the signature only prevents alteration.
type Token struct {
	JTI         string
	TenantID    string
	ProposalID  string
	AgentID     string
	KeyID       string
	Status      TokenStatus
	Compact     string // the signed compact JWS handed to the agent
	IssuedAt    time.Time
	ExpiresAt   time.Time
	ConsumedAt  *time.Time
	ExecutionID string
}

// Execution is the record of one execution intent, keyed by request key.
type Execution struct {
	ID         string
	TenantID   string
	ProposalID string
	TokenJTI   string
	RequestKey string
	// DownstreamKey is the idempotency key the business system sees (see
	// DownstreamKey); every attempt and every status question uses it.
	DownstreamKey string
	Operation     string
	ArgsDigest    string
	Status        Status // executing, succeeded, failed_retryable, failed_terminal, unknown
	Attempts      int
	ProviderRef   string
	Result        json.RawMessage
	ErrorCode     string
	ErrorMessage  string
	LeaseUntil    time.Time // while in the future, the current attempt owns it
	CreatedAt     time.Time
	UpdatedAt     time.Time
	CompletedAt   *time.Time
	// ReceiptJWS is the signed receipt (SignedReceipt as a compact JWS) of
	// a settled execution; "" before it settles.
	ReceiptJWS string
	// MandateID and MandateGrantors name the standing mandate that
	// confirmed the write, and who granted it (empty: a person confirmed).
	MandateID       string
	MandateGrantors []string
}

// Receipt is what proves what ran and what the business system answered.
type Receipt struct {
	ExecutionID string `json:"execution_id"`
	RequestKey  string `json:"request_key"`
	// DownstreamKey is the Idempotency-Key the business system recorded
	// the write under: look it up there with this value.
	DownstreamKey string     `json:"downstream_key"`
	Operation     string     `json:"operation"`
	Status        Status     `json:"status"`
	ArgsDigest    string     `json:"args_digest"`
	ProviderRef   string     `json:"provider_ref"`
	CompletedAt   *time.Time `json:"completed_at"`
	// MandateID and MandateGrantors name the standing mandate that
	// confirmed the write and the user ids that granted it; empty when a
	// person confirmed this write.
	MandateID       string   `json:"mandate_id,omitempty"`
	MandateGrantors []string `json:"mandate_grantors,omitempty"`
}

// MarshalJSON writes the receipt with CompletedAt in TimeFormat, as every
// time agents read is written (the execution beside it says the same).
func (r Receipt) MarshalJSON() ([]byte, error) {
	type plain Receipt
	out := struct {
		plain
		CompletedAt *string `json:"completed_at"`
	}{plain: plain(r)}
	if r.CompletedAt != nil {
		at := FormatTime(*r.CompletedAt)
		out.CompletedAt = &at
	}
	return json.Marshal(out)
}

// Receipt returns the execution's receipt.
func (e *Execution) Receipt() Receipt {
	return Receipt{
		ExecutionID: e.ID, RequestKey: e.RequestKey, DownstreamKey: e.DownstreamKey, Operation: e.Operation,
		Status: e.Status, ArgsDigest: e.ArgsDigest, ProviderRef: e.ProviderRef,
		CompletedAt: e.CompletedAt, MandateID: e.MandateID, MandateGrantors: e.MandateGrantors,
	}
}

// Settled reports whether the execution reached a final outcome.
func (e *Execution) Settled() bool {
	return e.Status == StatusSucceeded || e.Status == StatusFailedTerminal
}

// Claims are a confirmation token's JWT claims (SPEC section 5).
type Claims struct {
	Issuer            string   `json:"iss"`
	Audience          string   `json:"aud"`
	Subject           string   `json:"sub"`
	Tenant            string   `json:"tenant"`
	ID                string   `json:"jti"`
	Operation         string   `json:"op"`
	Resource          string   `json:"resource,omitempty"`
	ResourceSetDigest string   `json:"resource_set_digest,omitempty"`
	ArgsDigest        string   `json:"args_digest"`
	Policy            string   `json:"policy"`
	RequestKey        string   `json:"request_key"`
	ProposalID        string   `json:"proposal_id"`
	Approvers         []string `json:"approvers"`
	AMR               []string `json:"amr"`
	IssuedAt          int64    `json:"iat"`
	Expiry            int64    `json:"exp"`
	// MandateID names the standing mandate that confirmed the write (amr
	// then is ["mandate"] and approvers its grantors).
	MandateID string `json:"mandate_id,omitempty"`
}

// DutyConflictError is the EDutyConflict refusal of an approval that
// DutyConflict forbids, naming the administrator and the agent.
func DutyConflictError(adminName, agentName string) *Error {
	return Errorf(EDutyConflict, "separation of duties: %s created or owns agent %s and also enrolled you, reset your password or is you, "+
		"so your approval could be theirs; a reviewer enrolled by someone else must approve this write", adminName, agentName)
}
