package writes

import (
	"encoding/json"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/internal/verified"
)

// ProposeInput is an agent's proposal request, as received.
type ProposeInput struct {
	Tool       string
	Arguments  json.RawMessage
	RequestKey string // optional; derived when empty
	Context    string // free text for reviewers
}

// ListQuery selects proposals of one tenant, newest first, keyset-paginated.
type ListQuery struct {
	AgentID    string          // when set, only this agent's proposals
	Statuses   []models.Status // when set, only these states
	Tool       string
	Tier       string
	Resource   string // one target: a resource id or a batch's set digest
	ReviewerID string // only what this reviewer decided
	// AgentName and ReviewerName filter by name (the console's search);
	// a name that names nobody matches nothing.
	AgentName, ReviewerName string
	Before                  time.Time // only what was created before (zero: no bound)
	// ByTimeLeft sorts by expiry, soonest first, instead of newest first.
	ByTimeLeft bool
	// WithDecisions loads the decisions of each listed proposal and, for a
	// tier with approver groups, their progress.
	WithDecisions bool
	Cursor        string // opaque; from the previous page's next cursor, same order
	Limit         int    // 1..100; default 50
}

// Page is one page of proposals; Next is empty on the last page.
type Page struct {
	Items []*models.Proposal
	Next  string
}

// Evidence is how a reviewer authenticated an approval. Only models/auth
// (auth.ApprovalEvidence: the session's sign-in) and models/stepup (after
// it verified a security-key assertion over this very proposal) can make
// one: its fields are unexported and its package is internal to models, so
// no handler can claim a security-key approval it did not verify. Confirm
// refuses the zero Evidence.
type Evidence = verified.Evidence

// ConfirmInput is a reviewer's structured approval of one proposal, bound to
// the digest the reviewer saw.
type ConfirmInput struct {
	Reviewer   models.User
	ProposalID string
	DigestSeen string
	// EffectSeen is the effect digest the reviewer was shown with the
	// proposal (its EffectDigest; "" when it has no effect preview). Any
	// other value, "" for a proposal with a preview included, is refused
	// (EEffectChanged, EffectNamed).
	EffectSeen string
	// Evidence is how Reviewer authenticated: a sign-in, or a sign-in plus
	// a verified security-key assertion over ProposalID and DigestSeen.
	Evidence Evidence
	// Comment is the reviewer's optional word to the agent and the history
	// (at most MaxReason characters); it is kept as the decision's reason.
	Comment string
}

// DeclineInput is a reviewer's refusal; Reason is required.
type DeclineInput struct {
	Reviewer   models.User
	ProposalID string
	DigestSeen string
	Reason     string
}

// MaxWait bounds long-polling.
const MaxWait = 60 * time.Second
