// Package app assembles countersign from its configuration: the store, the
// tool registry and its adapters, the token service, the protocol service
// and the HTTP server. cmd/countersign and the end-to-end tests both build
// the application through it, so what is tested is what runs.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/handlers/mcpserver"
	"github.com/countersign/countersign/internal/kek"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/internal/tracing"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/adapters/httpadapter"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/web"
	"github.com/countersign/countersign/web/session"
)

// Config is everything the application needs, read once by the caller.
type Config struct {
	// DB is "sqlite://PATH" or "postgres://…".
	DB string
	// ToolsFile is the tool registry (YAML); empty means the built-in demo
	// registry.
	ToolsFile string
	// Addr is the listen address, e.g. "127.0.0.1:8080".
	Addr string
	// BaseURL is the public origin, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Issuer and Audience go into every token (iss, aud); they default to
	// "countersign" and "countersign:execute".
	Issuer, Audience string
	// Getenv reads adapter secrets (registry secret_env); os.Getenv in
	// production.
	Getenv func(string) string
	// Clock is the server clock; models.SystemClock when nil.
	Clock models.Clock
	// Logger receives logs; slog.Default() when nil.
	Logger *slog.Logger
	// ExecutionLease is the longest lease an execution attempt may hold, and
	// LeaseMargin the time on top of an adapter's timeout to record the
	// outcome (see writes.Config); protocol's defaults when zero.
	ExecutionLease, LeaseMargin time.Duration
	// HeartbeatInterval and InstanceTimeout: how often this server renews
	// its heartbeat, and how old another's may be before its executions are
	// taken over (see writes.Config); protocol's defaults when zero.
	HeartbeatInterval, InstanceTimeout time.Duration
	// PollInterval bounds how long a long-poll sleeps before it compares
	// the clock with its proposal's expiry again (see writes.Config);
	// changes wake long-polls through notifications.
	PollInterval time.Duration
	// Limits are the default per-agent limits (see writes.Config); the
	// zero value limits nothing.
	Limits models.Limits

	// Secure marks the console's cookies Secure and adds HSTS: set it when
	// the console is reached over TLS, directly or through a proxy. A
	// BaseURL starting with https:// implies it.
	Secure bool
	// CookieHashKey (at least 32 bytes) and CookieBlockKey (16, 24 or 32
	// bytes) authenticate and encrypt the session cookies. Give both or
	// neither: without them the keys are created once in the database and
	// shared by every instance and restart.
	CookieHashKey, CookieBlockKey []byte
	// IdleTimeout and AbsoluteTimeout end console sessions after that long
	// without a request, and that long after sign-in; 30 minutes and 12
	// hours when zero.
	IdleTimeout, AbsoluteTimeout time.Duration
	// DefaultTenant pre-fills the organization on the sign-in form, e.g.
	// "demo" in demo mode.
	DefaultTenant string
	// PasswordHash is the argon2id cost of new password hashes
	// (secret.DefaultPasswordParams when zero), and PasswordHashConcurrency
	// bounds how many hashes run at once (GOMAXPROCS when zero): each holds
	// its memory cost while it runs.
	PasswordHash            secret.PasswordParams
	PasswordHashConcurrency int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (web.Config.TrustedProxies).
	TrustedProxies []netip.Prefix

	// RPID is the WebAuthn relying party id security keys are bound to: the
	// console's host name or a parent domain. Default: BaseURL's host, or
	// "localhost" when that is an IP address (browsers refuse IP
	// addresses) or BaseURL is empty.
	RPID string
	// RPName is the name browsers show during security-key ceremonies;
	// "countersign" when empty.
	RPName string
	// FIDOMetadata is an MDS3 BLOB file (the FIDO Metadata Service's list
	// of certified authenticators): when set, security keys are registered
	// only when their attestation proves a model it certifies
	// (stepup.LoadMetadata). FIDOMetadataRoot is the PEM root its signature
	// chains to; the FIDO Alliance's production root when empty.
	FIDOMetadata, FIDOMetadataRoot string
	// Origins are the origins security-key responses may come from.
	// Default: BaseURL's origin, or the same at localhost when BaseURL's
	// host is an IP address (see WebAuthnDefaults).
	Origins []string

	// SMTP, when its Addr is set, e-mails reviewers when a proposal awaits
	// them; SlackWebhookURL, when set, posts to a Slack-compatible
	// incoming webhook. Links point at BaseURL.
	SMTP            events.SMTPConfig
	SlackWebhookURL string
	// WebhookAllow are the ranges beyond public addresses that webhooks
	// may be sent to (events.Config.AllowAddresses).
	WebhookAllow []netip.Prefix
	// DispatchInterval is how often webhooks and notifications that are due
	// are looked for; 1s when zero.
	DispatchInterval time.Duration
	// OutboxRetention is how long events, their deliveries and the
	// delivery log are kept once nothing is pending
	// (events.Config.Retention); zero keeps them for ever.
	OutboxRetention time.Duration
	// MetricsToken, when set, serves Prometheus metrics at /metrics of the
	// main server to requests with "Authorization: Bearer MetricsToken".
	// Without it /metrics is not routed; MetricsHandler serves them on a
	// listener of the caller's choosing.
	MetricsToken string

	// KEK encrypts the keys the database keeps (token signing keys, cookie
	// keys); nil stores them unencrypted. Open fails with a
	// *store.KeyError when stored keys need another KEK.
	KEK *kek.KEK

	// TracerProvider receives spans for requests and protocol calls
	// (see internal/tracing); nil traces nothing.
	TracerProvider trace.TracerProvider

	// OnStatement, when set, sees the SQL of every statement the store runs
	// (store.Options.OnStatement); countersign-bench counts them.
	OnStatement func(sql string)
}

