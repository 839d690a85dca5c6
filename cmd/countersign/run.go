package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it comes from the module's build information.
var version = ""

// cli is what every sub-command receives: the process's environment and
// streams, read once by main.
type cli struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// checkOnly makes serve stop after checking its configuration
	// (countersign config check).
	checkOnly bool
	// fileOnly (config check without --env): the environment is not read,
	// so the secrets serve reads from it are not checked.
	fileOnly bool
	// checked is the configuration serve checked, with checkOnly.
	checked *serveConfig
}

const topUsage = `countersign puts a human confirmation between AI agents and the writes they
want to make: an agent proposes a write, a reviewer confirms exactly that
write, and the server issues a one-time token that executes it once.

Usage:
  countersign                        serve the API on SQLite with demo data
                                     (the same as: countersign serve --demo)
  countersign serve [flags]          serve the agent API
  countersign migrate [flags]        apply database migrations
  countersign tenant create NAME     create a tenant; prints its id
  countersign user create --tenant T --name N --role reviewer|admin
                                     create a console user; password on stdin
  countersign user notify --tenant T --name N --email ADDRESS
                                     e-mail the user when proposals await review
  countersign user role --tenant T --name N --role reviewer|admin
                                     change a console user's role; a tenant
                                     keeps one active administrator
  countersign user disable --tenant T --name N [--enable]
                                     stop (or allow again) a user's sign-ins;
                                     ends their sessions
  countersign tenant limits --tenant T [--proposals-per-minute N] ...
  countersign agent limits --tenant T --agent A [--open-proposals N] ...
                                     show or set per-agent limits for a
                                     tenant's agents or one agent
  countersign group create --tenant T --name GROUP
  countersign group list --tenant T [--name GROUP]
  countersign group add|remove --tenant T --group GROUP --user USER
                                     manage reviewer groups that risk tiers
                                     require approvers from
  countersign agent create --tenant T --name N [--owner USER] [--read-all]
                                     create an agent; prints its API key, once
  countersign agent read-all --tenant T --name N [--withdraw]
                                     let an agent read the tenant's proposals
  countersign review list --tenant T --user U
  countersign review show PROPOSAL_ID --tenant T --user U
  countersign review approve PROPOSAL_ID --tenant T --user U
  countersign review decline PROPOSAL_ID --tenant T --user U --reason TEXT
                                     decide proposals from a terminal;
                                     the reviewer's password on stdin
  countersign revoke PROPOSAL_ID --tenant T --user ADMIN
                                     withdraw a confirmation before it is used
                                     (or before a failed attempt is retried);
                                     the administrator's password on stdin
  countersign mandate list --tenant T --user U
  countersign mandate revoke MANDATE_ID --tenant T --user ADMIN
                                     list standing mandates with their usage,
                                     or stop one at once; password on stdin
  countersign keys rotate            sign new tokens with a new key; prints its kid
  countersign keys rekey --kek-file NEW [--old-kek-file OLD]
                                     encrypt the stored keys under a new
                                     key-encryption key
  countersign evidence verify PROPOSAL_ID --tenant T
                                     re-verify each approval's security-key
                                     evidence from the stored data alone
  countersign backup --to FILE       consistent snapshot of an SQLite database
                                     (PostgreSQL: prints pg_dump guidance)
  countersign restore --from FILE --db sqlite://PATH [--force]
                                     restore a checked backup
  countersign config check --config FILE
                                     check a serve configuration file
  countersign tools export [--format countersign|openai|anthropic]
                                     print the tool registry for agent
                                     frameworks, as GET /api/v1/tools does
  countersign audit export --tenant T [--since WHEN]
                                     write the audit log, checkpoints and keys
                                     as JSON Lines
  countersign audit key --tenant T --name N
                                     create an audit reader API key; prints it once
  countersign verify [--receipt FILE] --export FILE
                                     prove a receipt offline: signature, digests,
                                     security-key assertions, unbroken audit chain
  countersign version                print the version

Every flag can also be set through an environment variable named after it:
--db is COUNTERSIGN_DB, --base-url is COUNTERSIGN_BASE_URL, and so on. A flag
given on the command line wins over the environment. "countersign serve
--config FILE" reads its flags from a YAML file too (the environment and the
command line win over it); "countersign config check --config FILE" checks one.

Run 'countersign COMMAND -h' for a command's flags.
`

