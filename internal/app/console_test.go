package app_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/countersign/countersign/internal/apitest"
	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/web/session"
)

// These tests drive the console through the server exactly as
// cmd/countersign assembles it (app.Open), on a real SQLite file, with a
// browser-like client: a cookie jar, Accept: text/html, no automatic
// redirects. Every HTML response is checked for the security headers.

var consoleStart = time.Date(2026, 9, 1, 9, 0, 0, 0, time.UTC)

type console struct {
	t     *testing.T
	db    string
	cfg   app.Config
	clock *models.FixedClock
	app   *app.App
	srv   *httptest.Server
	creds app.DemoCredentials
}

// cheapPasswordHash is the smallest argon2id cost: these tests check the
// console, not the hash's strength, and set it the way an operator would
// (app.Config.PasswordHash, the serve flag --password-hash).
var cheapPasswordHash = secret.PasswordParams{MemoryKiB: 64, Time: 1, Threads: 1}

func openConsole(t *testing.T, mutate ...func(*app.Config)) *console {
	t.Helper()
	c := &console{t: t, db: "sqlite://" + filepath.Join(t.TempDir(), "console.db"), clock: models.NewFixedClock(consoleStart)}
	c.cfg = app.Config{DB: c.db, Clock: c.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DefaultTenant: "demo", PasswordHash: cheapPasswordHash}
	for _, m := range mutate {
		m(&c.cfg)
	}
	c.start()
	creds, err := c.app.SeedDemo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.creds = creds
	return c
}

// start opens the application over the console's database and serves it.
func (c *console) start() {
	c.t.Helper()
	a, err := app.Open(context.Background(), c.cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.app = a
	c.srv = httptest.NewServer(a.Server)
	c.t.Cleanup(func() {
		c.srv.Close()
		a.Close()
	})
}

// restart stops the server and the application and starts new ones over
// the same database, as a process restart would.
func (c *console) restart() {
	c.t.Helper()
	c.srv.Close()
	c.app.Close()
	c.start()
}

// user creates a user with a known password in the named tenant, creating
// the tenant when needed.
func (c *console) user(tenant, name string, role models.Role, password string) models.User {
	c.t.Helper()
	ctx := context.Background()
	t, err := c.app.Store.TenantByName(ctx, tenant)
	if models.IsCode(err, models.ENotFound) {
		t, err = c.app.Store.CreateTenant(ctx, tenant)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	h, err := c.app.Passwords.Hash(password)
	if err != nil {
		c.t.Fatal(err)
	}
	u, err := c.app.Store.CreateUser(ctx, t.ID, name, role, h)
	if err != nil {
		c.t.Fatal(err)
	}
	return u
}

type browser struct {
	c      *console
	jar    *cookiejar.Jar
	client *http.Client
	csrf   string // the page's CSRF token, from the last page that had one
	// from, when set, is the X-Forwarded-For of its script's requests
	// (postJSON): the client's address behind a trusted proxy.
	from string
}

func (c *console) browser() *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return &browser{c: c, jar: jar, client: &http.Client{
		Jar:           jar,
		Transport:     apitest.Transport(c.t, nil),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type page struct {
	status int
	header http.Header
	body   string
	doc    *html.Node
	res    *http.Response
}

// do sends a request like a browser would and checks the security headers
// of every HTML answer.
func (b *browser) do(method, path string, form url.Values, header ...string) page {
	b.c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.c.srv.URL+path, body)
	if err != nil {
		b.c.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := b.client.Do(req)
	if err != nil {
		b.c.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		b.c.t.Fatal(err)
	}
	p := page{status: res.StatusCode, header: res.Header, body: string(raw), res: res}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		checkSecurityHeaders(b.c.t, method+" "+path, res.Header)
		if p.doc, err = html.Parse(strings.NewReader(p.body)); err != nil {
			b.c.t.Fatal(err)
		}
		if m := find(p.doc, func(n *html.Node) bool { return n.Data == "meta" && attr(n, "name") == "csrf-token" }); m != nil {
			b.csrf = attr(m, "content")
		}
	}
	return p
}

func (b *browser) get(path string, header ...string) page { return b.do("GET", path, nil, header...) }

func (b *browser) post(path string, form url.Values, header ...string) page {
	return b.do("POST", path, form, header...)
}

// postForm posts with the page's CSRF token.
func (b *browser) postForm(path string, form url.Values) page {
	b.c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if b.csrf == "" {
		b.c.t.Fatal("no CSRF token seen yet")
	}
	form.Set(session.CSRFField, b.csrf)
	return b.post(path, form)
}

// login fills in and sends the sign-in form.
func (b *browser) login(org, user, password string, next ...string) page {
	b.c.t.Helper()
	p := b.get("/login")
	if p.status != http.StatusOK {
		b.c.t.Fatalf("GET /login: %d", p.status)
	}
	form := url.Values{"org": {org}, "username": {user}, "password": {password},
		"csrf_token": {inputValue(b.c.t, p.doc, "csrf_token")}}
	if len(next) > 0 {
		form.Set("next", next[0])
	}
	return b.post("/login", form)
}

func (b *browser) mustLogin(org, user, password string) {
	b.c.t.Helper()
	p := b.login(org, user, password)
	if p.status != http.StatusSeeOther {
		b.c.t.Fatalf("sign-in as %s: status %d: %s", user, p.status, testid(p.doc, "login-error"))
	}
	// Load a page to learn the session's CSRF token.
	if r := b.get("/admin/reviewers"); r.status != http.StatusOK && r.status != http.StatusForbidden {
		b.c.t.Fatalf("after sign-in: %d", r.status)
	}
}

func (b *browser) cookie(name string) string {
	u, _ := url.Parse(b.c.srv.URL)
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

func (b *browser) setCookie(name, value string) {
	u, _ := url.Parse(b.c.srv.URL)
	b.jar.SetCookies(u, []*http.Cookie{{Name: name, Value: value, Path: "/"}})
}

func checkSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
		"X-Frame-Options":            "DENY",
		"Referrer-Policy":            "same-origin",
		"X-Content-Type-Options":     "nosniff",
		"Cache-Control":              "no-store",
		"Cross-Origin-Opener-Policy": "same-origin",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got, v)
		}
	}
	if h.Get("Permissions-Policy") == "" {
		t.Errorf("%s: no Permissions-Policy", what)
	}
}

