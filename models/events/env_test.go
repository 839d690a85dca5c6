package events_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// Every test opens its own database, so they run in parallel, more at once
// than there are cores: most of their time is spent waiting on it.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(8)
	pgtest.Main(m)
}

type env struct {
	t      *testing.T
	ctx    context.Context
	clock  models.Clock
	url    string
	store  *store.Store
	svc    *writes.Service
	demo   store.DemoResult
	tenant string
	agent  models.Agent
}

func eachDB(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, kind)
		})
	}
}

func dbURL(t *testing.T, kind string) string {
	if kind == "postgres" {
		return pgtest.DSN(t)
	}
	return "sqlite://" + filepath.Join(t.TempDir(), "countersign.db")
}

// newEnv opens (and seeds) the database at url with the real protocol
// service over it; notify lists the notification channels in use.
func newEnv(t *testing.T, url string, clock models.Clock, notify ...string) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: clock, url: url}
	st, err := store.Open(url, store.Options{Clock: clock, Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.store = st
	e.demo, err = st.SeedDemo(e.ctx, store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: "x",
		AdminName: "admin", AdminPasswordHash: "x", AgentName: "demo-agent", AgentKeyHash: secret.HashAPIKey("csk_events_test")})
	if err != nil {
		t.Fatal(err)
	}
	ledger := demoledger.New(st)
	if err := ledger.Seed(e.ctx, e.demo.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	e.tenant, e.agent = e.demo.Tenant.ID, e.demo.Agent
	reg := registry.Demo()
	adapters := map[string]models.Adapter{}
	for _, tool := range reg.Tools() {
		adapters[tool.Name] = ledger
	}
	tokens := token.New(st, token.Config{Issuer: "t", Audience: "t", Clock: clock})
	e.svc, err = writes.New(e.ctx, writes.Config{Store: st, Registry: reg, Tokens: tokens, Adapters: adapters, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// loopback is where the tests' receivers listen.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// events is the service over the env's database, allowed to send webhooks
// to the tests' receivers on loopback.
func (e *env) events(cfg events.Config) *events.Service {
	cfg.AllowAddresses = append(cfg.AllowAddresses, loopback...)
	return e.strictEvents(cfg)
}

// strictEvents is events with only cfg's own AllowAddresses.
func (e *env) strictEvents(cfg events.Config) *events.Service {
	cfg.Store, cfg.Clock = e.store, e.clock
	if cfg.RetryBase == 0 {
		cfg.RetryBase = time.Millisecond
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = "http://console.test"
	}
	return events.New(cfg)
}

func (e *env) propose(order string, amount int64) *models.Proposal {
	e.t.Helper()
	args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "damaged on arrival"})
	p, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil {
		e.t.Fatalf("propose: %v", err)
	}
	return p
}

// drain dispatches until nothing is due now and returns how many attempts
// it made.
func drain(t *testing.T, ev *events.Service) int {
	t.Helper()
	attempted := 0
	for range 100 {
		n, err := ev.DispatchOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return attempted
		}
		attempted += n
	}
	t.Fatal("deliveries never ran out")
	return attempted
}

// receiver is a real HTTP endpoint on 127.0.0.1 that verifies every
// message with the endpoint's secret and records it.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	secret string
	got    []received
	// answer, when set, chooses the status of the n-th request (0-based).
	answer func(n int) int
	n      int
	// now is the receiver's clock for the timestamp check.
	now func() time.Time
}

type received struct {
	ID       string
	Body     []byte
	Header   http.Header
	Verified error
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{now: time.Now}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := r.n
		r.n++
		code := http.StatusNoContent
		if r.answer != nil {
			code = r.answer(n)
		}
		r.got = append(r.got, received{ID: req.Header.Get("webhook-id"), Body: body, Header: req.Header.Clone(),
			Verified: events.Verify(r.secret, req.Header, body, r.now(), 5*time.Minute)})
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) messages() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// receiving registers a new receiver as an endpoint of scope, by actor (an
// agent for its own endpoints, an administrator for the tenant-wide ones),
// and returns it holding the endpoint's secret, so that it verifies the
// signature of everything it gets.
func (e *env) receiving(ev *events.Service, actor string, scope models.EndpointScope) *receiver {
	e.t.Helper()
	r := newReceiver(e.t)
	_, sec, err := ev.RegisterEndpoint(e.ctx, actor, scope, r.URL, "")
	if err != nil {
		e.t.Fatal(err)
	}
	r.secret = sec
	return r
}
