package session

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
)

// Cookie names. The session cookie carries only the random session id; the
// login cookie carries only the sign-in form's CSRF token. Both are
// authenticated and encrypted with the same keys; securecookie binds each
// value to its cookie name, so one cannot stand in for the other.
const (
	CookieName      = "countersign_session"
	LoginCookieName = "countersign_login"
	// DeviceCookieName remembers the accounts that signed in from this
	// browser (auth.Device), so that their sign-ins are exempt from the
	// per-account and per-address guessing limits. Sent to /login only.
	DeviceCookieName = "countersign_device"
)

// DefaultDeviceLifetime is how long a browser stays remembered after its
// last successful sign-in.
const DefaultDeviceLifetime = 90 * 24 * time.Hour

// deviceKey is the device cookie's one value: auth.Device as JSON.
const deviceKey = "device"

// Form field and header that carry the CSRF token.
const (
	CSRFField  = "csrf_token"
	CSRFHeader = "X-CSRF-Token"
)

// DefaultLoginTokenLifetime bounds how long a sign-in form stays usable.
const DefaultLoginTokenLifetime = time.Hour

// sidKey is the session cookie's one value.
const sidKey = "sid"

// csrfKey is the login cookie's one value.
const csrfKey = "csrf"

// Sessions is what the manager needs from the domain (*auth.Service).
type Sessions interface {
	// Session loads a live session, sliding its idle timeout when active
	// (EUnauthenticated when there is none).
	Session(ctx context.Context, rawID string, active bool) (models.Session, error)
	// Logout ends a session.
	Logout(ctx context.Context, rawID string) error
}

// Config configures a Manager.
type Config struct {
	// Secure marks the cookies Secure: set it whenever the console is
	// reached over TLS, directly or through a proxy.
	Secure bool
	// HashKey authenticates the cookies (HMAC-SHA256; at least 32 bytes,
	// 64 recommended); BlockKey encrypts them (AES; 16, 24 or 32 bytes).
	// Both are required and must stay the same across restarts and
	// instances, or every session ends.
	HashKey, BlockKey []byte
	// Lifetime is the longest a session cookie is accepted, matching the
	// sessions' absolute timeout; auth.DefaultAbsoluteTimeout when 0.
	Lifetime time.Duration
	// LoginTokenLifetime bounds the sign-in form's token;
	// DefaultLoginTokenLifetime when 0.
	LoginTokenLifetime time.Duration
	// DeviceLifetime bounds the remembered-device cookie;
	// DefaultDeviceLifetime when 0.
	DeviceLifetime time.Duration
}

// Manager keeps console sessions in cookies and guards console routes.
type Manager struct {
	svc     Sessions
	session *sessions.CookieStore
	login   *sessions.CookieStore
	device  *sessions.CookieStore
}

// NewManager returns a Manager over svc. It fails when a key is missing or
// has the wrong length.
func NewManager(svc Sessions, cfg Config) (*Manager, error) {
	if len(cfg.HashKey) < 32 {
		return nil, fmt.Errorf("session: the cookie authentication key must be at least 32 bytes, got %d", len(cfg.HashKey))
	}
	switch len(cfg.BlockKey) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("session: the cookie encryption key must be 16, 24 or 32 bytes, got %d", len(cfg.BlockKey))
	}
	lifetime := cfg.Lifetime
	if lifetime <= 0 {
		lifetime = auth.DefaultAbsoluteTimeout
	}
	loginLifetime := cfg.LoginTokenLifetime
	if loginLifetime <= 0 {
		loginLifetime = DefaultLoginTokenLifetime
	}
	newStore := func(path string, maxAge time.Duration) *sessions.CookieStore {
		cs := sessions.NewCookieStore(cfg.HashKey, cfg.BlockKey)
		// The codec refuses values older than this, whatever the cookie's
		// own expiry says; the server-side record is the real limit.
		cs.MaxAge(int(maxAge / time.Second))
		cs.Options = &sessions.Options{Path: path, MaxAge: int(maxAge / time.Second),
			HttpOnly: true, Secure: cfg.Secure, SameSite: http.SameSiteLaxMode}
		return cs
	}
	deviceLifetime := cfg.DeviceLifetime
	if deviceLifetime <= 0 {
		deviceLifetime = DefaultDeviceLifetime
	}
	m := &Manager{svc: svc, session: newStore("/", lifetime), login: newStore("/login", loginLifetime),
		device: newStore("/login", deviceLifetime)}
	// The session cookie has no Max-Age: it ends with the browser, and the
	// server ends the session sooner on its own. Lax, not Strict, so that a
	// link to a proposal in a chat or a mail opens signed in; every
	// state-changing request needs the CSRF token anyway.
	m.session.Options.MaxAge = 0
	return m, nil
}

// toSession is the request's view of a domain session. ID is the handle,
// never the raw id: handlers have no use for the cookie's secret.
func toSession(s models.Session) *Session {
	return &Session{ID: s.Handle, User: s.User, Tenant: s.Tenant, CSRF: s.CSRF, AMR: s.AMR,
		CreatedAt: s.CreatedAt, LastSeen: s.LastSeen, ExpiresAt: s.ExpiresAt}
}