// ---- HTML helpers ----------------------------------------------------------

func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if n == nil {
		return nil
	}
	if n.Type == html.ElementNode && match(n) {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, match); f != nil {
			return f
		}
	}
	return nil
}

func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	if n != nil {
		walk(n)
	}
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func textOf(n *html.Node) string {
	if n == nil {
		return ""
	}
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(sb.String()), " ")
}

// testid returns the text of the first element with that data-testid.
func testid(doc *html.Node, id string) string {
	return textOf(find(doc, func(n *html.Node) bool { return attr(n, "data-testid") == id }))
}

func inputValue(t *testing.T, doc *html.Node, name string) string {
	t.Helper()
	n := find(doc, func(n *html.Node) bool { return n.Data == "input" && attr(n, "name") == name })
	if n == nil {
		t.Fatalf("no input %q", name)
	}
	return attr(n, "value")
}

func setCookieNamed(res *http.Response, name string) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func wantStatus(t *testing.T, what string, p page, want int) {
	t.Helper()
	if p.status != want {
		t.Fatalf("%s: status %d, want %d\n%s", what, p.status, want, p.body)
	}
}

// ---- Sign-in ---------------------------------------------------------------

func TestLoginSetsAHardenedCookie(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		c := openConsole(t, func(cfg *app.Config) { cfg.Secure = secure })
		b := c.browser()
		p := b.get("/login")
		wantStatus(t, "GET /login", p, http.StatusOK)
		if got := inputValue(t, p.doc, "org"); got != "demo" {
			t.Errorf("organization pre-filled with %q, want demo", got)
		}
		lc := setCookieNamed(p.res, session.LoginCookieName)
		if lc == nil || !lc.HttpOnly || lc.Secure != secure || lc.SameSite != http.SameSiteLaxMode || lc.MaxAge <= 0 {
			t.Errorf("secure=%v: login cookie %+v", secure, lc)
		}
		form := url.Values{"org": {"demo"}, "username": {"alice"}, "password": {c.creds.ReviewerPassword},
			"csrf_token": {inputValue(t, p.doc, "csrf_token")}}
		p = b.post("/login", form)
		wantStatus(t, "POST /login", p, http.StatusSeeOther)
		if got := p.header.Get("Location"); got != "/" {
			t.Errorf("Location = %q, want /", got)
		}
		sc := setCookieNamed(p.res, session.CookieName)
		if sc == nil {
			t.Fatal("no session cookie")
		}
		if !sc.HttpOnly || sc.Path != "/" || sc.SameSite != http.SameSiteLaxMode || sc.Secure != secure {
			t.Errorf("secure=%v: session cookie HttpOnly=%v Path=%q SameSite=%v Secure=%v",
				secure, sc.HttpOnly, sc.Path, sc.SameSite, sc.Secure)
		}
		if sc.MaxAge != 0 || !sc.Expires.IsZero() {
			t.Errorf("session cookie outlives the browser: MaxAge=%d Expires=%v", sc.MaxAge, sc.Expires)
		}
		if strings.Contains(sc.Value, c.creds.ReviewerPassword) || len(sc.Value) < 64 {
			t.Errorf("session cookie value looks wrong: %q", sc.Value)
		}
		if lc := setCookieNamed(p.res, session.LoginCookieName); lc == nil || lc.MaxAge >= 0 {
			t.Errorf("the login cookie was not dropped at sign-in: %+v", lc)
		}
		if secure && p.header.Get("Strict-Transport-Security") == "" {
			t.Error("no HSTS with Secure")
		}
	}
}

