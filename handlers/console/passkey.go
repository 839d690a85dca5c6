package console

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/web/session"
)

// PasskeyVerifier checks passkey sign-ins (*stepup.Service).
type PasskeyVerifier interface {
	// BeginPasskeyLogin returns request options for a discoverable
	// credential of the organization, counting the sign-in against the
	// source address until it succeeds.
	BeginPasskeyLogin(ctx context.Context, tenantName, clientIP, deviceID string) (json.RawMessage, error)
	// FinishPasskeyLogin verifies the answer and returns whom it signs in,
	// and with which key.
	FinishPasskeyLogin(ctx context.Context, tenantName string, response []byte, clientIP, deviceID string) (models.Tenant, models.User, models.SecurityKey, error)
}

// PasskeySessions starts the session of a verified passkey sign-in
// (*auth.Service).
type PasskeySessions interface {
	PasskeyLogin(ctx context.Context, tenant models.Tenant, user models.User, key models.SecurityKey, zone string) (models.Session, error)
}

var (
	_ PasskeyVerifier = (*stepup.Service)(nil)
	_ PasskeySessions = (*auth.Service)(nil)
)

// Passkeys serves the passkey sign-in beside the password form: JSON
// endpoints the sign-in page's script drives. Build it with NewPasskeys.
type Passkeys struct {
	verify   PasskeyVerifier
	sessions PasskeySessions
	cookies  SessionCookies
}

// NewPasskeys returns the passkey sign-in handlers.
func NewPasskeys(v PasskeyVerifier, s PasskeySessions, cookies SessionCookies) *Passkeys {
	return &Passkeys{verify: v, sessions: s, cookies: cookies}
}

// Begin serves POST /login/passkey/begin with {"org": …}: request options
// for a passkey of that organization.
func (h *Passkeys) Begin(c echo.Context) error {
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	var in struct {
		Org string `json:"org"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return models.Wrap(models.EInvalidRequest, err, "the request is not a JSON object")
	}
	if in.Org == "" {
		return &models.Error{Code: models.EInvalidRequest, Message: "Enter your organization first.",
			Fields: []models.FieldProblem{{Pointer: "/org", Message: "required"}}}
	}
	// c.RealIP() as for password sign-ins (see Login).
	opts, err := h.verify.BeginPasskeyLogin(c.Request().Context(), in.Org, c.RealIP(), h.knownDevice(c, in.Org))
	if err != nil {
		return err
	}
	noStore(c)
	return c.JSONBlob(http.StatusOK, opts)
}

// Finish serves POST /login/passkey/finish: the assertion
// (credential.toJSON()) with "org", "next" and "zone" (the browser's time
// zone, may be absent) added. On success the browser
// gets a new session (its id rotated, as at every sign-in) and
// {"redirect": next}.
func (h *Passkeys) Finish(c echo.Context) error {
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	var in struct {
		Org  string `json:"org"`
		Next string `json:"next"`
		Zone string `json:"zone"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return models.Wrap(models.EInvalidRequest, err, "the request is not a JSON object")
	}
	ctx := c.Request().Context()
	t, u, key, err := h.verify.FinishPasskeyLogin(ctx, in.Org, body, c.RealIP(), h.knownDevice(c, in.Org))
	if err != nil {
		return err
	}
	s, err := h.sessions.PasskeyLogin(ctx, t, u, key, in.Zone)
	if err != nil {
		return err
	}
	if err := h.cookies.SignIn(c, s); err != nil {
		return err
	}
	// A passkey sign-in proves the browser as well as a password does:
	// later password sign-ins from it skip the guessing limits.
	if err := h.cookies.RememberDevice(c, s, u.Name); err != nil {
		return err
	}
	return redirectJSON(c, session.SafeNext(in.Next))
}

// knownDevice is the browser's remembered-device id when it signed in to
// the organization org before, else "".
func (h *Passkeys) knownDevice(c echo.Context, org string) string {
	if d := h.cookies.Device(c); d.KnowsOrganization(strings.TrimSpace(org)) {
		return d.ID
	}
	return ""
}
