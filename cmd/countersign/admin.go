package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
)

// maxNameLen bounds tenant, user and agent names.
const maxNameLen = 100

// openStore opens and migrates the existing database of an administrative
// command (existingDB). Migrations that had to be applied are mentioned on
// stderr.
func (c *cli) openStore(ctx context.Context, db string) (*store.Store, error) {
	if err := existingDB(db); err != nil {
		return nil, err
	}
	return c.createStore(ctx, db)
}

// existingDB refuses an SQLite --db that names no file (ENotFound): every
// command but serve, migrate and tenant create works on a database that
// exists, and opening a mistyped path would create and migrate an empty
// one and, for backup or audit export, report on it as if it were real.
func existingDB(db string) error {
	path := store.SQLitePath(db)
	if path == "" || path == ":memory:" {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return models.Errorf(models.ENotFound, "no database at %s: check --db (countersign migrate or countersign tenant create makes a new one)", path)
	}
	return nil
}

// createStore is openStore for the commands that may start a database:
// one that does not exist yet is created.
func (c *cli) createStore(ctx context.Context, db string) (*store.Store, error) {
	st, err := store.Open(db, store.Options{Logger: c.quietLogger()})
	if err != nil {
		return nil, err
	}
	applied, err := st.Migrate(ctx)
	if err != nil {
		st.Close()
		return nil, err
	}
	if len(applied) > 0 {
		fmt.Fprintf(c.stderr, "applied database migrations %s\n", joinInts(applied))
	}
	return st, nil
}

// openTenant opens the store as openStore does and looks the tenant up by
// name (ENotFound for an unknown one). The caller closes the store.
func (c *cli) openTenant(ctx context.Context, db, tenant string) (*store.Store, models.Tenant, error) {
	st, err := c.openStore(ctx, db)
	if err != nil {
		return nil, models.Tenant{}, err
	}
	t, err := st.TenantByName(ctx, tenant)
	if err != nil {
		st.Close()
		return nil, models.Tenant{}, err
	}
	return st, t, nil
}

func joinInts(vs []int64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

// checkName refuses names that would be awkward or misleading to show and
// type: empty, surrounded by blanks, with control characters, too long.
func checkName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s name is empty", kind)
	case len(name) > maxNameLen:
		return fmt.Errorf("%s name is longer than %d bytes", kind, maxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s name is not valid UTF-8", kind)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%s name %q starts or ends with white space", kind, name)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsControl(r) || isBidiControl(r) }) >= 0:
		return fmt.Errorf("%s name %q contains control characters", kind, name)
	}
	return nil
}

func (c *cli) migrate(ctx context.Context, args []string) error {
	var db string
	cmd := newCommand("migrate", "countersign migrate [flags]",
		"Applies the pending database migrations and prints the versions applied,\nor \"up to date\". Servers also migrate at start.", c.stdout)
	dbFlag(cmd.fs, &db)
	if err := cmd.parseFlags(args, c.getenv, "db"); err != nil {
		return err
	}
	st, err := store.Open(db, store.Options{Logger: c.quietLogger()})
	if err != nil {
		return err
	}
	defer st.Close()
	applied, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(c.stdout, "up to date")
		return nil
	}
	for _, v := range applied {
		fmt.Fprintf(c.stdout, "applied %d\n", v)
	}
	return nil
}

func (c *cli) tenantCreate(ctx context.Context, args []string) error {
	var db string
	cmd := newCommand("tenant create", "countersign tenant create NAME [flags]",
		"Creates a tenant and prints its id. Everything (users, agents, proposals)\nbelongs to exactly one tenant.", c.stdout)
	dbFlag(cmd.fs, &db)
	pos, err := cmd.parse(args, c.getenv)
	if err != nil {
		return err
	}
	if err := cmd.wantArgs(pos, "NAME"); err != nil {
		return err
	}
	if err := cmd.required(map[string]string{"db": db}); err != nil {
		return err
	}
	name := pos[0]
	if err := checkName("tenant", name); err != nil {
		return usagef(cmd.synopsis, "%v", err)
	}
	st, err := c.createStore(ctx, db)
	if err != nil {
		return err
	}
	defer st.Close()
	t, err := st.CreateTenant(ctx, name)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, t.ID)
	return nil
}

func (c *cli) userCreate(ctx context.Context, args []string) error {
	var db, tenant, name, role string
	var cost secret.PasswordParams
	cmd := newCommand("user create", "countersign user create --tenant T --name N --role reviewer|admin [flags]", `
Creates a console user of a tenant and prints the user's id. The password is
the first line of stdin (8 to 1024 bytes); it is stored as an argon2id hash.
Reviewers approve and decline proposals; administrators may also revoke
confirmations.

  printf '%s\n' "$PASSWORD" | countersign user create --tenant acme --name alice --role reviewer`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the user's sign-in `NAME`")
	cmd.fs.StringVar(&role, "role", string(models.RoleReviewer), "`ROLE`: reviewer or admin")
	passwordHashFlag(cmd.fs, &cost)
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name"); err != nil {
		return err
	}
	if !models.Role(role).Valid() {
		return usagef(cmd.synopsis, "--role must be reviewer or admin, not %q", role)
	}
	if err := checkName("user", name); err != nil {
		return usagef(cmd.synopsis, "%v", err)
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	password, err := c.readNewPassword(ctx, name)
	if err != nil {
		return err
	}
	pw, err := secret.NewPasswords(cost, 1)
	if err != nil {
		return err
	}
	hash, err := pw.Hash(password)
	if err != nil {
		return err
	}
	u, err := st.CreateUser(ctx, t.ID, name, models.Role(role), hash)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, u.ID)
	return nil
}