func TestSignInRotatesTheSession(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	alice := c.browser()
	alice.mustLogin("demo", "alice", c.creds.ReviewerPassword)
	aliceID := alice.cookie(session.CookieName)
	if aliceID == "" {
		t.Fatal("no session cookie")
	}

	// A browser that holds someone's session cookie (planted, or left
	// behind) signs in: it gets a new session id and the old one ends.
	b := c.browser()
	p := b.get("/login")
	token := inputValue(t, p.doc, "csrf_token")
	b.setCookie(session.CookieName, aliceID)
	p = b.post("/login", url.Values{"org": {"demo"}, "username": {"admin"}, "password": {c.creds.AdminPassword},
		"csrf_token": {token}})
	wantStatus(t, "sign-in over an existing session", p, http.StatusSeeOther)
	newID := b.cookie(session.CookieName)
	if newID == "" || newID == aliceID {
		t.Fatalf("session id not rotated at sign-in")
	}
	if r := b.get("/admin/agents"); r.status != http.StatusOK || !strings.Contains(testid(r.doc, "whoami"), "admin") {
		t.Errorf("the new session is not the admin's: %d %q", r.status, testid(r.doc, "whoami"))
	}
	if r := alice.get("/admin/reviewers"); r.status != http.StatusSeeOther {
		t.Errorf("the replaced session still works: %d", r.status)
	}
}

func TestLoginFailuresLookAlike(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	c.user("demo", "dora", models.RoleReviewer, "dora-password-1")
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	var doraID string
	for _, u := range mustUsers(t, c) {
		if u.Name == "dora" {
			doraID = u.ID
		}
	}
	wantStatus(t, "disable dora", admin.postForm("/admin/reviewers/"+doraID+"/disable", nil), http.StatusSeeOther)

	var first string
	for name, try := range map[string][3]string{
		"wrong password": {"demo", "alice", "not-the-password"},
		"unknown user":   {"demo", "nobody", c.creds.ReviewerPassword},
		"unknown org":    {"nowhere", "alice", c.creds.ReviewerPassword},
		"disabled user":  {"demo", "dora", "dora-password-1"},
	} {
		b := c.browser()
		p := b.login(try[0], try[1], try[2])
		wantStatus(t, name, p, http.StatusUnauthorized)
		msg := testid(p.doc, "login-error")
		if msg != "wrong organization, username or password" {
			t.Errorf("%s: message %q", name, msg)
		}
		if first == "" {
			first = msg
		} else if msg != first {
			t.Errorf("%s: message %q differs from %q", name, msg, first)
		}
		if b.cookie(session.CookieName) != "" {
			t.Errorf("%s: a session cookie was set", name)
		}
		// The form keeps what was typed, except the password.
		if got := inputValue(t, p.doc, "username"); got != try[1] {
			t.Errorf("%s: username field %q", name, got)
		}
		if got := inputValue(t, p.doc, "password"); got != "" {
			t.Errorf("%s: the password was echoed back", name)
		}
	}
}

