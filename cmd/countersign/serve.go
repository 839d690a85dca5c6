package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/kek"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/internal/tracing"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/web"
)

// Defaults shared by several commands.
const (
	defaultAddr     = "127.0.0.1:8080"
	defaultDB       = "sqlite://./countersign.db"
	defaultIssuer   = "countersign"
	defaultAudience = "countersign:execute"
)

// backgroundInterval is how often a server expires proposals and tokens
// whose time ran out and asks business systems about uncertain executions.
const backgroundInterval = 2 * time.Second

// serveConfig is the configuration of countersign serve.
type serveConfig struct {
	registry *registry.Registry // the --tools registry, once checked
	Addr     string
	DB       string
	Tools    string
	Demo     bool
	BaseURL  string
	Issuer   string
	Audience string
	LogLevel slog.Level

	// Executions.
	ExecutionLease    time.Duration
	LeaseMargin       time.Duration
	HeartbeatInterval time.Duration
	InstanceTimeout   time.Duration

	// Console sessions.
	Secure          bool
	CookieHashKey   string // base64
	CookieBlockKey  string // base64
	IdleTimeout     time.Duration
	AbsoluteTimeout time.Duration
	DefaultTenant   string
	PasswordHash    secret.PasswordParams
	HashConcurrency int
	// TrustedProxies are reverse proxies (CIDR prefixes or addresses)
	// whose X-Forwarded-For names the client.
	TrustedProxies listFlag
	trusted        []netip.Prefix

	// Security keys (WebAuthn).
	RPID    string
	RPName  string
	Origins listFlag
	// FIDO Metadata Service BLOB and its root (app.Config).
	FIDOMetadata, FIDOMetadataRoot string

	// Default per-agent limits.
	Limits models.Limits
	// Reviewer notifications.
	SMTPAddr, SMTPFrom, SMTPUsername, SMTPPassword string
	SMTPStartTLS                                   bool
	SlackWebhookURL                                string
	// WebhookAllow are ranges beyond public addresses webhooks may go to.
	WebhookAllow listFlag
	webhookAllow []netip.Prefix
	// OutboxRetention is how long settled events and deliveries are kept.
	OutboxRetention time.Duration
	// Operations.
	MetricsAddr  string
	MetricsToken string
	KEKFile      string
	OTLPEndpoint string
	hashKey      []byte   // decoded --cookie-hash-key
	blockKey     []byte   // decoded --cookie-block-key
	kek          *kek.KEK // the key-encryption key, if any
	tracing      bool     // traces are exported
	metricsURL   string   // where metrics are served, once listening; "" when nowhere
}

const serveAbout = `
Serves the reviewer console (/), the agent API (/api/v1/proposals,
/api/v1/executions, /api/v1/webhooks, /api/v1/events), the token public keys (/.well-known/jwks.json) and
/healthz. Database migrations are
applied at start. Logs go to stderr; the addresses go to stdout.

With --demo it creates (or refreshes) the tenant "demo" with demo orders,
customers and log entries, the reviewer alice, the administrator admin and
an agent, and prints fresh passwords and a fresh agent key: every start
invalidates the previous ones. "countersign" without a command is
"countersign serve --demo".

Reviewers sign in to the console with organization (tenant), username and
password. From a terminal, "countersign review approve|decline" decides too;
it must be given the same --db, --tools, --issuer and --audience as the
server. Tiers that need a security key can only be approved in the console.

Console cookies are signed and encrypted with two keys kept in the database
(created at first start), so sessions survive restarts; give
--cookie-hash-key and --cookie-block-key to manage them yourself.

Several servers may share one PostgreSQL database (--db postgres://...); every
exactly-once guarantee holds across them.

Security keys and passkeys (WebAuthn) are bound to a relying party id, by
default the host of --base-url. Browsers accept no IP address there and
allow plain http only on localhost: with the default address, register keys
and approve high-risk writes at http://localhost:8080 rather than
http://127.0.0.1:8080. Behind a proxy or TLS, give --base-url (and, if the
console is reached under several names, --rp-id and --origin).`