// run is the whole program: it parses args (without the program name),
// runs the sub-command and returns its error; main prints it and picks the
// exit status (see report). ctx ends the server and any wait for input.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	c := &cli{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	err := c.dispatch(ctx, args)
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return c.serve(ctx, nil, true)
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(rest) > 0 {
			// "countersign help tenant create" is "countersign tenant create -h".
			return c.dispatch(ctx, append(rest, "-h"))
		}
		fmt.Fprint(c.stdout, topUsage)
		return nil
	case "serve":
		return c.serve(ctx, rest, false)
	case "migrate":
		return c.migrate(ctx, rest)
	case "tenant":
		return c.group(ctx, "tenant", rest, map[string]func(context.Context, []string) error{"create": c.tenantCreate, "limits": c.tenantLimits})
	case "user":
		return c.group(ctx, "user", rest, map[string]func(context.Context, []string) error{"create": c.userCreate,
			"notify": c.userNotify, "role": c.userRole, "disable": c.userDisable})
	case "agent":
		return c.group(ctx, "agent", rest, map[string]func(context.Context, []string) error{
			"create": c.agentCreate, "limits": c.agentLimits, "read-all": c.agentReadAll})
	case "group":
		return c.group(ctx, "group", rest, map[string]func(context.Context, []string) error{
			"create": c.groupCreate, "add": c.groupAdd, "remove": c.groupRemove, "list": c.groupList})
	case "review":
		return c.group(ctx, "review", rest, map[string]func(context.Context, []string) error{
			"list": c.reviewList, "show": c.reviewShow, "approve": c.reviewApprove, "decline": c.reviewDecline})
	case "revoke":
		return c.revoke(ctx, rest)
	case "mandate":
		return c.group(ctx, "mandate", rest, map[string]func(context.Context, []string) error{
			"list": c.mandateList, "revoke": c.mandateRevoke})
	case "keys":
		return c.group(ctx, "keys", rest, map[string]func(context.Context, []string) error{"rotate": c.keysRotate, "rekey": c.keysRekey})
	case "tools":
		return c.group(ctx, "tools", rest, map[string]func(context.Context, []string) error{"export": c.toolsExport})
	case "evidence":
		return c.group(ctx, "evidence", rest, map[string]func(context.Context, []string) error{"verify": c.evidenceVerify})
	case "config":
		return c.group(ctx, "config", rest, map[string]func(context.Context, []string) error{"check": c.configCheck})
	case "backup":
		return c.backup(ctx, rest)
	case "restore":
		return c.restore(ctx, rest)
	case "audit":
		return c.group(ctx, "audit", rest, map[string]func(context.Context, []string) error{"export": c.auditExport, "key": c.auditKeyCreate})
	case "verify":
		return c.verify(ctx, rest)
	case "version":
		if len(rest) > 0 && rest[0] != "-h" && rest[0] != "--help" {
			return usagef("countersign version", "unexpected argument %q", rest[0])
		}
		fmt.Fprintf(c.stdout, "countersign %s\n", buildVersion())
		return nil
	}
	if strings.HasPrefix(name, "-") {
		// Flags without a command configure the default command, the demo
		// server: "countersign --addr 127.0.0.1:9000".
		return c.serve(ctx, args, true)
	}
	return usagef("", "unknown command %q", name)
}

// group runs the sub-command of a command with several ("tenant create").
func (c *cli) group(ctx context.Context, name string, args []string, subs map[string]func(context.Context, []string) error) error {
	names := slices.Sorted(maps.Keys(subs))
	choices := strings.Join(names, "|")
	synopsis := fmt.Sprintf("countersign %s {%s} ...", name, choices)
	if len(args) == 0 {
		return usagef(synopsis, "%s needs a sub-command: %s", name, strings.Join(names, ", "))
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		fmt.Fprintf(c.stdout, "Usage: countersign %s %s ...\n\nRun 'countersign %s SUBCOMMAND -h' for its flags.\n", name, choices, name)
		return nil
	}
	sub, ok := subs[args[0]]
	if !ok {
		return usagef(synopsis, "unknown sub-command %q of %s", args[0], name)
	}
	return sub(ctx, args[1:])
}

// buildVersion is the version set at link time, else the module version, else
// the VCS revision the binary was built from, else "dev".
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	if rev != "" {
		return "dev-" + rev[:min(12, len(rev))] + modified
	}
	return "dev"
}

// quietLogger is the logger of the administrative commands: warnings and
// errors only, on stderr, so that stdout carries nothing but the result.
func (c *cli) quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