func mustUsers(t *testing.T, c *console) []models.User {
	t.Helper()
	ctx := context.Background()
	tn, err := c.app.Store.TenantByName(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	admin, _, err := c.app.Store.UserCredentials(ctx, tn.ID, "admin")
	if err != nil {
		t.Fatal(err)
	}
	us, err := c.app.Auth.ListUsers(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	return us
}

func TestLoginRateLimit(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.browser()
	for range 5 {
		wantStatus(t, "failure", b.login("demo", "alice", "wrong-password"), http.StatusUnauthorized)
	}
	p := b.login("demo", "alice", c.creds.ReviewerPassword)
	wantStatus(t, "sixth attempt, right password", p, http.StatusTooManyRequests)
	msg := testid(p.doc, "login-error")
	if !strings.Contains(msg, "Too many failed sign-in attempts") || !strings.Contains(msg, "Try again in 2 seconds") {
		t.Errorf("message %q", msg)
	}
	if p.header.Get("Retry-After") != "2" {
		t.Errorf("Retry-After = %q, want 2", p.header.Get("Retry-After"))
	}
	if b.cookie(session.CookieName) != "" {
		t.Error("signed in despite the limit")
	}
	c.clock.Advance(2 * time.Second)
	wantStatus(t, "after the wait", b.login("demo", "alice", c.creds.ReviewerPassword), http.StatusSeeOther)
}

func TestSessionTimeouts(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.browser()
	b.mustLogin("demo", "admin", c.creds.AdminPassword)

	// Requests every 29 minutes keep the session until its absolute end.
	end := consoleStart.Add(12 * time.Hour)
	for c.clock.Now().Add(29 * time.Minute).Before(end) {
		c.clock.Advance(29 * time.Minute)
		wantStatus(t, "active session", b.get("/admin/agents"), http.StatusOK)
	}
	c.clock.Set(end)
	p := b.get("/admin/agents")
	wantStatus(t, "past the absolute timeout", p, http.StatusSeeOther)
	if got := p.header.Get("Location"); got != "/login?next=%2Fadmin%2Fagents" {
		t.Errorf("Location = %q", got)
	}

	// Idle: 30 minutes without a request end it.
	b.mustLogin("demo", "admin", c.creds.AdminPassword)
	c.clock.Advance(30*time.Minute - time.Millisecond)
	wantStatus(t, "just inside the idle timeout", b.get("/admin/agents"), http.StatusOK)
	c.clock.Advance(30 * time.Minute)
	wantStatus(t, "idle for 30 minutes", b.get("/admin/agents"), http.StatusSeeOther)
}

// TestBackgroundRefreshIsNotActivity: an open pending tab refreshes its list
// by itself; that must not keep an unattended session alive.
func TestBackgroundRefreshIsNotActivity(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.browser()
	b.mustLogin("demo", "alice", c.creds.ReviewerPassword)

	// The person looks at the list ten minutes in...
	c.clock.Advance(10 * time.Minute)
	wantStatus(t, "the person opens the list", b.get("/"), http.StatusOK)
	// ...then leaves the tab open: it refreshes every few minutes.
	for range 5 {
		c.clock.Advance(5 * time.Minute)
		wantStatus(t, "background refresh", b.get("/pending/rows"), http.StatusOK)
	}
	// 29 minutes and 59 seconds after the person's last request: still in.
	c.clock.Advance(4*time.Minute + 59*time.Second)
	wantStatus(t, "background refresh just inside the idle timeout", b.get("/pending/rows"), http.StatusOK)
	// 30 minutes after it: over, for the refresh and for the person.
	c.clock.Advance(time.Second)
	if p := b.get("/pending/rows"); p.status != http.StatusUnauthorized && p.status != http.StatusSeeOther {
		t.Errorf("background refresh after the idle timeout: status %d, want the session ended", p.status)
	}
	wantStatus(t, "the page after the idle timeout", b.get("/"), http.StatusSeeOther)
}

func TestLogoutRevokesTheSession(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.browser()
	b.mustLogin("demo", "admin", c.creds.AdminPassword)
	id := b.cookie(session.CookieName)
	p := b.postForm("/logout", nil)
	wantStatus(t, "POST /logout", p, http.StatusSeeOther)
	if got := p.header.Get("Location"); got != "/login" {
		t.Errorf("Location = %q", got)
	}
	if sc := setCookieNamed(p.res, session.CookieName); sc == nil || sc.MaxAge >= 0 {
		t.Errorf("the cookie was not expired: %+v", sc)
	}
	// The old cookie, replayed, no longer works.
	replay := c.browser()
	replay.setCookie(session.CookieName, id)
	wantStatus(t, "replayed cookie", replay.get("/admin/agents"), http.StatusSeeOther)
}

func TestSessionsSurviveRestart(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.browser()
	b.mustLogin("demo", "admin", c.creds.AdminPassword)
	wantStatus(t, "before the restart", b.get("/admin/agents"), http.StatusOK)
	c.restart()
	p := b.get("/admin/agents")
	wantStatus(t, "after the restart", p, http.StatusOK)
	if !strings.Contains(testid(p.doc, "whoami"), "admin") {
		t.Errorf("whoami = %q", testid(p.doc, "whoami"))
	}
}

func TestConfiguredCookieKeys(t *testing.T) {
	t.Parallel()
	keys := func(cfg *app.Config) {
		cfg.CookieHashKey = []byte(strings.Repeat("h", 64))
		cfg.CookieBlockKey = []byte(strings.Repeat("b", 32))
	}
	c := openConsole(t, keys)
	b := c.browser()
	b.mustLogin("demo", "admin", c.creds.AdminPassword)
	// Without the configured keys (the database's instead), the cookie
	// does not decode: the keys in use really are the configured ones.
	c.cfg.CookieHashKey, c.cfg.CookieBlockKey = nil, nil
	c.restart()
	wantStatus(t, "other keys", b.get("/admin/agents"), http.StatusSeeOther)

	c.cfg.CookieHashKey = []byte(strings.Repeat("h", 64))
	if _, err := app.Open(context.Background(), c.cfg); err == nil {
		t.Error("app.Open accepted a hash key without a block key")
	}
}

// ---- Redirects -------------------------------------------------------------

func TestNextIsLocalOnly(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	for next, want := range map[string]string{
		"/history?tool=refund_order": "/history?tool=refund_order",
		"/proposals/prop_1":          "/proposals/prop_1",
		"//evil.example":             "/",
		"//evil.example/path":        "/",
		"https://evil":               "/",
		"http://evil.example/":       "/",
		"/\\evil.example":            "/",
		"javascript:alert(1)":        "/",
		"evil":                       "/",
		"/login":                     "/",
		"":                           "/",
	} {
		b := c.browser()
		p := b.login("demo", "alice", c.creds.ReviewerPassword, next)
		wantStatus(t, "login next="+next, p, http.StatusSeeOther)
		if got := p.header.Get("Location"); got != want {
			t.Errorf("next=%q: Location %q, want %q", next, got, want)
		}
	}
	// The form does not even carry a foreign next.
	p := c.browser().get("/login?next=" + url.QueryEscape("//evil.example"))
	if n := find(p.doc, func(n *html.Node) bool { return attr(n, "name") == "next" }); n != nil {
		t.Errorf("foreign next kept in the form: %q", attr(n, "value"))
	}
}

func TestAnonymousRequests(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	b := c.browser()
	p := b.get("/admin/reviewers?x=1")
	wantStatus(t, "page", p, http.StatusSeeOther)
	if got := p.header.Get("Location"); got != "/login?next=%2Fadmin%2Freviewers%3Fx%3D1" {
		t.Errorf("Location = %q", got)
	}
	p = b.get("/admin/agents", "HX-Request", "true", "HX-Current-URL", c.srv.URL+"/admin/agents")
	wantStatus(t, "htmx", p, http.StatusUnauthorized)
	if got := p.header.Get("HX-Redirect"); got != "/login?next=%2Fadmin%2Fagents" {
		t.Errorf("HX-Redirect = %q", got)
	}
	p = b.get("/admin/agents", "Accept", "application/json")
	wantStatus(t, "script", p, http.StatusUnauthorized)
	p = b.post("/admin/agents", url.Values{"name": {"x"}})
	wantStatus(t, "form post", p, http.StatusSeeOther)
	if got := p.header.Get("Location"); got != "/login" {
		t.Errorf("Location = %q", got)
	}
}

// ---- CSRF ------------------------------------------------------------------

func TestCSRF(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	ctx := context.Background()
	b := c.browser()
	b.mustLogin("demo", "admin", c.creds.AdminPassword)
	agents, err := c.app.Auth.ListAgents(ctx, mustAdmin(t, c))
	if err != nil || len(agents) != 1 {
		t.Fatalf("agents %v %v", agents, err)
	}
	agentID := agents[0].ID
	aliceID := ""
	for _, u := range mustUsers(t, c) {
		if u.Name == "alice" {
			aliceID = u.ID
		}
	}

	for _, tc := range []struct {
		path string
		form url.Values
	}{
		{"/logout", nil},
		{"/admin/agents", url.Values{"name": {"sneaky"}}},
		{"/admin/agents/" + agentID + "/revoke", nil},
		{"/admin/reviewers", url.Values{"name": {"sneaky"}, "role": {"admin"}}},
		{"/admin/reviewers/" + aliceID + "/disable", nil},
		{"/admin/reviewers/" + aliceID + "/password", nil},
	} {
		for name, token := range map[string]string{"missing": "", "wrong": otherFirstChar(b.csrf), "other": "nope"} {
			form := url.Values{}
			for k, v := range tc.form {
				form[k] = v
			}
			if token != "" {
				form.Set("csrf_token", token)
			}
			p := b.post(tc.path, form)
			wantStatus(t, name+" token on "+tc.path, p, http.StatusForbidden)
			if msg := testid(p.doc, "error-message"); !strings.Contains(msg, "security token") {
				t.Errorf("%s: message %q", tc.path, msg)
			}
		}
		// A wrong header is refused too, even with the right form field.
		form := url.Values{"csrf_token": {b.csrf}}
		p := b.post(tc.path, form, "X-CSRF-Token", "wrong")
		wantStatus(t, "wrong header on "+tc.path, p, http.StatusForbidden)
		// A request the browser marks as cross-site is refused.
		p = b.post(tc.path, url.Values{"csrf_token": {b.csrf}}, "Sec-Fetch-Site", "cross-site")
		wantStatus(t, "cross-site "+tc.path, p, http.StatusForbidden)
		// The right token in the query string, where logs and the history
		// keep it, is not taken.
		p = b.post(tc.path+"?csrf_token="+url.QueryEscape(b.csrf), tc.form)
		wantStatus(t, "token in the query on "+tc.path, p, http.StatusForbidden)
	}

	// Nothing changed: still signed in, one agent, active; no new users;
	// alice still signs in with her password.
	wantStatus(t, "still signed in", b.get("/admin/agents"), http.StatusOK)
	agents, _ = c.app.Auth.ListAgents(ctx, mustAdmin(t, c))
	if len(agents) != 1 || agents[0].RevokedAt != nil {
		t.Errorf("agents changed: %+v", agents)
	}
	if us := mustUsers(t, c); len(us) != 2 {
		t.Errorf("users changed: %+v", us)
	}
	wantStatus(t, "alice", c.browser().login("demo", "alice", c.creds.ReviewerPassword), http.StatusSeeOther)

	// The header alone is enough (htmx).
	p := b.post("/admin/agents/"+agentID+"/revoke", url.Values{}, "X-CSRF-Token", b.csrf, "HX-Request", "true")
	wantStatus(t, "revoke with the header", p, http.StatusOK)
	if got := p.header.Get("HX-Redirect"); got != "/admin/agents?revoked=1" {
		t.Errorf("HX-Redirect = %q", got)
	}

	// The sign-in form needs its own token, bound to its cookie.
	fresh := c.browser()
	lp := fresh.get("/login")
	token := inputValue(t, lp.doc, "csrf_token")
	for name, form := range map[string]url.Values{
		"missing": {"org": {"demo"}, "username": {"alice"}, "password": {c.creds.ReviewerPassword}},
		"wrong": {"org": {"demo"}, "username": {"alice"}, "password": {c.creds.ReviewerPassword},
			"csrf_token": {token + "x"}},
	} {
		p := fresh.post("/login", form)
		wantStatus(t, "login with "+name+" token", p, http.StatusForbidden)
		if fresh.cookie(session.CookieName) != "" {
			t.Errorf("%s login token: signed in", name)
		}
	}
	other := c.browser() // the right token, but not this browser's cookie
	p = other.post("/login", url.Values{"org": {"demo"}, "username": {"alice"},
		"password": {c.creds.ReviewerPassword}, "csrf_token": {token}})
	wantStatus(t, "login token from another browser", p, http.StatusForbidden)
}

func mustAdmin(t *testing.T, c *console) models.User {
	t.Helper()
	for _, u := range mustUsers(t, c) {
		if u.Name == "admin" {
			return u
		}
	}
	t.Fatal("no admin")
	return models.User{}
}

// ---- Headers on every HTML response ------------------------------------------

func TestErrorPagesAreHTMLWithHeaders(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	anon := c.browser()
	p := anon.get("/no/such/page")
	wantStatus(t, "404", p, http.StatusNotFound)
	if testid(p.doc, "error-status") != "404" || testid(p.doc, "error-message") != "There is no page at this address." {
		t.Errorf("404 page: %q %q", testid(p.doc, "error-status"), testid(p.doc, "error-message"))
	}
	p = anon.post("/logout", url.Values{})
	wantStatus(t, "anonymous logout", p, http.StatusSeeOther)

	alice := c.browser()
	alice.mustLogin("demo", "alice", c.creds.ReviewerPassword)
	for _, path := range []string{"/admin/agents", "/admin/reviewers"} {
		p := alice.get(path)
		wantStatus(t, "reviewer on "+path, p, http.StatusForbidden)
		if msg := testid(p.doc, "error-message"); !strings.Contains(msg, "administrators") {
			t.Errorf("403 message %q", msg)
		}
	}
	p = alice.postForm("/admin/agents", url.Values{"name": {"x"}})
	wantStatus(t, "reviewer creating an agent", p, http.StatusForbidden)
	p = alice.get("/admin/reviewers/nope")
	wantStatus(t, "unknown admin path", p, http.StatusNotFound)

	// The API keeps its JSON errors.
	res, err := apitest.Client(t).Get(c.srv.URL + "/api/v1/nope")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("API error Content-Type %q", ct)
	}
	// Assets are cacheable for a year under their hashed URLs; pages are
	// not cacheable at all (checked on every page above).
	lp := anon.get("/login")
	css := attr(find(lp.doc, func(n *html.Node) bool { return n.Data == "link" && attr(n, "rel") == "stylesheet" }), "href")
	if !strings.HasPrefix(css, "/static/css/app.") {
		t.Fatalf("stylesheet %q", css)
	}
	res, err = http.Get(c.srv.URL + css)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Cache-Control"), "immutable") {
		t.Errorf("asset: %d, Cache-Control %q", res.StatusCode, res.Header.Get("Cache-Control"))
	}
}

