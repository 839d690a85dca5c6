// Package console holds the reviewer console's HTTP handlers: sign-in, the
// pending list, the proposal page with its Approve and Decline forms, the
// history and the administration pages. Handlers read the request, call the
// protocol service and map what it returns to a page's view-model; every
// rule lives in the protocol.
package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/views/ui"
	"github.com/countersign/countersign/web/session"
)

// PagesProtocol is what the reviewer pages need from the domain.
// *writes.Service implements it. Every method scopes by the tenant it is
// given (or the reviewer's tenant) and answers ENotFound for other tenants'
// ids.
type PagesProtocol interface {
	// Get returns a proposal with its decisions, token and execution.
	Get(ctx context.Context, tenantID, id string) (*models.Proposal, error)
	// List returns one page of proposals, newest first (no decisions,
	// tokens or executions).
	List(ctx context.Context, tenantID string, q writes.ListQuery) (writes.Page, error)
	// WaitAny returns a channel closed at the next change of any proposal
	// of the tenant, and only of that tenant.
	WaitAny(tenantID string) <-chan struct{}
	// Confirm records an approval bound to the digest the reviewer saw.
	Confirm(ctx context.Context, in writes.ConfirmInput) (*models.Proposal, error)
	// Decline records a refusal with its reason.
	Decline(ctx context.Context, in writes.DeclineInput) (*models.Proposal, error)
	// Revoke withdraws a confirmed, unused token (administrators only).
	Revoke(ctx context.Context, admin models.User, proposalID string) (*models.Proposal, error)
	// Counter turns a reviewer's edit into a new version that supersedes
	// the proposal.
	Counter(ctx context.Context, in writes.CounterInput) (*models.Proposal, error)
	// Registry is the tool registry, for titles and display re-rendering.
	Registry() *registry.Registry
	// CountAwaiting counts the tenant's proposals awaiting a decision.
	CountAwaiting(ctx context.Context, tenantID string) (int, error)
	// QueuedConfirmation tells whether a proposal whose approvals a group
	// change completed waits to be confirmed, and when it is next tried.
	QueuedConfirmation(ctx context.Context, tenantID, id string) (time.Time, bool, error)
}

var _ PagesProtocol = (*writes.Service)(nil)

// Page sizes of the lists.
const (
	pendingPageSize = 25
	historyPageSize = 20
)

// heartbeatInterval keeps idle event streams (and the proxies in front of
// them) alive.
const heartbeatInterval = 15 * time.Second

// Pages serves the reviewer pages: pending list, live updates, proposal,
// approve, decline, history and revoke. Build it with NewPages.
type Pages struct {
	p         PagesProtocol
	stepUp    StepUp // nil: security-key approvals are not offered
	assets    layout.Assets
	clock     models.Clock
	loc       *time.Location // the reviewer's zone: set per request by as
	heartbeat time.Duration
}

// NewPages returns the reviewer pages over p. clock is the server's clock
// (models.SystemClock when nil): countdowns start from it, never from the
// browser's. stepUp runs security-key approvals for the tiers that need
// them; without it (nil) those tiers cannot be approved in the console.
func NewPages(p PagesProtocol, assets *static.Assets, clock models.Clock, stepUp StepUp) *Pages {
	if clock == nil {
		clock = models.SystemClock{}
	}
	return &Pages{p: p, stepUp: stepUp, assets: AssetsFor(assets), clock: clock, loc: time.UTC, heartbeat: heartbeatInterval}
}

// signedIn returns the request's session. The session middleware redirects
// anonymous visitors before any of these handlers run; this is the backstop.
func signedIn(c echo.Context) (*session.Session, error) {
	s := session.From(c)
	if s == nil {
		return nil, echo.NewHTTPError(http.StatusUnauthorized)
	}
	return s, nil
}

// frame is the layout's view-model for a signed-in page.
func (h *Pages) frame(s *session.Session, title, active string) layout.Page {
	return layout.Page{
		Title:  title,
		User:   frameUser(s),
		CSRF:   s.CSRF,
		Active: active,
		Assets: h.assets,
	}
}

