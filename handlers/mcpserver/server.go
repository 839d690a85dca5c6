// Package mcpserver serves countersign to MCP clients (streamable HTTP, the
// go-sdk's newest protocol revision and the older ones it negotiates). Every
// registry tool becomes a tool named request_<tool> whose call creates a
// proposal and nothing else; get_proposal, execute_confirmed and
// cancel_proposal follow it through. The layer calls the protocol service
// only: validation, tiers, expiry, tokens and execution are decided there.
//
// Nothing an MCP client sends can confirm a proposal. While one awaits a
// person, the client is shown where a person decides (the console page):
// through URL-mode elicitation and its completion notification on
// 2025-11-25 sessions, through an input-required result carrying the same
// URL elicitation on 2026-07-28 requests (SEP-2322), and always in the
// result. Whatever the client answers is ignored: the proposal is read again
// from the database.
package mcpserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// Protocol is what the MCP tools need from the domain; *writes.Service
// implements it.
type Protocol interface {
	// AuthenticateAgent resolves an API key (EUnauthenticated).
	AuthenticateAgent(ctx context.Context, apiKey string) (models.Agent, error)
	// Propose creates a proposal awaiting confirmation.
	Propose(ctx context.Context, agent models.Agent, in writes.ProposeInput) (*models.Proposal, bool, error)
	// Get returns a proposal of the tenant (ENotFound).
	Get(ctx context.Context, tenantID, id string) (*models.Proposal, error)
	// Wait returns when the proposal's revision differs from since, or
	// after max. The server's own watchers use it.
	Wait(ctx context.Context, tenantID, id string, since int64, max time.Duration) (*models.Proposal, error)
	// AgentWait is the wait an agent asks for, within its limit of
	// concurrent long-polls (ERateLimited beyond it), the same limit the
	// HTTP API's ?wait= holds to.
	AgentWait(ctx context.Context, agent models.Agent, p *models.Proposal, max time.Duration) (*models.Proposal, error)
	// Cancel withdraws the agent's own proposal.
	Cancel(ctx context.Context, agent models.Agent, id string) (*models.Proposal, error)
	// Execute redeems a confirmation token once.
	Execute(ctx context.Context, agent models.Agent, proposalID, token string) (*models.Execution, error)
	// RequestMandate creates a proposal of kind mandate for the agent.
	RequestMandate(ctx context.Context, agent models.Agent, in writes.MandateInput) (*models.Proposal, bool, error)
}

// Config configures the MCP endpoint.
type Config struct {
	// Registry lists the tools offered as request_<tool>.
	Registry *registry.Registry
	// BaseURL is the console's public origin; console links are
	// BaseURL + "/proposals/" + id. Clients need it absolute.
	BaseURL string
	// Version is reported to clients as the server's version.
	Version string
	// Logger receives failures that are not the caller's; slog.Default()
	// when nil.
	Logger *slog.Logger
	// SessionTimeout closes idle MCP sessions (and stops their watchers);
	// 30 minutes when zero.
	SessionTimeout time.Duration
}

// DefaultWait is how long get_proposal waits for a decision when the call
// does not say.
const DefaultWait = 30 * time.Second

// Handler is the MCP endpoint, an http.Handler. Build it with New.
type Handler struct {
	p       Protocol
	reg     *registry.Registry
	baseURL string
	log     *slog.Logger
	server  *mcp.Server
	http    http.Handler

	mu sync.Mutex
	// elicited holds the URL elicitations sent on 2025-11-25 sessions
	// whose completion is still to be announced, keyed by session id and
	// proposal id, so that one proposal is announced once per session.
	elicited map[elicitKey]bool
}

type elicitKey struct{ session, proposal string }

