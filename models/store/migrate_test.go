package store_test

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// TestUpgradeKeepsExecutionsAndTheirKeys: migration 00004 rebuilds the
// tables that hold proposals. Rows written under the old schema survive
// unchanged, and an execution recorded before keeps the raw request key it
// was sent under as its downstream key, so that asking the business system
// about it still finds it.
func TestUpgradeKeepsExecutionsAndTheirKeys(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st, err := store.Open(url, store.Options{Clock: models.NewFixedClock(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC))})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.MigrateTo(ctx, 3); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`INSERT INTO tenants (id, name, created_at) VALUES ('ten_1', 't', 1)`,
			`INSERT INTO users (id, tenant_id, name, role, password_hash, created_at) VALUES ('usr_1', 'ten_1', 'alice', 'reviewer', 'x', 1)`,
			`INSERT INTO agents (id, tenant_id, name, key_hash, created_at) VALUES ('agt_1', 'ten_1', 'bot', 'h', 1)`,
			`INSERT INTO proposals (id, tenant_id, agent_id, tool, arguments, args_digest, preview, risk_tier, confirmation,
			   quorum, ttl_ms, policy_version, request_key, status, created_at, expires_at, updated_at)
			 VALUES ('prop_1', 'ten_1', 'agt_1', 'refund_order', '{}', 'sha256:d', '[]', 'low', 'click', 1, 1000, 'p1',
			   'refund-42', 'unknown', 1, 2, 3)`,
			`INSERT INTO decisions (id, tenant_id, proposal_id, user_id, kind, digest_seen, created_at)
			 VALUES ('dec_1', 'ten_1', 'prop_1', 'usr_1', 'approve', 'sha256:d', 1)`,
			`INSERT INTO tokens (jti, tenant_id, proposal_id, agent_id, kid, status, compact, issued_at, expires_at, execution_id)
			 VALUES ('tok_1', 'ten_1', 'prop_1', 'agt_1', 'k', 'consumed', 'a.b.c', 1, 2, 'exe_1')`,
			`INSERT INTO executions (id, tenant_id, proposal_id, token_jti, request_key, operation, args_digest, status,
			   lease_until, created_at, updated_at)
			 VALUES ('exe_1', 'ten_1', 'prop_1', 'tok_1', 'refund-42', 'refund_order', 'sha256:d', 'unknown', 5, 1, 2)`,
		} {
			if err := st.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if _, err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := st.GetProposal(ctx, "ten_1", "prop_1")
		if err != nil {
			t.Fatal(err)
		}
		if p.RequestKey != "refund-42" || p.Status != models.StatusUnknown || len(p.Decisions) != 1 ||
			p.Token == nil || p.Token.Status != models.TokenConsumed || p.Execution == nil {
			t.Fatalf("after upgrade: %+v", p)
		}
		if got := p.Execution.DownstreamKey; got != "refund-42" {
			t.Fatalf("downstream key of an old execution = %q, want the raw request key it was sent under", got)
		}
		due, err := st.ExecutionsDue(ctx, time.UnixMilli(10), 10)
		if err != nil || len(due) != 1 || due[0].ID != "exe_1" {
			t.Fatalf("the old unknown execution is not due for reconciling: %v %v", due, err)
		}
		// Foreign keys point at the rebuilt tables: a decision for the
		// proposal is accepted, one for a missing proposal refused.
		if err := st.Exec(ctx, `INSERT INTO users (id, tenant_id, name, role, password_hash, created_at) VALUES ('usr_2', 'ten_1', 'bob', 'reviewer', 'x', 1)`); err != nil {
			t.Fatal(err)
		}
		if err := st.Exec(ctx, `INSERT INTO decisions (id, tenant_id, proposal_id, user_id, kind, digest_seen, created_at)
			VALUES ('dec_3', 'ten_1', 'prop_1', 'usr_2', 'approve', 'sha256:d', 1)`); err != nil {
			t.Fatal(err)
		}
		if err := st.Exec(ctx, `INSERT INTO decisions (id, tenant_id, proposal_id, user_id, kind, digest_seen, created_at)
			VALUES ('dec_2', 'ten_1', 'prop_none', 'usr_1', 'approve', 'sha256:d', 1)`); err == nil {
			t.Fatal("a decision for a missing proposal was accepted")
		}
	})
}

