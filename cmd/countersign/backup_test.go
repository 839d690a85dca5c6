package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// TestBackupUnderLoad backs up an SQLite database while agents propose,
// reviewers approve and tokens are redeemed, then checks the copy: intact,
// its tables consistent with each other, and its tokens still verifying
// with the signing keys copied with them. The copy is then restored.
func TestBackupUnderLoad(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "live.db")
	a, err := app.Open(ctx, app.Config{DB: db, Logger: slog.New(slog.DiscardHandler), PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := a.Protocol.AuthenticateAgent(ctx, creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	tenant, _ := a.Store.TenantByName(ctx, creds.Tenant)
	alice, _, err := a.Store.UserCredentials(ctx, tenant.ID, creds.Reviewer)
	if err != nil {
		t.Fatal(err)
	}

	// Writers: propose, approve, execute, over and over, until stopped.
	var executed atomic.Int64
	stop := make(chan struct{})
	var writers sync.WaitGroup
	errs := make(chan error, 3)
	for w := range 3 {
		writers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				order := fmt.Sprintf("ord_10%02d", 1+(w*7+i)%20)
				args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": 1, "currency": "CNY", "reason": "damaged"})
				p, _, err := a.Protocol.Propose(ctx, agent, writes.ProposeInput{Tool: "refund_order", Arguments: args,
					RequestKey: fmt.Sprintf("w%d-%d", w, i)})
				if err != nil {
					errs <- err
					return
				}
				c, err := a.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(alice, nil)})
				if models.IsCode(err, models.EStateChanged) {
					continue // another writer refunded the same order in between
				}
				if err != nil {
					errs <- err
					return
				}
				if _, err := a.Protocol.Execute(ctx, agent, p.ID, c.Token.Compact); err != nil && !models.IsCode(err, models.EStateChanged) {
					errs <- err
					return
				}
				executed.Add(1)
			}
		})
	}
	waitFor(t, 60*time.Second, "some executions before the backup", func() bool { return executed.Load() >= 5 })
	backup := filepath.Join(dir, "snapshot.db")
	r := invoke(t, nil, "", "backup", "--db", db, "--to", backup)
	before := executed.Load()
	waitFor(t, 60*time.Second, "more executions after the backup", func() bool { return executed.Load() >= before+5 })
	close(stop)
	writers.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	if r.err != nil {
		t.Fatalf("backup: %v\n%s", r.err, r.stderr)
	}
	if !strings.Contains(r.stdout, "integrity ok") {
		t.Errorf("backup printed %q", r.stdout)
	}
	info, err := store.CheckSQLiteFile(ctx, backup)
	if err != nil {
		t.Fatal(err)
	}
	if info.Executions == 0 || info.Executions >= executed.Load()+3 {
		t.Errorf("the copy holds %d executions; %d were made in all", info.Executions, executed.Load())
	}

	// The copy is consistent across tables: a snapshot, not a torn read.
	cp, err := store.Open("sqlite://"+backup, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	raw := cp.DB()
	for what, q := range map[string]string{
		"executions without a consumed token pointing at them": `SELECT COUNT(*) FROM executions e
			WHERE NOT EXISTS (SELECT 1 FROM tokens k WHERE k.jti = e.token_jti AND k.status = 'consumed' AND k.execution_id = e.id)`,
		"consumed tokens without their execution": `SELECT COUNT(*) FROM tokens k
			WHERE k.status = 'consumed' AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.id = k.execution_id)`,
		"succeeded proposals without a succeeded execution": `SELECT COUNT(*) FROM proposals p
			WHERE p.status = 'succeeded' AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.proposal_id = p.id AND e.status = 'succeeded')`,
		"confirmed or later proposals without a token": `SELECT COUNT(*) FROM proposals p
			WHERE p.status IN ('confirmed','executing','succeeded') AND NOT EXISTS (SELECT 1 FROM tokens k WHERE k.proposal_id = p.id)`,
	} {
		var n int
		if err := raw.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n != 0 {
			t.Errorf("the copy has %d %s", n, what)
		}
	}

	// Every token in the copy verifies with the keys in the copy alone.
	copied := token.New(cp, token.Config{Issuer: a.Tokens.Issuer(), Audience: a.Tokens.Audience()})
	rows, err := raw.QueryContext(ctx, "SELECT compact FROM tokens")
	if err != nil {
		t.Fatal(err)
	}
	var compacts []string
	for rows.Next() {
		var c string
		rows.Scan(&c)
		compacts = append(compacts, c)
	}
	rows.Close()
	if len(compacts) == 0 {
		t.Fatal("the copy has no tokens")
	}
	for _, c := range compacts {
		if _, err := copied.Verify(ctx, c); err != nil {
			t.Fatalf("a token from the copy does not verify with the copied keys: %v", err)
		}
	}

	// Restore: into a new file; not over a non-empty one without --force.
	target := filepath.Join(dir, "restored.db")
	r = mustExec(t, nil, "", "restore", "--from", backup, "--db", "sqlite://"+target)
	if !strings.Contains(r.stdout, fmt.Sprintf("%d executions", info.Executions)) {
		t.Errorf("restore printed %q", r.stdout)
	}
	r = invoke(t, nil, "", "restore", "--from", backup, "--db", "sqlite://"+target)
	if r.err == nil || !strings.Contains(r.err.Error(), "--force") {
		t.Errorf("restore over a non-empty database: %v, want a refusal naming --force", r.err)
	}
	mustExec(t, nil, "", "restore", "--from", backup, "--db", "sqlite://"+target, "--force")
	if got, err := store.CheckSQLiteFile(ctx, target); err != nil || got != info {
		t.Errorf("restored database: %+v, %v; want %+v", got, err, info)
	}
	restored, err := app.Open(ctx, app.Config{DB: "sqlite://" + target, Logger: slog.New(slog.DiscardHandler), PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatalf("serving the restored database: %v", err)
	}
	defer restored.Close()
	if _, err := restored.Tokens.Verify(ctx, compacts[0]); err != nil {
		t.Errorf("a token does not verify on the restored server: %v", err)
	}
}

func TestBackupRefusals(t *testing.T) {
	dir := t.TempDir()
	r := invoke(t, nil, "", "backup", "--db", "postgres://u@127.0.0.1:1/x", "--to", filepath.Join(dir, "b"))
	if msg, code := reported(r.err); code != exitUsage || !strings.Contains(msg, "pg_dump") {
		t.Errorf("backup of PostgreSQL: exit %d, %q; want usage error naming pg_dump", code, msg)
	}
	r = invoke(t, nil, "", "restore", "--from", filepath.Join(dir, "b"), "--db", "postgres://u@127.0.0.1:1/x")
	if msg, code := reported(r.err); code != exitUsage || !strings.Contains(msg, "pg_restore") {
		t.Errorf("restore into PostgreSQL: exit %d, %q; want usage error naming pg_restore", code, msg)
	}

	db := tempDB(t)
	mustExec(t, nil, "", "migrate", "--db", db)
	existing := filepath.Join(dir, "exists.db")
	os.WriteFile(existing, []byte("x"), 0o600)
	if r := invoke(t, nil, "", "backup", "--db", db, "--to", existing); r.err == nil || !strings.Contains(r.err.Error(), "exists") {
		t.Errorf("backup over an existing file: %v", r.err)
	}
	garbage := filepath.Join(dir, "garbage.db")
	os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 500)), 0o600)
	target := filepath.Join(dir, "t.db")
	r = invoke(t, nil, "", "restore", "--from", garbage, "--db", "sqlite://"+target)
	if r.err == nil || !strings.Contains(r.err.Error(), "refusing to restore") {
		t.Errorf("restore of a garbage file: %v", r.err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a refused restore created the target: %v", err)
	}
}

