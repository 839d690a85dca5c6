package console

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/httpstatus"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/static"
	authviews "github.com/countersign/countersign/views/auth"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/web/session"
)

// Authenticator checks sign-ins (*auth.Service).
type Authenticator interface {
	// SignIn returns a new session, EUnauthenticated with one message for
	// every failure, or ERateLimited.
	SignIn(ctx context.Context, in auth.LoginAttempt) (models.Session, error)
}

// SessionCookies keeps sessions in the browser (*session.Manager).
type SessionCookies interface {
	// LoginToken returns the sign-in form's pre-session CSRF token.
	LoginToken(c echo.Context) (string, error)
	// SignIn replaces the browser's session, if any, with s.
	SignIn(c echo.Context, s models.Session) error
	// SignOut ends the browser's session.
	SignOut(c echo.Context) error
	// Device is the browser's remembered device (zero when unknown).
	Device(c echo.Context) auth.Device
	// RememberDevice records a successful sign-in in the browser.
	RememberDevice(c echo.Context, s models.Session, username string) error
}

var (
	_ Authenticator  = (*auth.Service)(nil)
	_ SessionCookies = (*session.Manager)(nil)
)

// AuthOptions configure the sign-in handlers.
type AuthOptions struct {
	// DefaultTenant pre-fills the organization field ("demo" in demo mode).
	DefaultTenant string
	// Passkeys offers the passkey sign-in beside the password form.
	Passkeys bool
}

// AuthHandlers serve sign-in, sign-out and the console's error pages.
// Build them with NewAuthHandlers.
type AuthHandlers struct {
	auth          Authenticator
	cookies       SessionCookies
	assets        layout.Assets
	defaultTenant string
	passkeys      bool
}

// NewAuthHandlers returns the sign-in handlers.
func NewAuthHandlers(a Authenticator, cookies SessionCookies, assets *static.Assets, opts AuthOptions) *AuthHandlers {
	return &AuthHandlers{auth: a, cookies: cookies, assets: AssetsFor(assets), defaultTenant: opts.DefaultTenant,
		passkeys: opts.Passkeys}
}

// LoginPage handles GET /login: the sign-in form, or straight on to next
// for someone already signed in.
func (h *AuthHandlers) LoginPage(c echo.Context) error {
	next := session.SafeNext(c.QueryParam("next"))
	if session.From(c) != nil {
		return c.Redirect(http.StatusSeeOther, next)
	}
	return h.loginForm(c, http.StatusOK, authviews.LoginPage{Tenant: h.defaultTenant, Next: next})
}

// Login handles POST /login (after the login CSRF check). A refusal
// re-renders the form with its message: 401 for wrong credentials, 429
// with Retry-After when rate limited. Success rotates the session and
// answers 303 to next, or to the pending list.
func (h *AuthHandlers) Login(c echo.Context) error {
	tenant, username := c.FormValue("org"), c.FormValue("username")
	next := session.SafeNext(c.FormValue("next"))
	// c.RealIP() is the peer's address, or X-Forwarded-For's when the peer
	// is a trusted proxy (web.Config.TrustedProxies).
	s, err := h.auth.SignIn(c.Request().Context(), auth.LoginAttempt{Tenant: tenant, Username: username,
		Password: c.FormValue("password"), ClientIP: c.RealIP(), Device: h.cookies.Device(c), Zone: c.FormValue("zone")})
	if err != nil {
		form := authviews.LoginPage{Tenant: tenant, Username: username, Next: next, Error: models.ErrorMessage(err)}
		switch models.ErrorCode(err) {
		case models.EUnauthenticated:
			return h.loginForm(c, http.StatusUnauthorized, form)
		case models.ERateLimited:
			if secs, ok := auth.RetryAfter(err); ok {
				c.Response().Header().Set(echo.HeaderRetryAfter, strconv.Itoa(secs))
			}
			form.RateLimited = true
			return h.loginForm(c, http.StatusTooManyRequests, form)
		}
		return err
	}
	if err := h.cookies.SignIn(c, s); err != nil {
		return err
	}
	if err := h.cookies.RememberDevice(c, s, username); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, next)
}

func (h *AuthHandlers) loginForm(c echo.Context, status int, p authviews.LoginPage) error {
	token, err := h.cookies.LoginToken(c)
	if err != nil {
		return err
	}
	p.CSRF = token
	p.Passkeys = h.passkeys
	if p.Next == "/" {
		p.Next = ""
	}
	p.Layout = layout.Page{Title: "Sign in", Assets: h.assets}
	return render(c, status, authviews.Login(p))
}

// Logout handles POST /logout: the session ends on the server and in the
// browser.
func (h *AuthHandlers) Logout(c echo.Context) error {
	if err := h.cookies.SignOut(c); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/login")
}

// ErrorPage renders the console's error page for a status and a message
// that is safe to show. The server's one error handler calls it for
// console requests that take HTML.
func (h *AuthHandlers) ErrorPage(c echo.Context, status int, message string) error {
	p := authviews.ErrorPage{Status: status, Title: errorTitle(status), Message: message,
		SignIn: status == http.StatusUnauthorized}
	p.Layout = layout.Page{Title: p.Title, Assets: h.assets}
	if s := session.From(c); s != nil {
		p.Layout.User = frameUser(s)
		p.Layout.CSRF = s.CSRF
		p.SignIn = false
	}
	return render(c, status, authviews.Error(p))
}

func errorTitle(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "Sign in to continue"
	case http.StatusForbidden:
		return "Not allowed"
	case http.StatusNotFound:
		return "Not found"
	case http.StatusTooManyRequests:
		return "Too many attempts"
	case http.StatusServiceUnavailable:
		return "Temporarily unavailable"
	}
	if status >= 500 {
		return "Something went wrong"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "Error"
}

// statusOf is the HTTP status of a domain error.
func statusOf(err error) int { return httpstatus.Of(models.ErrorCode(err)) }