// ---- Administration -----------------------------------------------------------

func TestAgentKeyShownOnceAndRevocable(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	ctx := context.Background()
	b := c.browser()
	b.mustLogin("demo", "admin", c.creds.AdminPassword)
	p := b.get("/admin/agents")
	wantStatus(t, "agents", p, http.StatusOK)
	if n := len(findAll(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "agent-row" })); n != 1 {
		t.Errorf("%d agent rows, want the demo agent", n)
	}
	aliceID := ""
	for _, u := range mustUsers(t, c) {
		if u.Name == "alice" {
			aliceID = u.ID
		}
	}

	p = b.postForm("/admin/agents", url.Values{"name": {"billing-bot"}, "owner": {aliceID}})
	wantStatus(t, "create agent", p, http.StatusOK)
	key := attr(find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "agent-key" }), "value")
	if !strings.HasPrefix(key, secret.APIKeyPrefix) {
		t.Fatalf("key %q", key)
	}
	if attr(find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "copy-key" }), "data-copy") != key {
		t.Error("no copy button for the key")
	}

	// The key works against the API.
	agent, err := c.app.Protocol.AuthenticateAgent(ctx, key)
	if err != nil || agent.Name != "billing-bot" || agent.OwnerUserID != aliceID {
		t.Fatalf("AuthenticateAgent: %+v %v", agent, err)
	}
	if got := apiStatus(t, c, key); got != http.StatusOK {
		t.Errorf("API with the new key: %d", got)
	}

	// The list shows it, with its owner, but never the key again.
	p = b.get("/admin/agents")
	if strings.Contains(p.body, key) {
		t.Error("the key is shown again")
	}
	if !strings.Contains(p.body, "billing-bot") || !strings.Contains(p.body, "alice") {
		t.Error("the list lacks the new agent or its owner")
	}

	// A taken name is refused on the form.
	p = b.postForm("/admin/agents", url.Values{"name": {"billing-bot"}})
	wantStatus(t, "duplicate", p, http.StatusConflict)
	if msg := testid(p.doc, "form-error"); !strings.Contains(msg, "already exists") {
		t.Errorf("form error %q", msg)
	}

	p = b.postForm("/admin/agents/"+agent.ID+"/revoke", nil)
	wantStatus(t, "revoke", p, http.StatusSeeOther)
	if _, err := c.app.Protocol.AuthenticateAgent(ctx, key); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("revoked key: %v", err)
	}
	if got := apiStatus(t, c, key); got != http.StatusUnauthorized {
		t.Errorf("API with the revoked key: %d", got)
	}
	p = b.get("/admin/agents?revoked=1")
	if !strings.Contains(testid(p.doc, "admin-notice"), "revoked") {
		t.Errorf("notice %q", testid(p.doc, "admin-notice"))
	}
}

