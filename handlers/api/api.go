// Package api holds the agent-facing JSON API (SPEC sections 3, 5 and 7):
// proposing writes, reading and long-polling proposals, cancelling them and
// redeeming confirmation tokens, plus the public JWKS and health endpoints.
//
// Handlers return errors instead of writing error responses: a *models.Error
// carries the code the server's one error handler maps to an HTTP status; any
// other error is internal and its text is never shown to the caller.
package api

import (
	"context"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// Protocol is what the API needs from the domain. *writes.Service
// implements it; every error it returns is a *models.Error or internal.
type Protocol interface {
	// AuthenticateAgent resolves an API key (EUnauthenticated).
	AuthenticateAgent(ctx context.Context, apiKey string) (models.Agent, error)
	// Propose creates a proposal; created is false when an idempotent retry
	// returned the existing one.
	Propose(ctx context.Context, agent models.Agent, in writes.ProposeInput) (p *models.Proposal, created bool, err error)
	// AgentGet returns a proposal the agent may read: its own, or any of
	// its tenant's with tenant-wide read (ENotFound otherwise, also for
	// other tenants' ids).
	AgentGet(ctx context.Context, agent models.Agent, id string) (*models.Proposal, error)
	// AgentWait returns a newer revision of p, just loaded (by AgentGet),
	// as soon as there is one, or p when max elapses; ERateLimited when the
	// agent holds too many long-polls.
	AgentWait(ctx context.Context, agent models.Agent, p *models.Proposal, max time.Duration) (*models.Proposal, error)
	// AgentList returns one page of the proposals the agent may read.
	AgentList(ctx context.Context, agent models.Agent, q writes.ListQuery) (writes.Page, error)
	// Cancel withdraws a proposal on behalf of its agent.
	Cancel(ctx context.Context, agent models.Agent, id string) (*models.Proposal, error)
	// Execute redeems a confirmation token.
	Execute(ctx context.Context, agent models.Agent, proposalID, token string) (*models.Execution, error)
	// JWKS returns the public token-signing keys as a JWK set document.
	JWKS(ctx context.Context) ([]byte, error)
	// Ready reports nil when the database answers.
	Ready(ctx context.Context) error
}

// DefaultMaxBodyBytes bounds request bodies when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes int64 = 64 << 10

// Options tune the API handlers; the zero value is usable.
type Options struct {
	// Clock is the server's clock; models.SystemClock when nil.
	Clock models.Clock
	// MaxBodyBytes bounds JSON request bodies; DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// BaseURL, when set (e.g. "https://countersign.example.com"), makes
	// Location headers absolute; otherwise they are absolute paths.
	BaseURL string
	// Events serves webhook registration and the event stream
	// (*events.Service); nil leaves those routes out.
	Events Events
	// Tools serves GET /api/v1/tools; the listing answers not_found when nil.
	Tools ToolExporter
	// Audit serves receipts and the audit log; nil leaves them out.
	Audit AuditProtocol
	// Mandates serves the standing-mandate endpoints (*writes.Service);
	// nil leaves them out.
	Mandates Mandates
}

// Handlers serves the agent API. Build it with New.
type Handlers struct {
	p       Protocol
	clock   models.Clock
	maxBody int64
	baseURL string
	events  Events
	tools   ToolExporter
	audit   AuditProtocol
	// mandates is nil when the mandate endpoints are off.
	mandates Mandates
}

// New returns the API handlers over p.
func New(p Protocol, opts Options) *Handlers {
	h := &Handlers{
		p:        p,
		clock:    opts.Clock,
		maxBody:  opts.MaxBodyBytes,
		baseURL:  strings.TrimRight(opts.BaseURL, "/"),
		events:   opts.Events,
		tools:    opts.Tools,
		audit:    opts.Audit,
		mandates: opts.Mandates,
	}
	if h.clock == nil {
		h.clock = models.SystemClock{}
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	return h
}

// MaxBodyBytes reports the body limit in force, so that the server's
// transport-level limit agrees with the decoder's.
func (h *Handlers) MaxBodyBytes() int64 { return h.maxBody }

// ServesAudit reports whether receipts and the audit log are served.
func (h *Handlers) ServesAudit() bool { return h.audit != nil }

// NoStore marks every response of the wrapped routes as not cacheable:
// proposals, tokens and errors are per-caller and change over time. It sets
// the header before the handler runs so that error responses carry it too.
func NoStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return next(c)
	}
}
