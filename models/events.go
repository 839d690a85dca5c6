package models

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/models/visible"
)

// EventType names what happened to a proposal. Every state change has one
// ("proposal.<status>" or "execution.<status>"), plus proposal.created when a
// proposal is stored, proposal.decision for each reviewer decision, and
// proposal.approvals_changed when a change of group membership moves a
// waiting proposal's progress (an approval starts or stops counting toward
// a group's factor).
type EventType string

// Event types besides the per-status ones (see StatusEvent).
const (
	EventCreated          EventType = "proposal.created"
	EventDecision         EventType = "proposal.decision"
	EventApprovalsChanged EventType = "proposal.approvals_changed"
)

// StatusEvent is the event type of a change into status st: execution
// states (executing and after) are "execution.<status>", the others
// "proposal.<status>".
func StatusEvent(st Status) EventType {
	switch st {
	case StatusExecuting, StatusSucceeded, StatusFailedRetryable, StatusFailedTerminal, StatusUnknown:
		return EventType("execution." + string(st))
	}
	return EventType("proposal." + string(st))
}

// Event is one entry of the outbox: a change of one proposal, recorded in
// the transaction that made it. Its ID is a ULID ("evt_…"): events sort by
// ID in the order they were created, and the ID is the webhook-id of every
// delivery of the event, so receivers de-duplicate by it. Data never
// carries a token.
type Event struct {
	ID         string
	TenantID   string
	AgentID    string
	ProposalID string
	Type       EventType
	Status     Status
	Revision   int64
	Data       json.RawMessage // a small JSON object, "{}" at least
	CreatedAt  time.Time
}

// WebhookEndpoint is a registered receiver of events. AgentID set means an
// agent registered it and receives its own proposals' events only; empty
// means a tenant administrator registered it for the whole tenant.
type WebhookEndpoint struct {
	ID          string
	TenantID    string
	AgentID     string
	URL         string
	Description string
	CreatedAt   time.Time
	DisabledAt  *time.Time
}

// How many live (not disabled) webhook endpoints one scope may have: each
// is sent every event it sees, so more would let one agent multiply the
// work its proposals make, and each takes its share of the dispatcher.
const (
	// MaxAgentWebhookEndpoints bounds an agent's own endpoints.
	MaxAgentWebhookEndpoints = 8
	// MaxTenantWebhookEndpoints bounds a tenant's tenant-wide endpoints.
	MaxTenantWebhookEndpoints = 16
)

// EndpointScope says whose webhook endpoints an operation may see and
// change: an agent's own (AgentID set) or, for a tenant administrator,
// every endpoint of the tenant (AgentID empty).
type EndpointScope struct {
	TenantID string
	AgentID  string
}

// Delivery channels.
const (
	ChannelWebhook = "webhook"
	ChannelEmail   = "email"
	ChannelSlack   = "slack"
)

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// Delivery states: pending (due now or at NextAttemptAt), succeeded, or
// failed (every attempt used; a person may redeliver).
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliverySucceeded DeliveryStatus = "succeeded"
	DeliveryFailed    DeliveryStatus = "failed"
)

// Delivery is one event on its way to one destination: a webhook endpoint
// (Target is the endpoint id) or a notification channel (Target is the
// channel name).
type Delivery struct {
	ID            string
	TenantID      string
	Event         Event
	Channel       string
	Target        string
	Status        DeliveryStatus
	Attempts      int
	NextAttemptAt time.Time
	LastCode      int
	LastError     string
	CreatedAt     time.Time
	DeliveredAt   *time.Time
}

// DeliveryAttempt is one line of a delivery log.
type DeliveryAttempt struct {
	Attempt    int
	StatusCode int
	Error      string
	Duration   time.Duration
	At         time.Time
}

// SelfApprovalForbidden reports whether the requester (the agent's owner)
// is barred from approving a proposal of tier t: unless the tier allows it,
// and always when the tier needs two or more approvers (a quorum, or
// approver-group factors that add up to two or more; Tier.Approvers).
func SelfApprovalForbidden(t Tier) bool { return !t.AllowSelfApproval || t.Approvers() > 1 }

// Summary is the one-line description of a proposal that notifications
// carry: the action, the reviewer-facing values of its arguments (amount,
// target, …), the risk tier and the time left at now. Values come from the
// preview's display strings only, each made safe by NotificationText.
func (p *Proposal) Summary(now time.Time) string {
	var b strings.Builder
	b.WriteString(p.Tool)
	sep := ": "
	for _, f := range p.Preview {
		v := NotificationText(f.Display, 60)
		if v == "" {
			continue
		}
		b.WriteString(sep)
		b.WriteString(NotificationText(f.Label, 30))
		b.WriteString(" ")
		b.WriteString(v)
		sep = ", "
	}
	left := p.ExpiresAt.Sub(now).Truncate(time.Second)
	if left <= 0 {
		fmt.Fprintf(&b, " — tier %s, expired", p.Tier.Name)
	} else {
		fmt.Fprintf(&b, " — tier %s, %s left", p.Tier.Name, left)
	}
	return b.String()
}

// NotificationText is s as a notification (e-mail, chat) shows it: one
// line (whitespace collapsed) of at most max characters; every code point
// the console would hide escaped as the console escapes it
// (visible.Reveal, e.g. ⟨U+202E⟩), so that direction controls, zero-width
// and control characters reach no reviewer unseen; and nothing a mail or
// chat client would turn into a link: "://" becomes "[:]//" and the dots of
// anything shaped like a domain name or an IPv4 address become "[.]"
// ("www[.]example[.]com/p", "bob@example[.]com"). Escaping comes first,
// so that an invisible character cannot split a link from the rule.
func NotificationText(s string, max int) string {
	return defang(visible.Reveal(oneLine(s, max), visible.Strict).Shown)
}

// dotted is a run of labels joined by dots (ASCII or the ideographic and
// full-width ones that IDNA reads as dots).
var dotted = regexp.MustCompile(`[\p{L}\p{N}\p{M}_-]+(?:[.\x{3002}\x{FF0E}\x{FF61}][\p{L}\p{N}\p{M}_-]+)+`)

var dots = regexp.MustCompile(`[.\x{3002}\x{FF0E}\x{FF61}]`)

// defang breaks what clients turn into links: "://", host names (the last
// label holds a letter, as every top-level domain does) and dotted-quad
// addresses. Amounts and versions ("123.45", "1.2.3") stay as they are.
func defang(s string) string {
	s = strings.ReplaceAll(s, "://", "[:]//")
	return dotted.ReplaceAllStringFunc(s, func(m string) string {
		labels := dots.Split(m, -1)
		last := labels[len(labels)-1]
		if !strings.ContainsFunc(last, unicode.IsLetter) && len(labels) != 4 {
			return m
		}
		return dots.ReplaceAllString(m, "[.]")
	})
}

// oneLine collapses whitespace and cuts s to max characters.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}