// New builds the MCP endpoint over p.
func New(p Protocol, cfg Config) *Handler {
	h := &Handler{p: p, reg: cfg.Registry, baseURL: strings.TrimRight(cfg.BaseURL, "/"), log: cfg.Logger,
		elicited: map[elicitKey]bool{}}
	if h.log == nil {
		h.log = slog.Default()
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	h.server = mcp.NewServer(&mcp.Implementation{Name: "countersign", Title: "countersign", Version: version},
		&mcp.ServerOptions{Instructions: instructions, Logger: h.log})
	h.addTools()
	h.addMandateTool()
	timeout := cfg.SessionTimeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	getServer := func(*http.Request) *mcp.Server { return h.server }
	// The SDK serves 2026-07-28 (sessionless, SEP-2575) only on a stateless
	// handler, and the older revisions' server-to-client requests (URL
	// elicitation) only on a stateful one: requests go to one or the other
	// by the protocol version they announce.
	//
	// The SDK's DNS-rebinding guard (a loopback listener refuses other Host
	// names) is off: countersign often listens on loopback behind a
	// reverse proxy that keeps the public Host, and every request here
	// must carry an agent key, which a rebinding page does not have.
	stateful := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: h.log,
		SessionTimeout: timeout, DisableLocalhostProtection: true})
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: h.log,
		Stateless: true, DisableLocalhostProtection: true})
	route := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		extendDeadlines(w, r)
		if r.Header.Get("Mcp-Protocol-Version") >= multiRoundTripVersion {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	})
	// Every HTTP request is authenticated with the agent's key. The SDK
	// binds a stateful session to the UserID of the request that opened it
	// and answers 403 to any other key on that session.
	h.http = auth.RequireBearerToken(h.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(route)
	return h
}

const instructions = `countersign puts a person between you and every write. Calling a request_* tool only ` +
	`creates a confirmation request (a proposal); nothing is written yet. Show the user the console_url, ` +
	`then call get_proposal until the status is confirmed (or declined, expired, cancelled), then call ` +
	`execute_confirmed once to carry out exactly the approved write. Never retry a declined proposal unchanged.`

// callDeadline bounds one authenticated MCP call (POST): a get_proposal
// waits up to a minute, and a URL elicitation waits for the person at the
// client to answer it.
const callDeadline = 10 * time.Minute

// extendDeadlines lifts the server-wide write timeout, which fits the
// API's requests, for authenticated MCP streams: the standalone stream
// (GET) carries notifications, such as an elicitation's completion, for as
// long as the session lives, and a call (POST) may wait on a person.
func extendDeadlines(w http.ResponseWriter, r *http.Request) {
	var until time.Time // none for the standalone stream
	if r.Method != http.MethodGet {
		until = time.Now().Add(callDeadline)
	}
	// An error means the writer cannot change its deadline; the server's
	// timeout then stays in force.
	_ = http.NewResponseController(w).SetWriteDeadline(until)
}

// ServeHTTP serves /mcp.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	jw := &jsonErrors{ResponseWriter: w}
	h.http.ServeHTTP(jw, r)
	jw.finish()
}

// agentExtra is where verify leaves the agent in the token info.
const agentExtra = "countersign.agent"

// authenticatedAgent is where WithAgent leaves the agent.
type authenticatedAgent struct{}

// WithAgent returns ctx carrying the agent that the request's key was
// authenticated as, in front of the handler (as the API authenticates it),
// so that the key is not checked twice.
func WithAgent(ctx context.Context, agent models.Agent) context.Context {
	return context.WithValue(ctx, authenticatedAgent{}, agent)
}

// verify authenticates an agent key for the SDK's bearer middleware: the
// agent WithAgent left, or the key looked up here.
func (h *Handler) verify(ctx context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
	agent, ok := ctx.Value(authenticatedAgent{}).(models.Agent)
	var err error
	if !ok {
		agent, err = h.p.AuthenticateAgent(ctx, key)
	}
	if err != nil {
		if models.IsCode(err, models.EUnauthenticated) {
			return nil, auth.ErrInvalidToken
		}
		h.log.LogAttrs(ctx, slog.LevelError, "mcp: authenticating an agent failed", slog.String("err", err.Error()))
		return nil, errors.New("authentication is unavailable")
	}
	return &auth.TokenInfo{UserID: agent.TenantID + "/" + agent.ID, Extra: map[string]any{agentExtra: agent}}, nil
}

// agentOf returns the agent that sent this request; every request carries
// its own authentication.
func agentOf(req *mcp.CallToolRequest) (models.Agent, bool) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return models.Agent{}, false
	}
	a, ok := req.Extra.TokenInfo.Extra[agentExtra].(models.Agent)
	return a, ok && a.ID != ""
}

// ConsoleURL is the console page where a person decides proposal id.
func (h *Handler) ConsoleURL(id string) string { return h.baseURL + "/proposals/" + id }