// rawID returns the session id the request's cookie carries, or "" when
// there is no cookie or it does not decode with our keys.
func (m *Manager) rawID(r *http.Request) string {
	if _, err := r.Cookie(CookieName); err != nil {
		return ""
	}
	s, err := m.session.New(r, CookieName)
	if err != nil {
		return ""
	}
	id, _ := s.Values[sidKey].(string)
	return id
}

// expire tells the browser to drop a cookie.
func expire(c echo.Context, store *sessions.CookieStore, name string) {
	opts := *store.Options
	opts.MaxAge = -1
	http.SetCookie(c.Response(), sessions.NewCookie(name, "", &opts))
}

// Load attaches the signed-in user's session to the request when its cookie
// names a live one, and counts the request as the person's activity (it
// slides the idle timeout). A dead or undecodable cookie is dropped and the
// request goes on anonymously; only a database failure stops it.
func (m *Manager) Load(next echo.HandlerFunc) echo.HandlerFunc { return m.load(next, true) }

// LoadBackground is Load for the requests a page makes by itself — a live
// list's refresh, its event stream: they need the session but are not the
// person's activity, so an open tab left alone still reaches the idle
// timeout.
func (m *Manager) LoadBackground(next echo.HandlerFunc) echo.HandlerFunc { return m.load(next, false) }

func (m *Manager) load(next echo.HandlerFunc, active bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		if raw := m.rawID(c.Request()); raw != "" {
			s, err := m.svc.Session(c.Request().Context(), raw, active)
			switch {
			case err == nil:
				Set(c, toSession(s))
			case models.IsCode(err, models.EUnauthenticated):
				expire(c, m.session, CookieName)
			default:
				return err
			}
		} else if _, err := c.Request().Cookie(CookieName); err == nil {
			expire(c, m.session, CookieName)
		}
		return next(c)
	}
}

// RequireUser lets signed-in users through. Anyone else is sent to the
// sign-in page: a page request with a 303 that remembers where it was going,
// an htmx request with HX-Redirect (and 401), anything else — a script, an
// event stream — with 401 unauthenticated.
func (m *Manager) RequireUser(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if From(c) != nil {
			return next(c)
		}
		req := c.Request()
		if req.Header.Get("HX-Request") == "true" {
			back := ""
			if u, err := url.Parse(req.Header.Get("HX-Current-URL")); err == nil {
				back = SafeNext(u.RequestURI())
			}
			c.Response().Header().Set("HX-Redirect", LoginURL(back))
			return models.Errorf(models.EUnauthenticated, "Your session has ended. Sign in again.")
		}
		if acceptsHTML(req) && !strings.Contains(req.Header.Get(echo.HeaderAccept), "text/event-stream") {
			back := ""
			if req.Method == http.MethodGet || req.Method == http.MethodHead {
				back = req.URL.RequestURI()
			}
			return c.Redirect(http.StatusSeeOther, LoginURL(back))
		}
		return models.Errorf(models.EUnauthenticated, "Sign in first.")
	}
}

// RequireAdmin lets only admins through (after RequireUser); anyone else
// gets 403 forbidden.
func (m *Manager) RequireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		s := From(c)
		if s == nil {
			return models.Errorf(models.EUnauthenticated, "Sign in first.")
		}
		if s.User.Role != models.RoleAdmin {
			return models.Errorf(models.EForbidden, "This page is for administrators of %s.", s.Tenant.Name)
		}
		return next(c)
	}
}

// errCSRF is the answer to a state-changing request without the right token.
func errCSRF() error {
	return models.Errorf(models.EForbidden,
		"This request did not carry the page's security token, so nothing was changed. Reload the page and try again.")
}

// CSRF refuses every state-changing request (anything but GET, HEAD,
// OPTIONS) that does not carry the session's CSRF token, in the csrf_token
// form field or the X-CSRF-Token header (htmx), or that a browser marks as
// sent from another site. It runs after RequireUser, and before the handler
// can change anything.
func (m *Manager) CSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if safeMethod(c.Request().Method) {
			return next(c)
		}
		s := From(c)
		if s == nil || s.CSRF == "" || crossSite(c.Request()) || !tokenMatches(requestToken(c), s.CSRF) {
			return errCSRF()
		}
		return next(c)
	}
}

// LoginToken returns the sign-in form's CSRF token, from the login cookie
// when it holds a valid one, or a new one set in a fresh cookie.
func (m *Manager) LoginToken(c echo.Context) (string, error) {
	if t := m.loginCookieToken(c.Request()); t != "" {
		return t, nil
	}
	t, err := secret.RandomToken(32)
	if err != nil {
		return "", err
	}
	s, _ := m.login.New(c.Request(), LoginCookieName) // a bad old cookie is simply replaced
	s.Values = map[any]any{csrfKey: t}
	if err := m.login.Save(c.Request(), c.Response(), s); err != nil {
		return "", err
	}
	return t, nil
}