// frameUser is the signed-in user as the page frame shows it, with the
// zone the page's times are in.
func frameUser(s *session.Session) *layout.User {
	return &layout.User{Name: s.User.Name, Role: string(s.User.Role), Tenant: s.Tenant.Name,
		Zone: s.User.Location().String(), ZoneAuto: s.User.TimeZone == ""}
}

// as returns the pages as reviewer s reads them: every time in s's zone.
func (h *Pages) as(s *session.Session) *Pages {
	c := *h
	c.loc = s.User.Location()
	return &c
}

// noStore keeps proposals, which change and belong to one tenant, out of
// every cache.
func noStore(c echo.Context) {
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
}

// seeOther ends a successful form post: a 303 to url, or for htmx requests
// an HX-Redirect, which htmx follows with a full page load.
func seeOther(c echo.Context, url string) error {
	if c.Request().Header.Get("HX-Request") == "true" {
		c.Response().Header().Set("HX-Redirect", url)
		return c.NoContent(http.StatusOK)
	}
	return c.Redirect(http.StatusSeeOther, url)
}

// proposalURL is the console page of a proposal.
func proposalURL(id string) string { return "/proposals/" + url.PathEscape(id) }

// withQuery appends the non-empty values to path as a query string.
func withQuery(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// ---- Mapping the domain to view-models ------------------------------------

// formatTime shows an instant in the reviewer's zone with the zone named.
func (h *Pages) formatTime(t time.Time) string { return formatIn(t, h.loc) }

// formatIn is how every console page shows an instant: in the zone loc
// (the reviewer's), with the zone named.
func formatIn(t time.Time, loc *time.Location) string {
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

// countdown is an expiry as of the server's now.
func (h *Pages) countdown(expires, now time.Time) ui.Countdown {
	return ui.Countdown{
		ExpiresAt: expires.UTC().Format(time.RFC3339),
		ServerNow: now.UTC().Format(time.RFC3339Nano),
		At:        h.formatTime(expires),
		AtShort:   expires.In(h.loc).Format("15:04:05 MST"),
		Left:      timeLeft(expires.Sub(now)),
		Expired:   !now.Before(expires),
	}
}

// timeLeft says how long remains, the way the countdown script does.
func timeLeft(d time.Duration) string {
	secs := int(d.Round(time.Second) / time.Second)
	if secs <= 0 {
		return "expired"
	}
	if m := secs / 60; m > 0 {
		return fmt.Sprintf("%d min %d s left", m, secs%60)
	}
	return fmt.Sprintf("%d s left", secs)
}

// digest shortens "sha256:<64 hex>" to "sha256:0123abcd…6789cdef".
func digest(full string) ui.Digest {
	hex := strings.TrimPrefix(full, models.DigestPrefix)
	short := full
	if len(hex) > 20 {
		short = models.DigestPrefix + hex[:8] + "…" + hex[len(hex)-8:]
	}
	return ui.Digest{Full: full, Short: short}
}

// statusBadges give every state its words, a symbol and a tone: colour is
// never the only signal.
var statusBadges = map[models.Status]ui.Badge{
	models.StatusProposed:             {Text: "Proposed", Symbol: "•", Tone: "neutral"},
	models.StatusRejected:             {Text: "Rejected by the business system", Symbol: "⊘", Tone: "bad"},
	models.StatusAwaitingConfirmation: {Text: "Awaiting confirmation", Symbol: "◔", Tone: "wait"},
	models.StatusDeclined:             {Text: "Declined", Symbol: "✗", Tone: "bad"},
	models.StatusCancelled:            {Text: "Cancelled", Symbol: "⊘", Tone: "neutral"},
	models.StatusExpired:              {Text: "Expired", Symbol: "⊗", Tone: "neutral"},
	models.StatusConfirmed:            {Text: "Confirmed, not executed yet", Symbol: "✓", Tone: "info"},
	models.StatusRevoked:              {Text: "Revoked", Symbol: "⊘", Tone: "bad"},
	models.StatusExecuting:            {Text: "Executing", Symbol: "▶", Tone: "wait"},
	models.StatusSucceeded:            {Text: "Succeeded", Symbol: "✓", Tone: "ok"},
	models.StatusFailedRetryable:      {Text: "Failed, will be retried", Symbol: "↻", Tone: "warn"},
	models.StatusFailedTerminal:       {Text: "Failed", Symbol: "✗", Tone: "bad"},
	models.StatusUnknown:              {Text: "Outcome unknown, being checked", Symbol: "?", Tone: "warn"},
	models.StatusSuperseded:           {Text: "Edited by a reviewer, replaced", Symbol: "↦", Tone: "neutral"},
}

// proposalStatus is the badge of proposal p: its state's, except for a
// granted mandate, which is confirmed but never executed (no token is
// issued for it), so it says that the mandate was granted.
func proposalStatus(p *models.Proposal) ui.Badge {
	if p.MandateGranted() {
		return ui.Badge{Text: "Mandate granted", Symbol: "✓", Tone: "ok"}
	}
	return statusBadge(p.Status)
}

func statusBadge(s models.Status) ui.Badge {
	if b, ok := statusBadges[s]; ok {
		return b
	}
	return ui.Badge{Text: string(s), Symbol: "•", Tone: "neutral"}
}

// historyStatuses are the states the history lists (models.HistoryStatuses).
var historyStatuses = models.HistoryStatuses

// tierBadge names the tier and what it needs, with a shape that grows with
// the requirement: ● a click, ▲ a security key, doubled for a quorum.
func tierBadge(t models.Tier) ui.Badge {
	parts := []string{t.Name}
	sym, tone := "●", "info"
	if t.Approvers() > 1 {
		parts = append(parts, fmt.Sprintf("%d approvers", t.Approvers()))
		sym, tone = "●●", "strong"
	}
	if t.Confirmation == models.ConfirmWebAuthn {
		parts = append(parts, "security key")
		sym, tone = "▲", "warn"
		if t.Approvers() > 1 {
			sym, tone = "▲▲", "strong"
		}
	} else if t.Approvers() <= 1 {
		parts = append(parts, "click")
	}
	return ui.Badge{Text: strings.Join(parts, " · "), Symbol: sym, Tone: tone}
}

// confirmationText says in words what a tier requires before a token is
// issued.
func confirmationText(t models.Tier) string {
	var b strings.Builder
	switch {
	case t.Approvers() > 1:
		fmt.Fprintf(&b, "approvals from %d distinct reviewers", t.Approvers())
		if t.Confirmation == models.ConfirmWebAuthn {
			b.WriteString(", each confirmed with a security key (WebAuthn, user verification)")
		}
	case t.Confirmation == models.ConfirmWebAuthn:
		b.WriteString("one reviewer's approval confirmed with a security key (WebAuthn, user verification)")
	default:
		b.WriteString("one reviewer's approval (a click)")
	}
	if !t.AllowSelfApproval || t.Approvers() > 1 {
		b.WriteString("; the requester may not approve its own proposal")
	}
	return b.String()
}

// preview is the proposal's arguments as the reviewer sees them: re-rendered
// in the reviewer's zone by the tool that made them, or the stored preview
// when the tool or its policy changed since.
func (h *Pages) preview(p *models.Proposal) []models.PreviewField {
	if t, ok := h.p.Registry().Tool(p.Tool); ok && t.PolicyVersion == p.PolicyVersion && p.Kind == "" {
		if f, err := t.Preview(p.Arguments, p.ResourceLabel, h.loc); err == nil {
			return f
		}
	}
	return p.Preview
}

// summary is the write in one line and the Approve button's words, from
// the registry's display rules of the tool that made the proposal; the
// title and target when the tool or its policy changed since.
func (h *Pages) summary(p *models.Proposal) registry.Summary {
	if p.Kind == models.KindMandate {
		// Its arguments are a mandate's terms, not a write of the tool:
		// the tool's own summary would name no amount and no target.
		return registry.Summary{Line: "Standing mandate for " + h.toolTitle(p.Tool) + " · " + p.AgentName, Approve: "Approve"}
	}
	if t, ok := h.p.Registry().Tool(p.Tool); ok && t.PolicyVersion == p.PolicyVersion {
		if s, err := t.Summary(p.Arguments, target(p), h.loc); err == nil {
			return s
		}
	}
	return registry.Summary{Line: h.toolTitle(p.Tool) + " · " + target(p), Approve: "Approve"}
}

// toolTitle is the registry's title of a tool, or its name.
func (h *Pages) toolTitle(name string) string {
	if t, ok := h.p.Registry().Tool(name); ok && t.Title != "" {
		return t.Title
	}
	return name
}

// target names what a proposal writes to, for a person.
// revealer shows agent- and business-written text through visible.Reveal
// and gathers what it found, for one warning per page or row.
type revealer struct{ found []visible.Finding }

func (r *revealer) show(s string, mode visible.Mode) string {
	t := visible.Reveal(s, mode)
	r.found = append(r.found, t.Findings...)
	return t.Shown
}

// showJSON is show for a machine value, JSON text: its escapes of hidden
// code points are shown as ⟨U+…⟩ too (visible.RevealJSON).
func (r *revealer) showJSON(s string, mode visible.Mode) string {
	t := visible.RevealJSON(s, mode)
	r.found = append(r.found, t.Findings...)
	return t.Shown
}

func target(p *models.Proposal) string {
	switch {
	case p.ResourceLabel != "":
		return p.ResourceLabel
	case p.Batch():
		return fmt.Sprintf("%d resources", p.ResourceCount)
	default:
		return p.Resource
	}
}

// canRevoke reports whether to offer u the revoke button: the protocol
// decides again when it is pressed.
func canRevoke(p *models.Proposal, u models.User, now time.Time) bool {
	return u.Role == models.RoleAdmin && !u.Disabled && p.Revocable(now)
}

// amrText names how a reviewer authenticated.
func amrText(amr []string) string {
	if len(amr) == 0 {
		return "password"
	}
	out := make([]string, 0, len(amr))
	for _, m := range amr {
		switch m {
		case models.AMRPassword:
			out = append(out, "password")
		case models.AMRPasskey:
			out = append(out, "passkey sign-in")
		case models.AMRStepUp:
			out = append(out, "security key")
		default:
			out = append(out, m)
		}
	}
	return strings.Join(out, " + ")
}

// receipt is an execution's receipt with the digests to compare.
func (h *Pages) receipt(p *models.Proposal) *ui.Receipt {
	e := p.Execution
	if e == nil {
		return nil
	}
	r := &ui.Receipt{
		ExecutionID: e.ID, RequestKey: e.RequestKey, Operation: e.Operation, ProviderRef: e.ProviderRef,
		Status: statusBadge(e.Status), Requested: digest(p.ArgsDigest), Executed: digest(e.ArgsDigest),
	}
	if e.CompletedAt != nil {
		r.CompletedAt = h.formatTime(*e.CompletedAt)
	}
	agree := e.ArgsDigest == p.ArgsDigest
	seen := map[string]bool{}
	for _, d := range p.Approvals() {
		if !seen[d.DigestSeen] {
			seen[d.DigestSeen] = true
			r.Approved = append(r.Approved, digest(d.DigestSeen))
		}
		agree = agree && d.DigestSeen == p.ArgsDigest
	}
	r.DigestsAgree = agree && len(r.Approved) > 0
	if e.ReceiptJWS != "" {
		r.SignedURL, r.Signed = "/executions/"+url.PathEscape(e.ID)+"/receipt.jws", e.ReceiptJWS
	}
	r.AuditURL = proposalURL(p.ID) + "/audit"
	return r
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	return strings.ToUpper(string(r[0])) + string(r[1:])
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r := []rune(s)
	return strings.ToLower(string(r[0])) + string(r[1:])
}