// dbFlag and toolsFlag are the flags every command that opens the database
// or the registry shares.
func dbFlag(fs *flag.FlagSet, dst *string) {
	fs.StringVar(dst, "db", defaultDB, "database `URL`: sqlite://PATH (created if missing) or\npostgres://USER:PASSWORD@HOST:PORT/DBNAME")
}

func toolsFlag(fs *flag.FlagSet, dst *string) {
	fs.StringVar(dst, "tools", "", "tool registry `FILE` (YAML); the built-in demo registry when empty")
}

func tokenFlags(fs *flag.FlagSet, issuer, audience *string) {
	fs.StringVar(issuer, "issuer", defaultIssuer, "the iss claim of confirmation tokens")
	fs.StringVar(audience, "audience", defaultAudience, "the aud claim of confirmation tokens (the execute service)")
}

// defaultOutboxRetention keeps a month of settled events and deliveries.
const defaultOutboxRetention = 30 * 24 * time.Hour

func (c *cli) serve(ctx context.Context, args []string, demoByDefault bool) error {
	var cfg serveConfig
	cmd := newCommand("serve", "countersign serve [flags]", serveAbout, c.stdout)
	fs := cmd.fs
	fs.StringVar(&cfg.Addr, "addr", defaultAddr, "listen `ADDRESS` (host:port; port 0 picks a free port)")
	dbFlag(fs, &cfg.DB)
	toolsFlag(fs, &cfg.Tools)
	fs.BoolVar(&cfg.Demo, "demo", demoByDefault, "seed the demo tenant and data and print fresh demo credentials")
	fs.StringVar(&cfg.BaseURL, "base-url", "", "public `URL` of this server, used in Location headers;\nhttp://ADDRESS once listening when empty (set it when clients reach the server\nthrough another name, a proxy or TLS)")
	tokenFlags(fs, &cfg.Issuer, &cfg.Audience)
	fs.TextVar(&cfg.LogLevel, "log-level", slog.LevelInfo, "log `LEVEL`: debug, info, warn or error")
	fs.DurationVar(&cfg.ExecutionLease, "execution-lease", writes.DefaultExecutionLease,
		"longest lease one execution attempt may hold: each tool's lease is its adapter\ntimeout plus --lease-margin, and a registry whose tool needs more is refused at start")
	fs.DurationVar(&cfg.LeaseMargin, "lease-margin", writes.DefaultLeaseMargin,
		"time on top of an adapter's timeout to record an execution's outcome")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", writes.DefaultHeartbeatInterval,
		"how often this server tells the others, through the database, that it is alive")
	fs.DurationVar(&cfg.InstanceTimeout, "instance-timeout", writes.DefaultInstanceTimeout,
		"a server whose heartbeat is older is taken for dead and its executions are taken over")
	fs.BoolVar(&cfg.Secure, "secure", false, "serve behind TLS: Secure cookies and HSTS (implied by an https --base-url)")
	fs.StringVar(&cfg.CookieHashKey, "cookie-hash-key", "", "console cookie authentication key, `BASE64` of at least 32 bytes;\nkept in the database when empty (give both keys or neither)")
	fs.StringVar(&cfg.CookieBlockKey, "cookie-block-key", "", "console cookie encryption key, `BASE64` of 16, 24 or 32 bytes")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 30*time.Minute, "end a console session after this long without a request")
	fs.DurationVar(&cfg.AbsoluteTimeout, "absolute-timeout", 12*time.Hour, "end a console session this long after sign-in, whatever the activity")
	fs.StringVar(&cfg.DefaultTenant, "default-tenant", "", "organization pre-filled on the sign-in form (\"demo\" with --demo)")
	passwordHashFlag(fs, &cfg.PasswordHash)
	fs.IntVar(&cfg.HashConcurrency, "password-hash-concurrency", 0, "password hashes that may run at once, each holding its memory cost\n(`N`; the number of CPUs when 0); further sign-ins wait their turn")
	fs.Var(&cfg.TrustedProxies, "trusted-proxies", "`CIDR` prefixes or addresses of reverse proxies whose X-Forwarded-For header names\nthe client (for the sign-in limits); repeat or separate with commas. Without it\nthe connection's peer is the client and X-Forwarded-For is ignored")
	fs.StringVar(&cfg.RPID, "rp-id", "", "WebAuthn relying party `ID` security keys are bound to: the console's host name\nor a parent domain; the host of --base-url when empty (localhost for an IP address)")
	fs.StringVar(&cfg.RPName, "rp-name", "countersign", "relying party `NAME` browsers show when asking for a security key")
	fs.StringVar(&cfg.FIDOMetadata, "fido-mds", "", "FIDO Metadata Service BLOB `FILE` (MDS3): register only security keys whose attestation\nproves a model it certifies; keep the file current (it is published monthly)")
	fs.StringVar(&cfg.FIDOMetadataRoot, "fido-mds-root", "", "PEM root certificate `FILE` the --fido-mds BLOB is signed under; the FIDO\nAlliance's root when empty")
	limitsFlags(fs, &cfg.Limits)
	fs.Var(&cfg.Origins, "origin", "`ORIGIN` (scheme://host[:port]) security-key responses may come from; repeat\nthe flag or separate with commas; the origin of --base-url when empty")
	fs.StringVar(&cfg.SMTPAddr, "smtp-addr", "", "mail server `HOST:PORT`: e-mail reviewers when a proposal awaits them\n(see countersign user notify); off when empty")
	fs.StringVar(&cfg.SMTPFrom, "smtp-from", "", "sender `ADDRESS` of notification e-mails")
	fs.StringVar(&cfg.SMTPUsername, "smtp-username", "", "SMTP AUTH PLAIN `USER` (only over TLS, or to localhost)")
	fs.StringVar(&cfg.SMTPPassword, "smtp-password", "", "SMTP AUTH `PASSWORD`; prefer COUNTERSIGN_SMTP_PASSWORD")
	fs.BoolVar(&cfg.SMTPStartTLS, "smtp-starttls", false, "refuse a mail server that does not offer STARTTLS\n(STARTTLS is used whenever offered)")
	fs.StringVar(&cfg.SlackWebhookURL, "slack-webhook-url", "", "Slack-compatible incoming webhook `URL` reviewer notifications are posted to")
	fs.Var(&cfg.WebhookAllow, "webhook-allow", "`CIDR` prefixes or addresses beyond public ones that webhooks may be sent to\n(loopback, private, link-local and other special-purpose addresses are refused\notherwise); repeat or separate with commas, e.g. 10.20.0.0/16 for an internal\nreceiver or the address of an egress proxy")
	fs.DurationVar(&cfg.OutboxRetention, "outbox-retention", defaultOutboxRetention, "how long events, webhook and notification deliveries and their attempt log are\nkept once no delivery is pending: the event stream's resume window and the\ndelivery log's depth (at least 1h; 0 keeps them for ever)")
	opsFlags(fs, &cfg)
	configFileFlag(fs)
	if err := cmd.parseFlags(args, c.getenv, "addr", "db", "issuer", "audience"); err != nil {
		return err
	}
	if err := c.checkServe(ctx, cmd, &cfg); err != nil {
		return err
	}
	if c.checkOnly {
		c.checked = &cfg
		return nil
	}
	return c.runServer(ctx, cfg)
}