// A restore whose new file cannot take the target's place leaves the old
// database's write-ahead log where it was: the log is moved aside before
// the swap and put back when the swap fails.
func TestFailedRestoreKeepsTheOldLog(t *testing.T) {
	dir := t.TempDir()
	db := tempDB(t)
	mustExec(t, nil, "", "migrate", "--db", db)
	backup := filepath.Join(dir, "b.db")
	mustExec(t, nil, "", "backup", "--db", db, "--to", backup)
	// A directory where the database should be: the rename cannot replace it.
	target := filepath.Join(dir, "t.db")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target+"-wal", []byte("the old log"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := invoke(t, nil, "", "restore", "--from", backup, "--db", "sqlite://"+target, "--force"); r.err == nil {
		t.Fatal("a restore over a directory succeeded")
	}
	if b, err := os.ReadFile(target + "-wal"); err != nil || string(b) != "the old log" {
		t.Errorf("the old log after a failed restore: %q %v", b, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*restore-*"))
	if len(left) != 0 {
		t.Errorf("files left behind: %v", left)
	}
}

// A --db that names no SQLite file is a mistake for every command but
// those that start a database (serve, migrate, tenant create): they answer
// not_found and create nothing, where they used to create and migrate an
// empty database and, for backup, report a backup of it.
func TestMistypedDatabaseIsNotCreated(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "mistyped.db")
	db := "sqlite://" + missing
	for _, args := range [][]string{
		{"backup", "--to", filepath.Join(dir, "b.db")},
		{"audit", "export", "--tenant", "acme"},
		{"user", "create", "--tenant", "acme", "--name", "alice", "--role", "reviewer"},
		{"agent", "create", "--tenant", "acme", "--name", "bot"},
		{"keys", "rotate"},
		{"evidence", "verify", "prop_x", "--tenant", "acme"},
		{"review", "list", "--tenant", "acme", "--user", "alice"},
	} {
		r := invoke(t, nil, "password123\n", append(args, "--db", db)...)
		if !models.IsCode(r.err, models.ENotFound) || !strings.Contains(r.err.Error(), "no database at") {
			t.Errorf("%v: %v, want not_found naming the path", args, r.err)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("%v created the database", args)
		}
	}
	mustExec(t, nil, "", "tenant", "create", "acme", "--db", db)
	if _, err := os.Stat(missing); err != nil {
		t.Errorf("tenant create did not create the database: %v", err)
	}
}