func (m *Manager) loginCookieToken(r *http.Request) string {
	if _, err := r.Cookie(LoginCookieName); err != nil {
		return ""
	}
	s, err := m.login.New(r, LoginCookieName)
	if err != nil {
		return ""
	}
	t, _ := s.Values[csrfKey].(string)
	return t
}

// LoginCSRF guards the sign-in form, which has no session yet: the form's
// csrf_token must equal the token in the signed login cookie (see
// LoginToken). Without it, another site could sign a browser in to an
// account of its choosing.
func (m *Manager) LoginCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if safeMethod(c.Request().Method) {
			return next(c)
		}
		want := m.loginCookieToken(c.Request())
		if want == "" || crossSite(c.Request()) || !tokenMatches(requestToken(c), want) {
			return models.Errorf(models.EForbidden,
				"The sign-in form has expired or did not come from this site, so nobody was signed in. Reload the sign-in page and try again.")
		}
		return next(c)
	}
}

// SignIn puts a new session in the browser: any session the browser had is
// ended first (the id always changes at sign-in), the login cookie is
// dropped, and the rest of the request sees the new session.
func (m *Manager) SignIn(c echo.Context, s models.Session) error {
	req := c.Request()
	if old := m.rawID(req); old != "" && old != s.ID {
		if err := m.svc.Logout(req.Context(), old); err != nil {
			return err
		}
	}
	cs, _ := m.session.New(req, CookieName)
	cs.Values = map[any]any{sidKey: s.ID}
	if err := m.session.Save(req, c.Response(), cs); err != nil {
		return err
	}
	expire(c, m.login, LoginCookieName)
	Set(c, toSession(s))
	return nil
}

// Device returns the browser's remembered device from its cookie, or the
// zero Device when there is none or it does not decode with our keys (or
// is older than the device lifetime).
func (m *Manager) Device(c echo.Context) auth.Device {
	r := c.Request()
	if _, err := r.Cookie(DeviceCookieName); err != nil {
		return auth.Device{}
	}
	s, err := m.device.New(r, DeviceCookieName)
	if err != nil {
		return auth.Device{}
	}
	raw, _ := s.Values[deviceKey].(string)
	var d auth.Device
	if json.Unmarshal([]byte(raw), &d) != nil {
		return auth.Device{}
	}
	return d
}

// RememberDevice records in the browser's device cookie that s signed in
// from it as username, renewing the cookie's lifetime. Call it after a
// successful sign-in only.
func (m *Manager) RememberDevice(c echo.Context, s models.Session, username string) error {
	d, err := m.Device(c).Remember(s, username)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	cs, _ := m.device.New(c.Request(), DeviceCookieName)
	cs.Values = map[any]any{deviceKey: string(raw)}
	return m.device.Save(c.Request(), c.Response(), cs)
}

// SignOut ends the browser's session on the server and drops its cookie.
func (m *Manager) SignOut(c echo.Context) error {
	if raw := m.rawID(c.Request()); raw != "" {
		if err := m.svc.Logout(c.Request().Context(), raw); err != nil {
			return err
		}
	}
	expire(c, m.session, CookieName)
	Set(c, nil)
	return nil
}

// LoginURL is the sign-in page that continues to next afterwards.
func LoginURL(next string) string {
	next = SafeNext(next)
	if next == "/" {
		return "/login"
	}
	return "/login?next=" + url.QueryEscape(next)
}

// SafeNext returns next when it is a path on this site, and "/" otherwise:
// only an absolute path without scheme, host, backslashes or control
// characters is followed after sign-in, so the sign-in page cannot be used
// to send people elsewhere ("//evil.example", "https://evil", "/\evil").
func SafeNext(next string) string {
	if next == "" || len(next) > 2048 || next[0] != '/' || strings.HasPrefix(next, "//") ||
		strings.ContainsAny(next, "\\") || strings.IndexFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	if u.Path == "/login" || u.Path == "/logout" {
		return "/"
	}
	return next
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// crossSite reports a request the browser says came from another site.
// Browsers without Fetch Metadata send nothing; the token still decides.
func crossSite(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") == "cross-site"
}

func requestToken(c echo.Context) string {
	if t := c.Request().Header.Get(CSRFHeader); t != "" {
		return t
	}
	// The form body only: a token in the query string would end up in
	// access logs, proxies and the browser's history.
	return c.Request().PostFormValue(CSRFField)
}

func tokenMatches(got, want string) bool {
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// acceptsHTML reports whether the client takes HTML: a browser navigating
// or submitting a form does; a script usually does not ask.
func acceptsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get(echo.HeaderAccept), "text/html")
}

// WantsHTML reports whether a console request should be answered with an
// HTML page (errors included): browsers navigating or posting a form ask
// for text/html, and htmx swaps HTML.
func WantsHTML(r *http.Request) bool {
	return acceptsHTML(r) || r.Header.Get("HX-Request") == "true"
}