// TestNewerSchemaIsRefused: a database that a later release migrated
// further is not taken for up to date. Migrate refuses it with
// invalid_state, naming both versions, and writes nothing, so that
// running an older binary on an upgraded database (a downgrade, or an old
// instance restarted during a rolling upgrade) stops at start instead of
// appending to data it does not understand.
func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st, err := store.Open(url, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		// Up to date is still fine.
		if applied, err := st.Migrate(ctx); err != nil || len(applied) != 0 {
			t.Fatalf("second migrate: %v %v", applied, err)
		}
		if err := st.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`); err != nil {
			t.Fatal(err)
		}
		applied, err := st.Migrate(ctx)
		if !models.IsCode(err, models.EInvalidState) || len(applied) != 0 {
			t.Fatalf("migrate of a newer schema = %v, %v; want invalid_state and nothing applied", applied, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "99999") || !strings.Contains(msg, "newer than this release") {
			t.Fatalf("the refusal does not name the versions: %v", err)
		}
	})
}

// TestSQLiteFilesArePrivate: the database file and its -wal and -shm files
// are created readable by their owner only, whatever the umask allows.
func TestSQLiteFilesArePrivate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "private.db")
	st, err := store.Open("sqlite://"+path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateTenant(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(name), got)
		}
	}
}

// TestDatabaseErrorsAreClassified: a violated constraint is a bug, EInternal
// (500, logged); a database that cannot be reached or asked in time is
// EUnavailable (503).
func TestDatabaseErrorsAreClassified(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		pub, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		k := models.SigningKey{ID: "k_same", Private: priv, Public: pub, CreatedAt: time.Now(), Active: true}
		if err := st.AddKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		err = st.AddKey(ctx, k) // the same kid again: a primary-key violation
		if got := models.ErrorCode(err); got != models.EInternal {
			t.Errorf("constraint violation: %q (%v), want internal", got, err)
		}

		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err = st.GetProposal(cancelled, "ten_x", "prop_x")
		if got := models.ErrorCode(err); got != models.EUnavailable {
			t.Errorf("cancelled request: %q (%v), want unavailable", got, err)
		}

		if st.Dialect() == store.Postgres {
			// Another session ends this store's connections, as a database
			// restart or failover would.
			if err := st.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			killer, err := store.Open(st.URLForTest(), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer killer.Close()
			if err := killer.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
				t.Fatal(err)
			}
			_, err = st.SigningKeys(ctx)
			if got := models.ErrorCode(err); got != models.EUnavailable {
				t.Errorf("connection ended by the server: %q (%v), want unavailable", got, err)
			}
		}

		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = st.GetProposal(ctx, "ten_x", "prop_x")
		if got := models.ErrorCode(err); got != models.EUnavailable {
			t.Errorf("closed database: %q (%v), want unavailable", got, err)
		}
	})
}

// TestServersStartedTogetherAllMigrate: several servers started at the
// same moment against one new database each run the migrations and set up
// the append-only triggers. Each must succeed, and each migration is
// applied once, by one of them, instead of the others failing on the
// tables or trigger functions it is creating.
func TestServersStartedTogetherAllMigrate(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		const servers = 6
		stores := make([]*store.Store, servers)
		for i := range stores {
			st, err := store.Open(url, store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			stores[i] = st
		}
		applied := make([][]int64, servers)
		errs := make([]error, servers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, st := range stores {
			wg.Go(func() {
				<-start
				applied[i], errs[i] = st.Migrate(ctx)
			})
		}
		close(start)
		wg.Wait()
		by := map[int64]int{}
		for i, err := range errs {
			if err != nil {
				t.Errorf("server %d: %v", i, err)
			}
			for _, v := range applied[i] {
				if j, twice := by[v]; twice {
					t.Errorf("migration %d applied by servers %d and %d", v, j, i)
				}
				by[v] = i
			}
		}
		if len(by) == 0 {
			t.Error("no server applied a migration")
		}
		// The triggers are in place whoever set them up.
		ten, err := stores[1].CreateTenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if err := stores[1].Audit(ctx, ten.ID, time.Now(), models.AuditEvent{Kind: models.AuditSignIn, Actor: "usr_x"}); err != nil {
			t.Fatal(err)
		}
		if err := stores[0].ExecRawForTest(ctx, "DELETE FROM audit_entries"); err == nil ||
			!strings.Contains(err.Error(), "append-only") {
			t.Errorf("deleting audit entries after a concurrent start: %v, want the append-only refusal", err)
		}
	})
}
