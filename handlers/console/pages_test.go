package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/html"

	"github.com/countersign/countersign/handlers/console"
	"github.com/countersign/countersign/handlers/httpstatus"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/web/session"
)

// start is 2026-09-01 06:20:00 UTC, the clock every test begins at.
var start = time.Date(2026, 9, 1, 6, 20, 0, 0, time.UTC)

// env is the real protocol service on a real SQLite database with the demo
// registry and data, and an echo instance serving the reviewer pages.
type env struct {
	t        *testing.T
	ctx      context.Context
	clock    *models.FixedClock
	store    *store.Store
	svc      *writes.Service
	agent    models.Agent
	alice    models.User
	admin    models.User
	echo     *echo.Echo
	pages    *console.Pages
	sessions map[string]*session.Session // by the X-Test-User header
	// stepUp and keys are made by the first stepUpConfirm.
	stepUp *stepup.Service
	keys   map[string]*softKey // by user id
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvRegistry(t, registry.Demo())
}

// newEnvRegistry is newEnv with another tool registry.
func newEnvRegistry(t *testing.T, reg *registry.Registry) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: models.NewFixedClock(start), sessions: map[string]*session.Session{}}
	st, err := store.Open("sqlite://"+filepath.Join(t.TempDir(), "countersign.db"), store.Options{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.store = st
	if _, err := st.Migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	demo, err := st.SeedDemo(e.ctx, store.DemoSeed{ReviewerName: "alice", ReviewerPasswordHash: "x",
		AdminName: "admin", AdminPasswordHash: "x", AgentName: "demo-agent",
		AgentKeyHash: secret.HashAPIKey("csk_demo_key_for_tests")})
	if err != nil {
		t.Fatal(err)
	}
	ledger := demoledger.New(st)
	if err := ledger.Seed(e.ctx, demo.Tenant.ID); err != nil {
		t.Fatal(err)
	}
	e.agent, e.alice, e.admin = demo.Agent, demo.Reviewer, demo.Admin
	adapters := map[string]models.Adapter{}
	for _, tool := range reg.Tools() {
		adapters[tool.Name] = ledger
	}
	tokens := token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	e.svc, err = writes.New(e.ctx, writes.Config{Store: st, Registry: reg, Tokens: tokens, Adapters: adapters,
		Clock: e.clock, ExecutionLease: 10 * time.Second, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}

	e.signIn(demo.Tenant, e.alice)
	e.signIn(demo.Tenant, e.admin)
	e.signIn(demo.Tenant, e.newUser(demo.Tenant.ID, "bob", models.RoleReviewer))
	other, err := st.CreateTenant(e.ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	e.signIn(other, e.newUser(other.ID, "olga", models.RoleAdmin))

	pages := console.NewPages(e.svc, static.New(), e.clock, nil)
	e.pages = pages
	ech := echo.New()
	ech.HTTPErrorHandler = testErrorHandler
	// Stands in for the session middleware: X-Test-User names who is signed
	// in; without it nobody is.
	ech.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if s, ok := e.sessions[c.Request().Header.Get("X-Test-User")]; ok {
				session.Set(c, s)
			}
			return next(c)
		}
	})
	ech.GET("/", pages.Pending)
	ech.GET("/pending/rows", pages.PendingRows)
	ech.GET("/events", pages.Events)
	ech.GET("/proposals/:id", pages.Proposal)
	ech.POST("/proposals/:id/approve", pages.Approve)
	ech.POST("/proposals/:id/decline", pages.Decline)
	ech.POST("/proposals/:id/revoke", pages.Revoke)
	ech.POST("/proposals/:id/edit", pages.Counter)
	ech.GET("/history", pages.History)
	e.echo = ech
	return e
}

// testErrorHandler maps errors the way the server's handler does, as text.
func testErrorHandler(err error, c echo.Context) {
	status := httpstatus.Of(models.ErrorCode(err))
	var he *echo.HTTPError
	if errors.As(err, &he) {
		status = he.Code
	}
	_ = c.String(status, models.ErrorMessage(err))
}

func (e *env) newUser(tenantID, name string, role models.Role) models.User {
	e.t.Helper()
	u, err := e.store.CreateUser(e.ctx, tenantID, name, role, "x")
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func (e *env) signIn(t models.Tenant, u models.User) {
	e.sessions[u.Name] = &session.Session{ID: "ses_" + u.Name, User: u, Tenant: t, CSRF: "t", AMR: []string{"pwd"}}
}

// response is a finished request with its parsed body.
type response struct {
	*httptest.ResponseRecorder
	doc *html.Node
}

// do sends a request as user ("" for nobody); a non-nil form is posted.
func (e *env) do(method, target, user string, form url.Values, header ...string) response {
	e.t.Helper()
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
	} else {
		req = httptest.NewRequest(method, target, nil)
	}
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	e.echo.ServeHTTP(rec, req)
	doc, err := html.Parse(strings.NewReader(rec.Body.String()))
	if err != nil {
		e.t.Fatalf("%s %s: body is not HTML: %v", method, target, err)
	}
	return response{rec, doc}
}

