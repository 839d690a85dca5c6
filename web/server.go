// Package web builds countersign's HTTP server: middleware, the one route
// table (routes.go) and the one error handler that turns domain error codes
// into HTTP statuses and JSON bodies, or HTML pages for the console.
package web

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/handlers/api"
	"github.com/countersign/countersign/handlers/console"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/web/session"
)

// Config is the server's configuration, read once in cmd/countersign.
type Config struct {
	// Addr is the listen address, e.g. "127.0.0.1:8080"; it becomes
	// e.Server.Addr, so the caller may simply call e.Start(cfg.Addr).
	Addr string
	// BaseURL is the public origin, e.g. "https://countersign.example.com";
	// when set, Location headers are absolute.
	BaseURL string
	// MaxBodyBytes bounds request bodies; api.DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// Logger receives the access log and internal errors; slog.Default()
	// when nil.
	Logger *slog.Logger
	// Secure means the server is reached over TLS (directly or through a
	// proxy): responses then carry Strict-Transport-Security. The session
	// cookies' Secure flag is the session manager's (session.Config).
	Secure bool
	// DefaultTenant pre-fills the organization on the sign-in form.
	DefaultTenant string
	// TrustedProxies are the networks of reverse proxies whose
	// X-Forwarded-For the server believes: the client address (which the
	// sign-in limits key on) is then the right-most address in that header
	// that is not itself a trusted proxy. Empty: the connection's peer is
	// the client, and X-Forwarded-For is ignored.
	TrustedProxies []netip.Prefix
	// Drain, when set, refuses new requests with 503 once started, for a
	// graceful shutdown (see Drain), and answers parked long-polls at its
	// End; without it they are answered at their deadline only.
	Drain *Drain
	// Metrics, when set, is served at GET /metrics; it does its own
	// authentication.
	Metrics http.Handler
	// Tracer, when set, makes a server span for every request (see
	// serverSpan).
	Tracer trace.Tracer
}

// Deps are the server's collaborators.
type Deps struct {
	// Protocol is the domain service (*writes.Service).
	Protocol api.Protocol
	// Clock is the server's clock; models.SystemClock when nil.
	Clock models.Clock
	// Tools is the tool registry agents list at /api/v1/tools
	// (*registry.Registry); nil answers not_found there.
	Tools api.ToolExporter
	// MCP serves the MCP endpoint at /mcp (*mcpserver.Handler); nil leaves
	// it out.
	MCP http.Handler

	// The console (SPEC section 8) is served when Auth and Sessions are
	// set; without them the server is the agent API alone.

	// Auth signs reviewers in and runs the admin pages.
	Auth *auth.Service
	// Sessions keeps console sessions in cookies and guards console routes.
	Sessions *session.Manager
	// Pages is the reviewer pages' domain (*writes.Service); nil leaves
	// the pending list, proposal pages and history out.
	Pages console.PagesProtocol
	// Groups runs the reviewer-group admin page (*writes.Service); nil
	// leaves it out.
	Groups console.GroupService
	// Assets are the console's static files; static.New() when nil.
	Assets *static.Assets
	// StepUp runs security keys, security-key approvals and passkey
	// sign-in (*stepup.Service); nil leaves them out, and tiers that need
	// a security key cannot be approved in the console.
	StepUp StepUp
	// Events registers webhooks, serves the agents' event stream and the
	// webhook admin pages (*events.Service); nil leaves them out.
	Events Events
	// Audit serves signed receipts and the audit log to the API and the
	// console (*writes.Service); nil leaves them out.
	Audit Audit
	// Mandates serves standing mandates to agents and the mandates page
	// (*writes.Service); nil leaves them out.
	Mandates Mandates
}

// Events is what the server needs for webhooks and event streams.
type Events interface {
	api.Events
	console.WebhookService
}

// Audit is what receipts and the audit pages need.
type Audit interface {
	api.AuditProtocol
	console.AuditProtocol
}

// Mandates is what the agent API and the console need for standing
// mandates.
type Mandates interface {
	api.Mandates
	console.MandatesProtocol
}

// apiMandates keeps a nil Mandates a nil interface for the API handlers.
func apiMandates(m Mandates) api.Mandates {
	if m == nil {
		return nil
	}
	return m
}

// StepUp is what the console needs for security keys.
type StepUp interface {
	console.StepUp
	console.PasskeyVerifier
}

// The domain service is what production wires in.
var (
	_ api.Protocol          = (*writes.Service)(nil)
	_ console.PagesProtocol = (*writes.Service)(nil)
	_ StepUp                = (*stepup.Service)(nil)
	_ Events                = (*events.Service)(nil)
	_ Audit                 = (*writes.Service)(nil)
	_ Mandates              = (*writes.Service)(nil)
)