func apiStatus(t *testing.T, c *console, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", c.srv.URL+"/api/v1/proposals", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := apitest.Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	ctx := context.Background()
	c.user("globex", "gadmin", models.RoleAdmin, "globex-password-1")
	demoAgents, err := c.app.Auth.ListAgents(ctx, mustAdmin(t, c))
	if err != nil || len(demoAgents) != 1 {
		t.Fatal(err)
	}
	demoAgent := demoAgents[0]
	var alice models.User
	for _, u := range mustUsers(t, c) {
		if u.Name == "alice" {
			alice = u
		}
	}
	aliceBrowser := c.browser()
	aliceBrowser.mustLogin("demo", "alice", c.creds.ReviewerPassword)

	g := c.browser()
	g.mustLogin("globex", "gadmin", "globex-password-1")
	p := g.get("/admin/agents")
	wantStatus(t, "globex agents", p, http.StatusOK)
	if strings.Contains(p.body, demoAgent.Name) || strings.Contains(p.body, demoAgent.ID) {
		t.Error("globex's admin sees demo's agent")
	}
	p = g.get("/admin/reviewers")
	if strings.Contains(p.body, "alice") || strings.Contains(p.body, alice.ID) {
		t.Error("globex's admin sees demo's reviewers")
	}
	for _, path := range []string{
		"/admin/agents/" + demoAgent.ID + "/revoke",
		"/admin/reviewers/" + alice.ID + "/disable",
		"/admin/reviewers/" + alice.ID + "/password",
	} {
		p := g.postForm(path, nil)
		wantStatus(t, "globex admin on "+path, p, http.StatusNotFound)
	}
	p = g.postForm("/admin/agents", url.Values{"name": {"spy"}, "owner": {alice.ID}})
	wantStatus(t, "owner from another tenant", p, http.StatusNotFound)

	// Nothing changed in demo.
	if _, err := c.app.Protocol.AuthenticateAgent(ctx, c.creds.AgentKey); err != nil {
		t.Errorf("demo's agent was revoked: %v", err)
	}
	wantStatus(t, "alice's session", aliceBrowser.get("/admin/reviewers"), http.StatusForbidden)
	wantStatus(t, "alice's password", c.browser().login("demo", "alice", c.creds.ReviewerPassword), http.StatusSeeOther)
	// Signing in to globex with demo's credentials fails.
	wantStatus(t, "cross-tenant sign-in", c.browser().login("globex", "alice", c.creds.ReviewerPassword), http.StatusUnauthorized)
}