// checkServe applies every rule serve applies to its settings before it
// starts, short of opening the database or listening: flags consistent
// with each other, the database URL's scheme, the listen addresses, the
// tool registry, the FIDO metadata, the key-encryption key and the trace
// exporter. config check is this alone, so the two cannot disagree. It
// completes cfg with what it read (cleaned URLs, keys, prefixes), which
// the server then uses; each problem names the flag it is about, and the
// configuration file's line when the value came from there.
func (c *cli) checkServe(ctx context.Context, cmd *command, cfg *serveConfig) error {
	p := &problems{cmd: cmd}
	if err := checkListenAddr(cfg.Addr); err != nil {
		p.usagef("addr", "--addr: %v", err)
	}
	if err := checkDBURL(cfg.DB); err != nil {
		p.usagef("db", "--db: %v", err)
	}
	if cfg.SMTPAddr != "" && cfg.SMTPFrom == "" {
		p.usagef("smtp-addr", "--smtp-addr needs --smtp-from")
	}
	if cfg.SlackWebhookURL != "" {
		if _, err := events.CheckURL(cfg.SlackWebhookURL); err != nil {
			p.usagef("slack-webhook-url", "--slack-webhook-url: %v", models.ErrorMessage(err))
		}
	}
	if cfg.BaseURL != "" {
		if clean, err := checkBaseURL(cfg.BaseURL); err != nil {
			p.usagef("base-url", "--base-url: %v", err)
		} else {
			cfg.BaseURL = clean
		}
	}
	if cfg.ExecutionLease <= 0 || cfg.LeaseMargin <= 0 || cfg.LeaseMargin >= cfg.ExecutionLease {
		p.usagef("execution-lease", "--execution-lease and --lease-margin must be positive, the margin shorter than the lease")
	}
	if cfg.HeartbeatInterval <= 0 || cfg.InstanceTimeout <= cfg.HeartbeatInterval {
		p.usagef("heartbeat-interval", "--heartbeat-interval must be positive and shorter than --instance-timeout")
	}
	if cfg.IdleTimeout <= 0 || cfg.AbsoluteTimeout < cfg.IdleTimeout {
		p.usagef("idle-timeout", "--idle-timeout must be positive and no longer than --absolute-timeout")
	}
	if cfg.OutboxRetention < 0 || (cfg.OutboxRetention > 0 && cfg.OutboxRetention < time.Hour) {
		p.usagef("outbox-retention", "--outbox-retention must be at least 1h (or 0, to keep everything)")
	}
	badOrigin := false
	for _, o := range cfg.Origins.values {
		if clean, err := checkBaseURL(o); err != nil || strings.Count(clean, "/") != 2 {
			p.usagef("origin", "--origin %q: give scheme://host[:port], without a path", o)
			badOrigin = true
			break
		}
	}
	// The relying party as the server will complete it, so that keys do
	// not first fail in a reviewer's browser.
	if rpID, origins, err := app.WebAuthnDefaults(cfg.BaseURL, cfg.RPID, cfg.Origins.values); err == nil && !badOrigin {
		if err := stepup.CheckRelyingParty(rpID, origins); err != nil {
			name := "rp-id"
			switch {
			case cfg.RPID != "":
			case len(cfg.Origins.values) > 0:
				name = "origin"
			default:
				name = "base-url"
			}
			p.usagef(name, "--rp-id and --origin (from --base-url when not given): %v", err)
		}
	}
	if err := checkLimits(cfg.Limits); err != nil {
		name := "agent-concurrent-waits"
		switch {
		case cfg.Limits.ProposalsPerMinute < 0:
			name = "agent-proposals-per-minute"
		case cfg.Limits.OpenProposals < 0:
			name = "agent-open-proposals"
		}
		p.usagef(name, "%v", err)
	}
	var err error
	if cfg.trusted, err = web.ParsePrefixes(cfg.TrustedProxies.values); err != nil {
		p.usagef("trusted-proxies", "--trusted-proxies: %v", err)
	}
	if cfg.webhookAllow, err = web.ParsePrefixes(cfg.WebhookAllow.values); err != nil {
		p.usagef("webhook-allow", "--webhook-allow: %v", err)
	}
	if cfg.MetricsAddr != "" {
		if err := checkListenAddr(cfg.MetricsAddr); err != nil {
			p.usagef("metrics-addr", "--metrics-addr: %v", err)
		}
	}
	if cfg.Tools != "" {
		// app.Open reads it again; the check costs one parse of a small file.
		reg, err := registry.LoadFile(cfg.Tools)
		switch {
		case err != nil:
			p.add("tools", fmt.Errorf("--tools: %w", err))
		case c.fileOnly:
			cfg.registry = reg
		default:
			cfg.registry = reg
			if err := app.CheckAdapters(reg, c.getenv); err != nil {
				p.add("tools", fmt.Errorf("--tools: %w", err))
			}
		}
	}
	if cfg.FIDOMetadata != "" {
		if _, err := stepup.LoadMetadata(cfg.FIDOMetadata, cfg.FIDOMetadataRoot); err != nil {
			p.add("fido-mds", fmt.Errorf("--fido-mds: %w", err))
		}
	}
	if cfg.kek, err = c.loadKEK(cfg.KEKFile); err != nil {
		p.add("kek-file", err)
	}
	if cfg.OTLPEndpoint != "" {
		// Builds the exporter, which checks the URL and connects to nothing.
		_, stop, err := tracing.Setup(ctx, tracing.Config{Endpoint: cfg.OTLPEndpoint})
		if err != nil {
			p.add("otlp-endpoint", err)
		} else {
			_ = stop(ctx)
		}
	}
	if cfg.hashKey, cfg.blockKey, err = cookieKeys(*cfg); err != nil {
		p.add("cookie-hash-key", err)
	}
	if cfg.DefaultTenant == "" && cfg.Demo {
		cfg.DefaultTenant = "demo"
	}
	return p.err()
}