// App is the assembled application.
type App struct {
	Store    *store.Store
	Registry *registry.Registry
	Tokens   *token.Service
	Protocol *writes.Service
	Auth     *auth.Service
	// Passwords hashes reviewer passwords with the configured costs.
	Passwords *secret.Passwords
	Sessions  *session.Manager
	StepUp    *stepup.Service
	Server    *echo.Echo
	cfg       Config
	Events    *events.Service
	// Drain refuses new requests with 503 while Serve shuts down.
	Drain *web.Drain
	// Keys is what the start-up check of the stored keys found: how many
	// are encrypted and how many still plain.
	Keys store.KeyReport
	// Metrics are the Prometheus metrics; other parts (notification
	// queues) may add gauges with Metrics.RegisterGauge.
	Metrics *metrics.Metrics
}

// Open connects to the database, applies migrations, loads the registry,
// builds every adapter and the HTTP server. The caller owns Close.
func Open(ctx context.Context, cfg Config) (*App, error) {
	if cfg.Clock == nil {
		cfg.Clock = models.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Issuer == "" {
		cfg.Issuer = "countersign"
	}
	if cfg.Audience == "" {
		cfg.Audience = "countersign:execute"
	}
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	reg := registry.Demo()
	if cfg.ToolsFile != "" {
		var err error
		if reg, err = registry.LoadFile(cfg.ToolsFile); err != nil {
			return nil, fmt.Errorf("tools %s: %w", cfg.ToolsFile, err)
		}
	}
	st, err := store.Open(cfg.DB, store.Options{Logger: cfg.Logger, Clock: cfg.Clock, KEK: cfg.KEK,
		Notify: events.NotifyChannels(cfg.SMTP, cfg.SlackWebhookURL), OnStatement: cfg.OnStatement})
	if err != nil {
		return nil, err
	}
	a := &App{Store: st, Registry: reg, cfg: cfg}
	if err := a.init(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return a, nil
}

func (a *App) init(ctx context.Context) error {
	if _, err := a.Store.Migrate(ctx); err != nil {
		return err
	}
	// Every stored key opens with the configured KEK, or nothing starts.
	var err error
	if a.Keys, err = a.Store.CheckKeys(ctx); err != nil {
		return err
	}
	adapters, err := buildAdapters(a.Registry, a.Store, a.cfg.Getenv)
	if err != nil {
		return err
	}
	a.Metrics = metrics.New(metrics.Config{Stats: a.Store, DB: a.Store.DB(), Clock: a.cfg.Clock, Logger: a.cfg.Logger,
		Waiting: func() int { return a.Protocol.Waiting() }})
	for name, ad := range adapters {
		adapters[name] = a.Metrics.Adapter(name, ad)
	}
	a.Tokens = token.New(a.Store, token.Config{Issuer: a.cfg.Issuer, Audience: a.cfg.Audience, Clock: a.cfg.Clock})
	a.Protocol, err = writes.New(ctx, writes.Config{Store: a.Store, Registry: a.Registry, Tokens: a.Tokens,
		Adapters: adapters, Clock: a.cfg.Clock, Logger: a.cfg.Logger,
		ExecutionLease: a.cfg.ExecutionLease, LeaseMargin: a.cfg.LeaseMargin, PollInterval: a.cfg.PollInterval,
		HeartbeatInterval: a.cfg.HeartbeatInterval, InstanceTimeout: a.cfg.InstanceTimeout, Limits: a.cfg.Limits,
		Observer: a.Metrics, Tracer: tracing.Tracer(a.cfg.TracerProvider)})
	if err != nil {
		return err
	}
	a.Events = events.New(events.Config{Store: a.Store, Clock: a.cfg.Clock, Logger: a.cfg.Logger,
		BaseURL: a.cfg.BaseURL, SMTP: a.cfg.SMTP, SlackWebhookURL: a.cfg.SlackWebhookURL, AllowAddresses: a.cfg.WebhookAllow,
		Retention: a.cfg.OutboxRetention, Changes: a.Protocol})
	if a.cfg.PasswordHash == (secret.PasswordParams{}) {
		a.cfg.PasswordHash = secret.DefaultPasswordParams
	}
	if a.Passwords, err = secret.NewPasswords(a.cfg.PasswordHash, a.cfg.PasswordHashConcurrency); err != nil {
		return err
	}
	rpID, origins, err := WebAuthnDefaults(a.cfg.BaseURL, a.cfg.RPID, a.cfg.Origins)
	if err != nil {
		return err
	}
	var md *stepup.Metadata
	if a.cfg.FIDOMetadata != "" {
		if md, err = stepup.LoadMetadata(a.cfg.FIDOMetadata, a.cfg.FIDOMetadataRoot); err != nil {
			return err
		}
		log := a.cfg.Logger.With("models", md.Entries, "blob", md.Number, "next_update", md.NextUpdate.Format(time.DateOnly))
		if md.Stale(a.cfg.Clock.Now()) {
			log.Warn("FIDO metadata is past its next update: download the current BLOB")
		} else {
			log.Info("security keys must prove a model the FIDO metadata certifies")
		}
	}
	// The one WebAuthn relying party of the process.
	a.StepUp, err = stepup.New(stepup.Config{RPID: rpID, RPName: a.cfg.RPName, Origins: origins,
		Store: a.Store, Protocol: a.Protocol, Clock: a.cfg.Clock, Metadata: md})
	if err != nil {
		return err
	}
	var keys auth.KeyPolicy
	if md != nil {
		keys = a.StepUp
	}
	a.Auth = auth.New(auth.Config{Store: a.Store, Clock: a.cfg.Clock, Passwords: a.Passwords,
		IdleTimeout: a.cfg.IdleTimeout, AbsoluteTimeout: a.cfg.AbsoluteTimeout, Keys: keys})
	hashKey, blockKey, err := a.cookieKeys(ctx)
	if err != nil {
		return err
	}
	secure := a.cfg.Secure || strings.HasPrefix(a.cfg.BaseURL, "https://")
	a.Sessions, err = session.NewManager(a.Auth, session.Config{Secure: secure,
		HashKey: hashKey, BlockKey: blockKey, Lifetime: a.Auth.AbsoluteTimeout()})
	if err != nil {
		return err
	}
	a.Drain = &web.Drain{}
	var metricsRoute http.Handler
	if a.cfg.MetricsToken != "" {
		metricsRoute = metrics.Protect(a.Metrics.Handler(), a.cfg.MetricsToken)
	}
	a.Server = web.NewServer(web.Config{Addr: a.cfg.Addr, BaseURL: a.cfg.BaseURL, Logger: a.cfg.Logger,
		Secure: secure, DefaultTenant: a.cfg.DefaultTenant, TrustedProxies: a.cfg.TrustedProxies, Drain: a.Drain,
		Metrics: metricsRoute, Tracer: webTracer(a.cfg.TracerProvider)},
		web.Deps{Protocol: a.Protocol, Clock: a.cfg.Clock, Tools: a.Registry,
			MCP:  mcpserver.New(a.Protocol, mcpserver.Config{Registry: a.Registry, BaseURL: a.cfg.BaseURL, Logger: a.cfg.Logger}),
			Auth: a.Auth, Sessions: a.Sessions,
			Pages: a.Protocol, Groups: a.Protocol, Assets: static.New(), StepUp: a.StepUp, Events: a.Events, Audit: a.Protocol,
			Mandates: a.Protocol})
	return nil
}

// WebAuthnDefaults completes the relying party configuration: rpID
// defaults to baseURL's host, or to "localhost" when that host is an IP
// address (browsers accept no IP address as a relying party id) or there
// is no base URL; origins default to baseURL's origin, or the same origin
// at localhost when baseURL's host is an IP address. Explicit values are
// kept as given.
func WebAuthnDefaults(baseURL, rpID string, origins []string) (string, []string, error) {
	var base *url.URL
	if baseURL != "" {
		u, err := url.Parse(baseURL)
		if err != nil || u.Host == "" {
			return "", nil, fmt.Errorf("base URL %q: not an absolute URL", baseURL)
		}
		base = u
	}
	if rpID == "" {
		rpID = "localhost"
		if base != nil && net.ParseIP(base.Hostname()) == nil {
			rpID = strings.ToLower(base.Hostname())
		}
	}
	if len(origins) > 0 {
		return rpID, slices.Clone(origins), nil
	}
	if base == nil {
		return rpID, []string{"http://localhost"}, nil
	}
	if net.ParseIP(base.Hostname()) != nil && rpID == "localhost" {
		// http://127.0.0.1:8080 cannot use security keys; the same server
		// at http://localhost:8080 can.
		host := "localhost"
		if p := base.Port(); p != "" {
			host = net.JoinHostPort(host, p)
		}
		return rpID, []string{base.Scheme + "://" + host}, nil
	}
	return rpID, []string{base.Scheme + "://" + base.Host}, nil
}

// cookieKeys are the configured session cookie keys, or the database's.
func (a *App) cookieKeys(ctx context.Context) (hashKey, blockKey []byte, err error) {
	hk, bk := a.cfg.CookieHashKey, a.cfg.CookieBlockKey
	switch {
	case len(hk) > 0 && len(bk) > 0:
		return hk, bk, nil
	case len(hk) > 0 || len(bk) > 0:
		return nil, nil, errors.New("console cookie keys: give both the authentication and the encryption key, or neither")
	}
	return a.Auth.CookieKeys(ctx)
}

// buildAdapters gives every tool its adapter: the built-in demo ledger, or
// an HTTP adapter with its HMAC secret read from the named variable.
func buildAdapters(reg *registry.Registry, st *store.Store, getenv func(string) string) (map[string]models.Adapter, error) {
	out := map[string]models.Adapter{}
	ledger := demoledger.New(st)
	for _, t := range reg.Tools() {
		switch t.Adapter.Kind {
		case registry.AdapterDemoLedger:
			out[t.Name] = ledger
		case registry.AdapterHTTP:
			ad, err := httpAdapter(t, getenv)
			if err != nil {
				return nil, err
			}
			out[t.Name] = ad
		default:
			return nil, fmt.Errorf("tool %s: unknown adapter kind %q", t.Name, t.Adapter.Kind)
		}
	}
	return out, nil
}

// httpAdapter is tool t's HTTP adapter, its secret read with getenv.
func httpAdapter(t *registry.Tool, getenv func(string) string) (models.Adapter, error) {
	sec := getenv(t.Adapter.SecretEnv)
	if sec == "" {
		return nil, fmt.Errorf("tool %s: environment variable %s (the adapter's HMAC secret) is empty", t.Name, t.Adapter.SecretEnv)
	}
	ad, err := httpadapter.New(httpadapter.Config{BaseURL: t.Adapter.BaseURL, Secret: []byte(sec),
		Timeout: t.Adapter.Timeout, UnsignedResponses: t.Adapter.UnsignedResponses})
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	return ad, nil
}

// CheckAdapters builds the HTTP adapters of reg's tools as Open does,
// their secrets read with getenv, and connects to nothing: every tool
// whose adapter Open would refuse is named, in the registry's order.
func CheckAdapters(reg *registry.Registry, getenv func(string) string) error {
	var errs []error
	for _, t := range reg.Tools() {
		if t.Adapter.Kind == registry.AdapterHTTP {
			if _, err := httpAdapter(t, getenv); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// AdapterSecrets names, for each tool with an HTTP adapter, the
// environment variable Open reads its HMAC secret from: "VAR (tool)".
func AdapterSecrets(reg *registry.Registry) []string {
	var out []string
	for _, t := range reg.Tools() {
		if t.Adapter.Kind == registry.AdapterHTTP {
			out = append(out, t.Adapter.SecretEnv+" ("+t.Name+")")
		}
	}
	return out
}

// pruneInterval is how often ended console sessions, old sign-in attempt
// counters and the outbox past its retention are deleted.
const pruneInterval = time.Hour

// prune deletes what is no longer kept — ended console sessions, and
// events and deliveries past the outbox's retention — at start and then
// hourly, until ctx ends. Several instances may do it at once: deleting
// is idempotent.
func (a *App) prune(ctx context.Context) {
	t := time.NewTicker(pruneInterval)
	defer t.Stop()
	for {
		a.PruneOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PruneOnce is one pass of the pruning the server runs every
// pruneInterval: ended console sessions and old sign-in attempt counters,
// and the outbox past its retention (counted in
// countersign_outbox_pruned_total). Failures are logged.
func (a *App) PruneOnce(ctx context.Context) {
	log := a.cfg.Logger
	if _, err := a.Auth.Prune(ctx); err != nil && ctx.Err() == nil {
		log.LogAttrs(ctx, slog.LevelWarn, "pruning console sessions failed", slog.String("err", err.Error()))
	}
	got, err := a.Events.Prune(ctx)
	if err != nil && ctx.Err() == nil {
		log.LogAttrs(ctx, slog.LevelWarn, "pruning the outbox failed", slog.String("err", err.Error()))
	}
	a.Metrics.OutboxPruned(got)
	if got.Events+got.Deliveries > 0 {
		log.LogAttrs(ctx, slog.LevelInfo, "pruned the outbox", slog.Int64("events", got.Events),
			slog.Int64("deliveries", got.Deliveries), slog.Int64("attempts", got.Attempts))
	}
}

// webTracer is the tracer for server spans, or nil without a provider.
func webTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tracing.Tracer(tp)
}

// MetricsHandler serves the Prometheus metrics without authentication, for
// a listen address of their own (countersign serve --metrics-addr).
func (a *App) MetricsHandler() http.Handler { return a.Metrics.Handler() }

// Close releases the database.
func (a *App) Close() error { return a.Store.Close() }

// DemoCredentials are the demo sign-ins, fresh at every demo start.
type DemoCredentials struct {
	Tenant           string
	Reviewer         string
	ReviewerPassword string
	Admin            string
	AdminPassword    string
	Agent            string
	AgentKey         string
}

// SeedDemo creates (or refreshes) the demo tenant, its business data and
// fresh credentials for the reviewer alice, the admin and the demo agent.
func (a *App) SeedDemo(ctx context.Context) (DemoCredentials, error) {
	c := DemoCredentials{Tenant: store.DemoTenant, Reviewer: "alice", Admin: "admin", Agent: "demo-agent"}
	var err error
	if c.ReviewerPassword, err = secret.RandomToken(12); err != nil {
		return c, err
	}
	if c.AdminPassword, err = secret.RandomToken(12); err != nil {
		return c, err
	}
	rh, err := a.Passwords.Hash(c.ReviewerPassword)
	if err != nil {
		return c, err
	}
	ah, err := a.Passwords.Hash(c.AdminPassword)
	if err != nil {
		return c, err
	}
	key, kh, err := secret.NewAPIKey()
	if err != nil {
		return c, err
	}
	c.AgentKey = key
	_, err = a.SeedDemoWith(ctx, store.DemoSeed{ReviewerName: c.Reviewer, ReviewerPasswordHash: rh,
		AdminName: c.Admin, AdminPasswordHash: ah, AgentName: c.Agent, AgentKeyHash: kh})
	return c, err
}

// SeedDemoWith seeds the demo tenant with the given people and agent, and
// the demo ledger's business data in it, and returns what was seeded.
func (a *App) SeedDemoWith(ctx context.Context, seed store.DemoSeed) (store.DemoResult, error) {
	d, err := a.Store.SeedDemo(ctx, seed)
	if err != nil {
		return d, err
	}
	return d, demoledger.New(a.Store).Seed(ctx, d.Tenant.ID)
}

// Serve serves HTTP on ln and runs the sweeper and reconciler every
// background interval until ctx ends, then shuts the server down gracefully.
func (a *App) Serve(ctx context.Context, ln net.Listener, background time.Duration) error {
	bg, cancel := context.WithCancel(ctx)
	var workers sync.WaitGroup
	workers.Go(func() { a.Protocol.RunBackground(bg, background) })
	// Other instances' changes wake this one's long-polls (PostgreSQL).
	workers.Go(func() { a.Protocol.Listen(bg) })
	workers.Go(func() { a.prune(bg) })
	dispatch := a.cfg.DispatchInterval
	if dispatch <= 0 {
		dispatch = time.Second
	}
	workers.Go(func() { a.Events.Run(bg, dispatch) })
	// Stop the background work before returning, so the caller may close
	// the store right after.
	defer workers.Wait()
	defer cancel()

	hs := a.Server.Server
	hs.Handler = a.Server
	// Shutdown in two steps. First the server keeps listening but answers
	// every new request 503 unavailable (nothing of it was looked at, so a
	// retry is safe), while the requests in flight finish: they get
	// ShutdownGrace, then their contexts end and parked long-polls are
	// stopped, which makes long-polls (held up to a minute) answer with the
	// current state at once. Executions run detached from the request, so a
	// write that reached the business system is not cut. Then the listener closes and idle connections with it.
	reqs, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	hs.BaseContext = func(net.Listener) context.Context { return reqs }

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.Drain.Start()
	a.cfg.Logger.Info("shutting down: refusing new requests while those in flight finish",
		"in_flight", a.Drain.InFlight())
	grace := time.AfterFunc(ShutdownGrace, func() {
		endRequests()
		a.Drain.End() // parked long-polls have no context to end
	})
	defer grace.Stop()
	wctx, wcancel := context.WithTimeout(context.Background(), ShutdownGrace+10*time.Second)
	defer wcancel()
	_ = a.Drain.Wait(wctx) // on timeout, Shutdown below gives up the same way
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ShutdownGrace is how long requests in flight may finish on their own once
// shutdown starts.
const ShutdownGrace = 2 * time.Second