func TestDisableReviewerEndsTheirSession(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	alice := c.browser()
	alice.mustLogin("demo", "alice", c.creds.ReviewerPassword)
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)

	p := admin.get("/admin/reviewers")
	rows := findAll(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "reviewer-row" })
	if len(rows) != 2 {
		t.Fatalf("%d reviewer rows", len(rows))
	}
	var aliceID, adminID string
	for _, r := range rows {
		switch name := testid(r, "reviewer-name"); {
		case strings.HasPrefix(name, "alice"):
			aliceID = attr(r, "data-user-id")
		case strings.HasPrefix(name, "admin"):
			adminID = attr(r, "data-user-id")
			if find(r, func(n *html.Node) bool { return attr(n, "data-testid") == "reviewer-disable" }) != nil {
				t.Error("the admin is offered to disable themselves")
			}
		}
	}

	p = admin.postForm("/admin/reviewers/"+aliceID+"/disable", nil)
	wantStatus(t, "disable", p, http.StatusSeeOther)
	wantStatus(t, "alice after being disabled", alice.get("/admin/reviewers"), http.StatusSeeOther)
	wantStatus(t, "alice signing in", c.browser().login("demo", "alice", c.creds.ReviewerPassword), http.StatusUnauthorized)
	p = admin.get("/admin/reviewers?done=disabled")
	if !strings.Contains(p.body, "Disabled") {
		t.Error("the list does not show alice disabled")
	}

	wantStatus(t, "enable", admin.postForm("/admin/reviewers/"+aliceID+"/enable", nil), http.StatusSeeOther)
	wantStatus(t, "alice signing in again", c.browser().login("demo", "alice", c.creds.ReviewerPassword), http.StatusSeeOther)

	// An admin cannot disable themselves.
	p = admin.postForm("/admin/reviewers/"+adminID+"/disable", nil)
	wantStatus(t, "self-disable", p, http.StatusForbidden)
	wantStatus(t, "admin still signed in", admin.get("/admin/reviewers"), http.StatusOK)
}