// checkListenAddr accepts what net.Listen("tcp", addr) takes, short of
// resolving the host: HOST:PORT, the host possibly empty, the port a
// number (0 for any free port) or a service name.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (e.g. 127.0.0.1:8080)", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: %q is not a port", addr, port)
	}
	return nil
}

// checkDBURL accepts the database URLs store.Open does: sqlite://PATH (or
// sqlite:PATH) and postgres:// or postgresql:// URLs. It only parses: the
// database is neither opened nor created.
func checkDBURL(db string) error {
	switch {
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		if _, err := url.Parse(db); err != nil {
			// Not err itself: it would print the password.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return fmt.Errorf("not a valid URL: %v", err)
		}
		return nil
	case strings.HasPrefix(db, "sqlite:"):
		if store.SQLitePath(db) == "" {
			return errors.New("an sqlite URL needs a path, e.g. sqlite://./countersign.db")
		}
		return nil
	}
	return fmt.Errorf("%q: a database URL starts with sqlite:// or postgres://", redactDB(db))
}

// cookieKeys decodes the optional cookie keys.
func cookieKeys(cfg serveConfig) (hash, block []byte, err error) {
	if (cfg.CookieHashKey == "") != (cfg.CookieBlockKey == "") {
		return nil, nil, fmt.Errorf("give both --cookie-hash-key and --cookie-block-key, or neither")
	}
	if cfg.CookieHashKey == "" {
		return nil, nil, nil
	}
	if hash, err = base64.StdEncoding.DecodeString(cfg.CookieHashKey); err != nil {
		return nil, nil, fmt.Errorf("--cookie-hash-key is not base64: %w", err)
	}
	if block, err = base64.StdEncoding.DecodeString(cfg.CookieBlockKey); err != nil {
		return nil, nil, fmt.Errorf("--cookie-block-key is not base64: %w", err)
	}
	return hash, block, nil
}