func (c *cli) agentCreate(ctx context.Context, args []string) error {
	var db, tenant, name, owner string
	var readAll bool
	cmd := newCommand("agent create", "countersign agent create --tenant T --name N [--owner USER] [--read-all] [flags]", `
Creates an agent principal and prints its API key, alone, on stdout. The key
is shown only this once: only its hash is stored. Agents send it as
"Authorization: Bearer <key>".

With --owner the agent acts for that console user, who then counts as the
requester of the agent's proposals and may not approve them (unless the risk
tier allows self-approval).

An agent reads only the proposals it made. With --read-all it may read and
list every proposal of its tenant (never cancel or redeem another agent's).`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the agent's `NAME`, shown to reviewers")
	cmd.fs.StringVar(&owner, "owner", "", "`USER` name of the console user the agent acts for (optional)")
	cmd.fs.BoolVar(&readAll, "read-all", false, "let the agent read every proposal of its tenant, not only its own")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name"); err != nil {
		return err
	}
	if err := checkName("agent", name); err != nil {
		return usagef(cmd.synopsis, "%v", err)
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	var ownerID string
	if owner != "" {
		u, _, err := st.UserCredentials(ctx, t.ID, owner)
		if models.IsCode(err, models.ENotFound) {
			return models.Errorf(models.ENotFound, "no user %q in tenant %q", owner, tenant)
		}
		if err != nil {
			return err
		}
		ownerID = u.ID
	}
	key, hash, err := secret.NewAPIKey()
	if err != nil {
		return err
	}
	a, err := st.CreateAgent(ctx, t.ID, name, ownerID, hash)
	if err != nil {
		return err
	}
	if readAll {
		// Created without the grant first: if this step fails, the agent
		// holds less than asked for, never more.
		if a, err = st.SetAgentReadAll(ctx, t.ID, a.ID, true); err != nil {
			return err
		}
	}
	scope := "its own proposals"
	if a.ReadAll {
		scope = "every proposal of the tenant"
	}
	fmt.Fprintf(c.stderr, "created agent %s (%s) in tenant %s, reading %s; its key is printed once and cannot be shown again\n",
		a.Name, a.ID, t.Name, scope)
	fmt.Fprintln(c.stdout, key)
	return nil
}

func (c *cli) keysRotate(ctx context.Context, args []string) error {
	var db string
	cmd := newCommand("keys rotate", "countersign keys rotate [flags]", `
Creates a new Ed25519 token signing key, makes it the one that signs new
confirmation tokens and prints its key id (kid). Earlier keys stay in the
JWKS and keep verifying the tokens they signed. A running server switches to
the new key the next time it re-reads the key set (any JWKS request makes it
do so) or when it restarts. When the database's keys are encrypted, give the
key-encryption key in COUNTERSIGN_KEK_FILE or COUNTERSIGN_KEK.`, c.stdout)
	dbFlag(cmd.fs, &db)
	if err := cmd.parseFlags(args, c.getenv, "db"); err != nil {
		return err
	}
	key, err := c.loadKEK(c.getenv(envName("kek-file")))
	if err != nil {
		return err
	}
	if err := existingDB(db); err != nil {
		return err
	}
	st, err := store.Open(db, store.Options{Logger: c.quietLogger(), KEK: key})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	// A new key is sealed like the others; a database whose keys need a
	// KEK this command was not given is refused before anything is added.
	if _, err := st.CheckKeys(ctx); err != nil {
		return err
	}
	kid, err := token.New(st, token.Config{}).Rotate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, kid)
	return nil
}

func (c *cli) agentReadAll(ctx context.Context, args []string) error {
	var db, tenant, name string
	var withdraw bool
	cmd := newCommand("agent read-all", "countersign agent read-all --tenant T --name N [--withdraw] [flags]", `
Grants an existing agent the right to read and list every proposal of its
tenant (never to cancel or redeem another agent's), or with --withdraw
takes it back, so that it reads only the proposals it made.`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the agent's `NAME`")
	cmd.fs.BoolVar(&withdraw, "withdraw", false, "take the grant back")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name"); err != nil {
		return err
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	a, err := st.AgentByName(ctx, t.ID, name)
	if err != nil {
		return err
	}
	if a, err = st.SetAgentReadAll(ctx, t.ID, a.ID, !withdraw); err != nil {
		return err
	}
	scope := "its own proposals"
	if a.ReadAll {
		scope = "every proposal of the tenant"
	}
	fmt.Fprintf(c.stderr, "agent %s (%s) now reads %s\n", a.Name, a.ID, scope)
	return nil
}
