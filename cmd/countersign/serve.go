package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/app"
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

// shutdownGrace is how long requests in flight may finish on their own once
// shutdown starts; then their contexts are cancelled, which makes long-polls
// (held up to 60 s) answer with the current state at once instead of holding
// the shutdown until its timeout.
const shutdownGrace = 2 * time.Second

// serveConfig is the configuration of countersign serve.
type serveConfig struct {
	Addr     string
	DB       string
	Tools    string
	Demo     bool
	BaseURL  string
	Issuer   string
	Audience string
	LogLevel slog.Level
}

const serveAbout = `
Serves the agent API (/api/v1/proposals, /api/v1/executions), the token
public keys (/.well-known/jwks.json) and /healthz. Database migrations are
applied at start. Logs go to stderr; the addresses go to stdout.

With --demo it creates (or refreshes) the tenant "demo" with demo orders,
customers and log entries, the reviewer alice, the administrator admin and
an agent, and prints fresh passwords and a fresh agent key: every start
invalidates the previous ones. "countersign" without a command is
"countersign serve --demo".

The browser console is not built yet: reviewers decide with
"countersign review approve|decline", which must be given the same --db,
--tools, --issuer and --audience as the server.

Several servers may share one PostgreSQL database (--db postgres://...); every
exactly-once guarantee holds across them.`

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
	pos, err := cmd.parse(args, c.getenv)
	if err != nil {
		return err
	}
	if err := cmd.wantArgs(pos); err != nil {
		return err
	}
	if err := cmd.required(map[string]string{"addr": cfg.Addr, "db": cfg.DB, "issuer": cfg.Issuer, "audience": cfg.Audience}); err != nil {
		return err
	}
	if cfg.BaseURL != "" {
		if cfg.BaseURL, err = checkBaseURL(cfg.BaseURL); err != nil {
			return usagef(cmd.synopsis, "--base-url: %v", err)
		}
	}
	return c.runServer(ctx, cfg)
}

func (c *cli) runServer(ctx context.Context, cfg serveConfig) error {
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
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
	a, err := app.Open(ctx, app.Config{
		DB:        cfg.DB,
		ToolsFile: cfg.Tools,
		Addr:      ln.Addr().String(),
		BaseURL:   base,
		Issuer:    cfg.Issuer,
		Audience:  cfg.Audience,
		Getenv:    c.getenv,
		Logger:    logger,
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
	c.printBanner(c.stdout, cfg, base, a, creds)
	logger.Info("countersign started", "version", buildVersion(), "addr", ln.Addr().String(),
		"base_url", base, "db", redactDB(cfg.DB), "tools", len(a.Registry.Tools()), "demo", cfg.Demo)

	defer endRequestsAfterGrace(a.Server.Server)()
	err = a.Serve(ctx, ln, backgroundInterval)
	logger.Info("countersign stopped")
	return err
}

// endRequestsAfterGrace gives the requests in flight when shutdown starts
// shutdownGrace to finish, then cancels their contexts (see shutdownGrace).
// A write that already reached the business system is not cut: executions
// run detached from the request. The returned function releases the
// context once the server is done.
func endRequestsAfterGrace(hs *http.Server) (release func()) {
	base, cancel := context.WithCancel(context.Background())
	hs.BaseContext = func(net.Listener) context.Context { return base }
	hs.RegisterOnShutdown(func() { time.AfterFunc(shutdownGrace, cancel) })
	return cancel
}

// printBanner tells the person who started the server where it is and, for
// the demo, how to use it.
func (c *cli) printBanner(w io.Writer, cfg serveConfig, base string, a *app.App, creds *app.DemoCredentials) {
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
	fmt.Fprintf(w, "  API:      %s/api/v1/proposals\n", base)
	fmt.Fprintf(w, "  JWKS:     %s/.well-known/jwks.json\n", base)
	fmt.Fprintf(w, "  Health:   %s/healthz\n", base)
	fmt.Fprintf(w, "  Tools:    %s\n", strings.Join(names, ", "))
	if creds == nil {
		fmt.Fprintln(w, "No demo data (--demo is off). Create a tenant, reviewers and agents with")
		fmt.Fprintln(w, "  countersign tenant create, countersign user create and countersign agent create.")
		return
	}
	fmt.Fprintf(w, "demo tenant %q:\n", creds.Tenant)
	fmt.Fprintf(w, "  reviewer  %s / %s\n", creds.Reviewer, creds.ReviewerPassword)
	fmt.Fprintf(w, "  admin     %s / %s\n", creds.Admin, creds.AdminPassword)
	fmt.Fprintf(w, "  agent key %s\n", creds.AgentKey)
	fmt.Fprintln(w, "The browser console is not built yet. Reviewers decide from a terminal,")
	fmt.Fprintln(w, "with the password on stdin:")
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