func (c *cli) runServer(ctx context.Context, cfg serveConfig) error {
	logger := slog.New(tracing.LogHandler(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: cfg.LogLevel})))
	// Listen first: a taken port fails before anything else happens, and
	// with port 0 the real address is known before it is printed.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", cfg.Addr, err)
	}
	defer ln.Close()
	base := cfg.BaseURL
	if base == "" {
		base = listenURL(ln.Addr())
	}
	tp, stopTracing, err := tracing.Setup(ctx, tracing.Config{Endpoint: cfg.OTLPEndpoint, Getenv: c.getenv, ServiceVersion: buildVersion()})
	if err != nil {
		return err
	}
	defer flushTraces(ctx, stopTracing, logger)
	_, cfg.tracing = tp.(*sdktrace.TracerProvider)
	var metricsLn net.Listener
	if cfg.MetricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("cannot listen on --metrics-addr %s: %w", cfg.MetricsAddr, err)
		}
		defer metricsLn.Close()
	}
	a, err := app.Open(ctx, app.Config{
		DB:              cfg.DB,
		ToolsFile:       cfg.Tools,
		Addr:            ln.Addr().String(),
		BaseURL:         base,
		Issuer:          cfg.Issuer,
		Audience:        cfg.Audience,
		Getenv:          c.getenv,
		Logger:          logger,
		Secure:          cfg.Secure,
		CookieHashKey:   cfg.hashKey,
		CookieBlockKey:  cfg.blockKey,
		IdleTimeout:     cfg.IdleTimeout,
		AbsoluteTimeout: cfg.AbsoluteTimeout,
		DefaultTenant:   cfg.DefaultTenant,
		PasswordHash:    cfg.PasswordHash,
		TrustedProxies:  cfg.trusted,
		RPID:            cfg.RPID,
		RPName:          cfg.RPName,
		Origins:         cfg.Origins.values,

		FIDOMetadata:     cfg.FIDOMetadata,
		FIDOMetadataRoot: cfg.FIDOMetadataRoot,

		PasswordHashConcurrency: cfg.HashConcurrency,
		Limits:                  cfg.Limits,
		ExecutionLease:          cfg.ExecutionLease,
		LeaseMargin:             cfg.LeaseMargin,
		HeartbeatInterval:       cfg.HeartbeatInterval,
		InstanceTimeout:         cfg.InstanceTimeout,
		SMTP: events.SMTPConfig{Addr: cfg.SMTPAddr, From: cfg.SMTPFrom, Username: cfg.SMTPUsername,
			Password: cfg.SMTPPassword, StartTLS: cfg.SMTPStartTLS},
		SlackWebhookURL: cfg.SlackWebhookURL,
		WebhookAllow:    cfg.webhookAllow,
		OutboxRetention: cfg.OutboxRetention,
		MetricsToken:    mainServerMetricsToken(cfg),
		KEK:             cfg.kek,
		TracerProvider:  tp,
	})
	if err != nil {
		return err
	}
	defer a.Close()

	var creds *app.DemoCredentials
	if cfg.Demo {
		d, err := a.SeedDemo(ctx)
		if err != nil {
			return err
		}
		creds = &d
	}
	if metricsLn != nil {
		stopMetrics := serveMetrics(ctx, metricsLn, a, cfg.MetricsToken, logger)
		defer stopMetrics()
	}
	cfg.metricsURL = metricsURL(cfg, base, metricsLn)
	c.printBanner(ctx, c.stdout, cfg, base, a, creds)
	logger.Info("countersign started", "version", buildVersion(), "addr", ln.Addr().String(),
		"base_url", base, "db", redactDB(cfg.DB), "tools", len(a.Registry.Tools()), "demo", cfg.Demo)

	err = a.Serve(ctx, ln, backgroundInterval)
	logger.Info("countersign stopped")
	return err
}