func TestCreateReviewerAndResetPassword(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)

	p := admin.postForm("/admin/reviewers", url.Values{"name": {"erin"}, "role": {"reviewer"}})
	wantStatus(t, "create", p, http.StatusOK)
	pw := attr(find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "new-password" }), "value")
	if len(pw) < 12 {
		t.Fatalf("password %q", pw)
	}
	erin := c.browser()
	erin.mustLogin("demo", "erin", pw)

	p = admin.postForm("/admin/reviewers", url.Values{"name": {" erin"}, "role": {"reviewer"}})
	wantStatus(t, "bad name", p, http.StatusBadRequest)
	if testid(p.doc, "form-error") == "" {
		t.Error("no form error")
	}

	var erinID string
	for _, u := range mustUsers(t, c) {
		if u.Name == "erin" {
			erinID = u.ID
		}
	}
	p = admin.postForm("/admin/reviewers/"+erinID+"/password", nil)
	wantStatus(t, "reset", p, http.StatusOK)
	pw2 := attr(find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "new-password" }), "value")
	if pw2 == "" || pw2 == pw {
		t.Fatalf("new password %q", pw2)
	}
	wantStatus(t, "erin's old session", erin.get("/admin/reviewers"), http.StatusSeeOther)
	wantStatus(t, "old password", c.browser().login("demo", "erin", pw), http.StatusUnauthorized)
	wantStatus(t, "new password", c.browser().login("demo", "erin", pw2), http.StatusSeeOther)
}

// otherFirstChar returns tok with its first character changed: the same
// length and alphabet, never equal to tok.
func otherFirstChar(tok string) string {
	first := byte('x')
	if tok[0] == first {
		first = 'y'
	}
	return string(first) + tok[1:]
}

// An open proposal page refreshes itself too (GET /proposals/:id/live);
// that is no activity either.
func TestProposalLiveRefreshIsNotActivity(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	p := c.propose("ord_1003", 1000)
	b := c.browser()
	b.mustLogin("demo", "alice", c.creds.ReviewerPassword)
	c.clock.Advance(10 * time.Minute)
	wantStatus(t, "the person opens the proposal", b.get("/proposals/"+p.ID), http.StatusOK)
	for range 5 {
		c.clock.Advance(5 * time.Minute)
		if r := b.get("/proposals/" + p.ID + "/live"); r.status != http.StatusOK && r.status != http.StatusNoContent {
			t.Fatalf("live refresh: status %d", r.status)
		}
	}
	c.clock.Advance(5 * time.Minute)
	if r := b.get("/proposals/" + p.ID + "/live"); r.status != http.StatusUnauthorized && r.status != http.StatusSeeOther {
		t.Errorf("live refresh after the idle timeout: status %d, want the session ended", r.status)
	}
}