func (e *env) get(target, user string) response {
	e.t.Helper()
	return e.do(http.MethodGet, target, user, nil)
}

func (e *env) post(target, user string, form url.Values) response {
	e.t.Helper()
	return e.do(http.MethodPost, target, user, form)
}

// wantStatus fails the test unless r has the status.
func wantStatus(t *testing.T, r response, want int) {
	t.Helper()
	if got := r.Code; got != want {
		t.Fatalf("status = %d, want %d; body:\n%s", got, want, r.Body.String())
	}
}

func refundArgs(order string, amount int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "damaged on arrival"})
	return b
}

// propose creates a proposal as the demo agent.
func (e *env) propose(tool string, args json.RawMessage, context string) *models.Proposal {
	e.t.Helper()
	p, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: tool, Arguments: args, Context: context})
	if err != nil || !created {
		e.t.Fatalf("propose %s: created=%v, err=%v", tool, created, err)
	}
	return p
}

func (e *env) refund(order string, amount int64) *models.Proposal {
	e.t.Helper()
	return e.propose("refund_order", refundArgs(order, amount), "customer sent photos of the broken item")
}

// confirm approves p through the service as u, signed in with a password,
// with a security-key ceremony where the tier needs one.
func (e *env) confirm(p *models.Proposal, u models.User) *models.Proposal {
	e.t.Helper()
	if p.Tier.Confirmation == models.ConfirmWebAuthn {
		return e.stepUpConfirm(p, u)
	}
	in := writes.ConfirmInput{Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(u, nil)}
	out, err := e.svc.Confirm(e.ctx, in)
	if err != nil {
		e.t.Fatalf("confirm: %v", err)
	}
	return out
}

func (e *env) reload(id string) *models.Proposal {
	e.t.Helper()
	p, err := e.svc.Get(e.ctx, e.alice.TenantID, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// ---- HTML helpers -----------------------------------------------------------

// all returns every element under n whose data-testid is id.
func all(n *html.Node, id string) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && attr(n, "data-testid") == id {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

// one returns the only element under n with data-testid id.
func one(t *testing.T, n *html.Node, id string) *html.Node {
	t.Helper()
	got := all(n, id)
	if len(got) != 1 {
		var b strings.Builder
		_ = html.Render(&b, n)
		t.Fatalf("%d elements with data-testid=%q, want 1; html:\n%s", len(got), id, b.String())
	}
	return got[0]
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

// text is n's text content with white space collapsed.
func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

func wantContains(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s = %q, want it to contain %q", what, got, w)
		}
	}
}

// field returns the proposal-field row of the named argument.
func field(t *testing.T, doc *html.Node, name string) *html.Node {
	t.Helper()
	for _, n := range all(doc, "proposal-field") {
		if attr(n, "data-field") == name {
			return n
		}
	}
	t.Fatalf("no proposal-field %q", name)
	return nil
}

func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	for _, r := range []response{
		e.get("/", ""),
		e.get("/pending/rows", ""),
		e.get("/events", ""),
		e.get("/proposals/"+p.ID, ""),
		e.post("/proposals/"+p.ID+"/approve", "", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}),
		e.get("/history", ""),
	} {
		wantStatus(t, r, http.StatusUnauthorized)
	}
	if got := e.reload(p.ID); got.Status != models.StatusAwaitingConfirmation {
		t.Errorf("status = %s after an anonymous approve", got.Status)
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	e.confirm(e.refund("ord_1002", 19900), e.alice)

	wantStatus(t, e.get("/proposals/"+p.ID, "olga"), http.StatusNotFound)
	wantStatus(t, e.post("/proposals/"+p.ID+"/approve", "olga", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}), http.StatusNotFound)
	wantStatus(t, e.post("/proposals/"+p.ID+"/decline", "olga", url.Values{"digest": {p.ArgsDigest}, "reason": {"no"}}), http.StatusNotFound)
	wantStatus(t, e.post("/proposals/"+p.ID+"/revoke", "olga", url.Values{}), http.StatusNotFound)

	list := e.get("/", "olga")
	wantStatus(t, list, http.StatusOK)
	if rows := all(list.doc, "pending-row"); len(rows) != 0 {
		t.Errorf("another tenant's reviewer sees %d pending rows", len(rows))
	}
	one(t, list.doc, "empty-state")
	hist := e.get("/history", "olga")
	wantStatus(t, hist, http.StatusOK)
	if rows := all(hist.doc, "history-row"); len(rows) != 0 {
		t.Errorf("another tenant's reviewer sees %d history rows", len(rows))
	}
	if got := e.reload(p.ID); got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
		t.Errorf("after foreign attempts: status %s, %d decisions", got.Status, len(got.Decisions))
	}
}