// printBanner tells the person who started the server where it is and, for
// the demo, how to use it.
func (c *cli) printBanner(ctx context.Context, w io.Writer, cfg serveConfig, base string, a *app.App, creds *app.DemoCredentials) {
	tools := a.Registry.Tools()
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	noun := "tools"
	if len(tools) == 1 {
		noun = "tool"
	}
	fmt.Fprintf(w, "countersign serving on %s  (database %s, %d %s)\n", base, redactDB(cfg.DB), len(tools), noun)
	fmt.Fprintf(w, "  Console:  %s/\n", base)
	fmt.Fprintf(w, "  API:      %s/api/v1/proposals\n", base)
	fmt.Fprintf(w, "  MCP:      %s/mcp\n", base)
	fmt.Fprintf(w, "  JWKS:     %s/.well-known/jwks.json\n", base)
	fmt.Fprintf(w, "  Health:   %s/healthz\n", base)
	if cfg.metricsURL != "" {
		fmt.Fprintf(w, "  Metrics:  %s\n", cfg.metricsURL)
	}
	if cfg.tracing {
		fmt.Fprintf(w, "  Traces:   OTLP/HTTP to %s\n", orDefault(cfg.OTLPEndpoint, "the OTEL_EXPORTER_OTLP_* endpoint"))
	}
	if warn := keysWarning(a); warn != "" {
		fmt.Fprintf(w, "  WARNING:  %s\n", warn)
	}
	fmt.Fprintf(w, "  Tools:    %s\n", strings.Join(names, ", "))
	fmt.Fprintf(w, "  Keys:     security keys work at %s (relying party %s)\n", strings.Join(a.StepUp.Origins(), ", "), a.StepUp.RPID())
	if md := a.StepUp.Metadata(); md != nil {
		fmt.Fprintf(w, "            only models certified in the FIDO metadata (%d models, BLOB %d, next update %s)\n",
			md.Entries, md.Number, md.NextUpdate.Format(time.DateOnly))
	}
	if creds == nil {
		names, n, err := a.Store.TenantNames(ctx, 3)
		switch {
		case err != nil:
			// The banner does not guess what it could not read.
			fmt.Fprintln(w, "No demo data (--demo is off). Create tenants, reviewers and agents with")
			fmt.Fprintln(w, "  countersign tenant create, countersign user create and countersign agent create.")
		case n == 0:
			fmt.Fprintln(w, "No organization yet (--demo is off). Create a tenant, reviewers and agents with")
			fmt.Fprintln(w, "  countersign tenant create, countersign user create and countersign agent create.")
		default:
			list := strings.Join(names, ", ")
			if n > len(names) {
				list += fmt.Sprintf(" and %d more", n-len(names))
			}
			fmt.Fprintf(w, "%d %s (%s): sign in at %s/login with their accounts.\n", n, plural(n, "organization", "organizations"), list, base)
			fmt.Fprintln(w, "  No demo credentials were printed (--demo is off); --demo prints fresh ones.")
		}
		return
	}
	fmt.Fprintf(w, "demo sign-in at %s/login (organization %q):\n", base, creds.Tenant)
	fmt.Fprintf(w, "  reviewer  %s / %s\n", creds.Reviewer, creds.ReviewerPassword)
	fmt.Fprintf(w, "  admin     %s / %s\n", creds.Admin, creds.AdminPassword)
	fmt.Fprintf(w, "  agent key %s\n", creds.AgentKey)
	fmt.Fprintln(w, "Reviewers may also decide from a terminal, with the password on stdin:")
	extra := sameServerFlags(cfg)
	fmt.Fprintf(w, "  countersign review list --tenant %s --user %s%s\n", creds.Tenant, creds.Reviewer, extra)
	fmt.Fprintf(w, "  countersign review approve PROPOSAL_ID --tenant %s --user %s%s\n", creds.Tenant, creds.Reviewer, extra)
}

