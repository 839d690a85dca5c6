package writes_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// Every test builds its own service over its own database and clock, so
// they run in parallel; most of their time is spent waiting on the
// database, more at once than there are cores.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(8)
	pgtest.Main(m)
}

// start is 2026-09-01 06:20:00 UTC, the clock every test begins at.
var start = time.Date(2026, 9, 1, 6, 20, 0, 0, time.UTC)

type env struct {
	t       testing.TB
	ctx     context.Context
	clock   *models.FixedClock
	store   *store.Store
	ledger  *demoledger.Ledger
	tokens  *token.Service
	svc     *writes.Service
	demo    store.DemoResult
	tenant  string
	agent   models.Agent
	alice   models.User
	admin   models.User
	dbKind  string
	dbURL   string
	adapter map[string]models.Adapter
}

// eachDB runs fn on a fresh SQLite file and on a fresh PostgreSQL database.
func eachDB(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, kind, nil))
		})
	}
}

func dbURL(t testing.TB, kind string) string {
	if kind == "postgres" {
		return pgtest.DSN(t)
	}
	return "sqlite://" + filepath.Join(t.TempDir(), "countersign.db")
}

// newEnv builds the real service on a real database with the demo registry
// and data. extra adapters replace the demo ledger for the named tools, and
// reg (when not nil) replaces the demo registry.
func newEnv(t testing.TB, kind string, configure func(e *env) *registry.Registry) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: models.NewFixedClock(start), dbKind: kind}
	e.dbURL = dbURL(t, kind)
	e.openStore()
	if _, err := e.store.Migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	hash := secret.HashAPIKey("csk_demo_key_for_tests")
	demo, err := e.store.SeedDemo(e.ctx, store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: "x",
		AdminName: "admin", AdminPasswordHash: "x", AgentName: "demo-agent", AgentKeyHash: hash})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ledger.Seed(e.ctx, demo.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	e.demo, e.tenant, e.agent, e.alice, e.admin = demo, demo.Tenant.ID, demo.Agent, demo.Reviewer, demo.Admin
	reg := registry.Demo()
	e.adapter = map[string]models.Adapter{}
	for _, tool := range reg.Tools() {
		e.adapter[tool.Name] = e.ledger
	}
	if configure != nil {
		reg = configure(e)
	}
	e.svc = e.newService(reg)
	return e
}

func (e *env) openStore() {
	st, err := store.Open(e.dbURL, store.Options{Clock: e.clock})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	e.store, e.ledger = st, demoledger.New(st)
	e.tokens = token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
}

func (e *env) newService(reg *registry.Registry) *writes.Service {
	svc, err := writes.New(e.ctx, writes.Config{Store: e.store, Registry: reg, Tokens: e.tokens,
		Adapters: e.adapter, Clock: e.clock, PollInterval: 20 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

// user creates another reviewer of the demo tenant.
func (e *env) user(name string, role models.Role) models.User {
	u, err := e.store.CreateUser(e.ctx, e.tenant, name, role, "x")
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func refundArgs(order string, amount int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "damaged on arrival"})
	return b
}

// propose creates a refund proposal and fails the test on error.
func (e *env) propose(order string, amount int64) *models.Proposal {
	e.t.Helper()
	p, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs(order, amount)})
	if err != nil {
		e.t.Fatalf("propose: %v", err)
	}
	if !created {
		e.t.Fatal("propose: not created")
	}
	return p
}

// confirm approves p as alice (with a step-up for webauthn tiers) and
// returns the confirmed proposal.
func (e *env) confirm(p *models.Proposal) *models.Proposal {
	e.t.Helper()
	in := writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)}
	if p.Tier.Confirmation == models.ConfirmWebAuthn {
		in.Evidence = steppedUp(in.Reviewer, p.ID, p.ArgsDigest, nil, json.RawMessage(`{"test":"assertion"}`))
	}
	out, err := e.svc.Confirm(e.ctx, in)
	if err != nil {
		e.t.Fatalf("confirm: %v", err)
	}
	if out.Status != models.StatusConfirmed || out.Token == nil {
		e.t.Fatalf("confirm: status %s, token %v", out.Status, out.Token)
	}
	return out
}

func (e *env) order(id string) demoledger.Order {
	e.t.Helper()
	o, err := e.ledger.Order(e.ctx, e.tenant, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

func wantCode(t testing.TB, err error, want models.Code) {
	t.Helper()
	if got := models.ErrorCode(err); got != want {
		t.Fatalf("error code = %q (%v), want %q", got, err, want)
	}
}

// downstreamKey is the idempotency key the business system sees for p.
func (e *env) downstreamKey(p *models.Proposal) string {
	e.t.Helper()
	id, err := e.store.Installation(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return models.DownstreamKey(id, p.TenantID, p.AgentID, p.RequestKey)
}