// consoleHandlers are the console's handlers and the middleware guarding
// them; nil when the console is off.
type consoleHandlers struct {
	sessions *session.Manager
	auth     *console.AuthHandlers
	admin    *console.AdminHandlers
	pages    *console.Pages      // nil without Deps.Pages
	keys     *console.Keys       // nil without Deps.StepUp
	passkeys *console.Passkeys   // nil without Deps.StepUp
	webhooks *console.Webhooks   // nil without Deps.Events
	audit    *console.AuditPages // nil without Deps.Audit
	groups   *console.Groups     // nil without Deps.Groups
	mandates *console.Mandates   // nil without Deps.Mandates
	zones    *console.Zones
	assets   *static.Assets
}

// Server timeouts. Writes must outlast the longest long-poll.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = writes.MaxWait + 30*time.Second
	idleTimeout       = 120 * time.Second
)

// NewServer builds the complete HTTP server: middleware, routes and error
// handling. It does not listen; the caller starts it.
func NewServer(cfg Config, deps Deps) *echo.Echo {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	clock := deps.Clock
	if clock == nil {
		clock = models.SystemClock{}
	}
	apiHandlers := api.New(deps.Protocol, api.Options{
		Clock:        clock,
		MaxBodyBytes: cfg.MaxBodyBytes,
		BaseURL:      cfg.BaseURL,
		Events:       apiEvents(deps.Events),
		Tools:        deps.Tools,
		Audit:        deps.Audit,
		Mandates:     apiMandates(deps.Mandates),
	})

	var con *consoleHandlers
	if deps.Auth != nil && deps.Sessions != nil {
		assets := deps.Assets
		if assets == nil {
			assets = static.New()
		}
		con = &consoleHandlers{
			sessions: deps.Sessions,
			auth: console.NewAuthHandlers(deps.Auth, deps.Sessions, assets,
				console.AuthOptions{DefaultTenant: cfg.DefaultTenant, Passkeys: deps.StepUp != nil}),
			admin:  console.NewAdminHandlers(deps.Auth, assets),
			zones:  console.NewZones(deps.Auth, assets, clock),
			assets: assets,
		}
		if deps.Pages != nil {
			con.pages = console.NewPages(deps.Pages, assets, clock, deps.StepUp)
		}
		if deps.Mandates != nil {
			con.mandates = console.NewMandates(deps.Mandates, deps.Auth, assets, clock)
		}
		if deps.Events != nil {
			con.webhooks = console.NewWebhooks(deps.Events, deps.Auth, assets)
		}
		if deps.Audit != nil {
			con.audit = console.NewAuditPages(deps.Audit, assets)
		}
		if deps.Groups != nil {
			con.groups = console.NewGroups(deps.Groups, deps.Auth, assets)
		}
		if deps.StepUp != nil {
			con.keys = console.NewKeys(deps.StepUp, assets)
			con.passkeys = console.NewPasskeys(deps.StepUp, deps.Auth, deps.Sessions)
		}
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Server.Addr = cfg.Addr
	e.Server.ReadHeaderTimeout = readHeaderTimeout
	e.Server.ReadTimeout = readTimeout
	e.Server.WriteTimeout = writeTimeout
	e.Server.IdleTimeout = idleTimeout
	e.IPExtractor = ipExtractor(cfg.TrustedProxies)
	var page errorPage
	if con != nil {
		page = con.auth.ErrorPage
	}
	e.HTTPErrorHandler = errorHandler(logger, page)

	// Outermost first: every request may be detached (a parked long-poll,
	// answered after its handler returned; see package detach), and every
	// response, including errors and recovered panics, gets a request id, nosniff, the security headers (CSP, no
	// framing, no-store unless a handler allows caching) and an access-log
	// line.
	e.Use(
		detachable(logger),
		requestID(),
		serverSpan(cfg.Tracer),
		noSniff,
		securityHeaders(cfg.Secure),
		accessLog(logger),
		drainMiddleware(cfg.Drain),
		recoverPanics,
		headStopsAtHeaders,
		bodyLimit(apiHandlers.MaxBodyBytes()),
	)
	routes(e, apiHandlers, deps.MCP, con)
	operatorRoutes(e, cfg.Metrics)
	return e
}

// apiEvents keeps a nil Events a nil interface for the API handlers.
func apiEvents(ev Events) api.Events {
	if ev == nil {
		return nil
	}
	return ev
}

// ipExtractor is how the server finds the client's address, which the
// sign-in limits key on. X-Forwarded-For and X-Real-IP are forgeable, so
// without trusted proxies the connection's peer is the client; with them,
// X-Forwarded-For is read only when the peer is one of them, and only the
// trusted hops are skipped (echo's defaults would also trust every
// loopback, link-local and private address; they are turned off).
func ipExtractor(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		opts = append(opts, echo.TrustIPRange(&net.IPNet{IP: p.Masked().Addr().AsSlice(),
			Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// ParsePrefixes reads a list of CIDR prefixes or single addresses
// ("10.0.0.0/8", "192.0.2.7", "::1"), such as Config.TrustedProxies or the
// ranges webhooks may be sent to.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range list {
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", v)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