// sameServerFlags are the flags a review command needs to reach the same
// database with the same registry and token claims as this server.
func sameServerFlags(cfg serveConfig) string {
	var b strings.Builder
	if cfg.DB != defaultDB {
		fmt.Fprintf(&b, " --db %s", shellQuote(redactDB(cfg.DB)))
	}
	if cfg.Tools != "" {
		fmt.Fprintf(&b, " --tools %s", shellQuote(cfg.Tools))
	}
	if cfg.Issuer != defaultIssuer {
		fmt.Fprintf(&b, " --issuer %s", shellQuote(cfg.Issuer))
	}
	if cfg.Audience != defaultAudience {
		fmt.Fprintf(&b, " --audience %s", shellQuote(cfg.Audience))
	}
	return b.String()
}

// listenURL is the http URL of a listening address; an unspecified host
// (0.0.0.0, ::) becomes localhost, which at least works on this machine.
func listenURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// checkBaseURL accepts an absolute http or https URL without query or
// fragment and returns it without a trailing slash.
func checkBaseURL(v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an absolute http or https URL", v)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%q must not carry credentials, a query or a fragment", v)
	}
	return strings.TrimRight(v, "/"), nil
}

// redactDB hides the password of a database URL, for output and logs.
func redactDB(db string) string {
	if !strings.HasPrefix(db, "postgres://") && !strings.HasPrefix(db, "postgresql://") {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./-_", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
