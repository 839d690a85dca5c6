package console

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/static"
	"github.com/countersign/countersign/views/keys"
	"github.com/countersign/countersign/views/layout"
	"github.com/countersign/countersign/web/session"
)

// StepUp is what the security-key pages and the step-up approval need from
// the domain; *stepup.Service implements it. Every method acts for the
// given user in that user's tenant only.
type StepUp interface {
	// RPID and Origins say where keys work.
	RPID() string
	Origins() []string
	// Keys returns the user's keys, flagged ones included.
	Keys(ctx context.Context, u models.User) ([]models.SecurityKey, error)
	// Uncertified says why a key does not meet the attestation policy,
	// "" when it does or there is none.
	Uncertified(ctx context.Context, k models.SecurityKey) string
	// Compromised says why a key approves nothing under the attestation
	// policy (its model is reported compromised), "" when it may.
	Compromised(ctx context.Context, k models.SecurityKey) string
	// HasUsableKey reports whether the user has a key that may approve.
	HasUsableKey(ctx context.Context, u models.User) (bool, error)
	// BeginRegistration answers creation options, or {"confirm": …} when
	// the user must first prove possession of a key they have (proof).
	BeginRegistration(ctx context.Context, u models.User, proof []byte) (json.RawMessage, error)
	FinishRegistration(ctx context.Context, u models.User, name string, response []byte) (models.SecurityKey, error)
	RenameKey(ctx context.Context, u models.User, keyID, name string) (models.SecurityKey, error)
	BeginRemoval(ctx context.Context, u models.User, keyID string) (json.RawMessage, error)
	FinishRemoval(ctx context.Context, u models.User, session, keyID string, response []byte) error
	// BeginApproval and FinishApproval are the step-up of one approval.
	BeginApproval(ctx context.Context, reviewer models.User, proposalID, digestSeen string) (json.RawMessage, error)
	FinishApproval(ctx context.Context, in stepup.ApprovalInput) (*models.Proposal, error)
	// CheckEvidence re-verifies an approval's evidence and returns the
	// approver's registered key that signed it.
	CheckEvidence(ctx context.Context, p *models.Proposal, d models.Decision) (models.SecurityKey, error)
}

var _ StepUp = (*stepup.Service)(nil)

// Keys serves /settings/keys: a reviewer's security keys and passkeys,
// registering, renaming and removing them. The WebAuthn ceremonies run in
// the browser (static/js/webauthn.js) against the JSON endpoints here.
// Build it with NewKeys.
type Keys struct {
	s      StepUp
	assets layout.Assets
	loc    *time.Location
}

// NewKeys returns the security-key pages over s.
// as returns the key pages as reviewer s reads them: times in s's zone.
func (h *Keys) as(s *session.Session) *Keys {
	c := *h
	c.loc = s.User.Location()
	return &c
}

func NewKeys(s StepUp, assets *static.Assets) *Keys {
	return &Keys{s: s, assets: AssetsFor(assets), loc: time.UTC}
}

// keysURL is the settings page, with an optional notice.
const keysURL = "/settings/keys"

// notices are the confirmations the page shows after a redirect; the query
// names one, never carries its text.
var notices = map[string]string{
	"added":   "Your security key was registered. It can now confirm high-risk approvals.",
	"removed": "The security key was removed. It can no longer confirm anything.",
	"renamed": "The key was renamed.",
}

// Page serves GET /settings/keys.
func (h *Keys) Page(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	return h.render(c, s, http.StatusOK, keys.Form{}, notices[c.QueryParam("notice")])
}

func (h *Keys) render(c echo.Context, s *session.Session, status int, form keys.Form, notice string) error {
	ks, err := h.s.Keys(c.Request().Context(), s.User)
	if err != nil {
		return err
	}
	page := keys.Page{
		Layout: layout.Page{Title: "Security keys", CSRF: s.CSRF, Active: "keys", Assets: h.assets,
			User: frameUser(s)},
		RegisterBegin:  keysURL + "/register/begin",
		RegisterFinish: keysURL + "/register/finish",
		CSRF:           s.CSRF,
		Notice:         notice,
		Form:           form,
		WrongSite:      h.wrongSite(c),
	}
	for _, k := range ks {
		row := h.keyRow(k)
		row.Compromised = h.s.Compromised(c.Request().Context(), k)
		if row.Compromised == "" {
			row.Uncertified = h.s.Uncertified(c.Request().Context(), k)
		}
		page.Keys = append(page.Keys, row)
	}
	noStore(c)
	return render(c, status, keys.View(page))
}

// wrongSite explains, when the page was opened under a host name the keys
// are not bound to (e.g. 127.0.0.1 for the relying party localhost), where
// they work instead: browsers refuse the ceremonies elsewhere.
func (h *Keys) wrongSite(c echo.Context) string {
	host := strings.ToLower(c.Request().Host)
	if hn, _, err := net.SplitHostPort(host); err == nil {
		host = hn
	}
	rp := strings.ToLower(h.s.RPID())
	if host == rp || strings.HasSuffix(host, "."+rp) {
		return ""
	}
	return fmt.Sprintf("Security keys are bound to %s, and browsers refuse them at %s. Open the console at %s to register and use them.",
		rp, host, strings.Join(h.s.Origins(), " or "))
}

func (h *Keys) keyRow(k models.SecurityKey) keys.Key {
	base := keysURL + "/" + url.PathEscape(k.ID)
	row := keys.Key{
		ID: k.ID, Name: k.Name, Kind: keyKind(k), CredentialID: shortID(k.CredentialID),
		Added: k.CreatedAt.In(h.loc).Format("2006-01-02 15:04 MST"), LastUsed: "never",
		SignCount: fmt.Sprint(k.SignCount), UserVerified: k.Flags.UserVerified,
		RenameAction: base + "/rename", RemoveBegin: base + "/remove/begin", RemoveFinish: base + "/remove/finish",
	}
	if k.LastUsedAt != nil {
		row.LastUsed = k.LastUsedAt.In(h.loc).Format("2006-01-02 15:04 MST")
	}
	if k.FlaggedAt != nil {
		row.Flagged = "Flagged " + k.FlaggedAt.In(h.loc).Format("2006-01-02 15:04 MST") +
			": its signature counter went backwards, so a copy of it may exist. It approves nothing any more; remove it."
	}
	return row
}

// keyKind describes a key for a person: a roaming security key or a
// passkey, synced or bound to one device, and how it connects.
func keyKind(k models.SecurityKey) string {
	var parts []string
	switch {
	case k.Flags.BackupEligible && k.Flags.BackupState:
		parts = append(parts, "Passkey, synced")
	case k.Flags.BackupEligible:
		parts = append(parts, "Passkey, can be synced")
	case k.Attachment == "platform":
		parts = append(parts, "Passkey on this device")
	default:
		parts = append(parts, "Security key")
	}
	var ts []string
	for _, t := range k.Transports {
		switch t {
		case "usb", "nfc", "ble":
			ts = append(ts, strings.ToUpper(t))
		case "internal":
			ts = append(ts, "built in")
		case "hybrid":
			ts = append(ts, "phone")
		default:
			ts = append(ts, t)
		}
	}
	if len(ts) > 0 {
		parts = append(parts, strings.Join(ts, ", "))
	}
	return strings.Join(parts, " · ")
}

// shortID shortens a credential id for display: its first and last
// characters in base64url.
func shortID(id []byte) string {
	s := base64.RawURLEncoding.EncodeToString(id)
	if len(s) > 20 {
		return s[:8] + "…" + s[len(s)-8:]
	}
	return s
}

// RegisterBegin serves POST /settings/keys/register/begin: the creation
// options as JSON ({"publicKey": …}). A reviewer who has a key already
// first gets {"confirm": {"publicKey": …}}, answers it with that key and
// posts the answer back here as {"confirm": credential.toJSON()}.
func (h *Keys) RegisterBegin(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	var in struct {
		Confirm json.RawMessage `json:"confirm"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			return models.Wrap(models.EInvalidRequest, err, "the request is not a JSON object")
		}
	}
	if bytes.Equal(bytes.TrimSpace(in.Confirm), []byte("null")) {
		in.Confirm = nil
	}
	opts, err := h.s.BeginRegistration(c.Request().Context(), s.User, in.Confirm)
	if err != nil {
		return err
	}
	noStore(c)
	return c.JSONBlob(http.StatusOK, opts)
}

// RegisterFinish serves POST /settings/keys/register/finish: the body is
// credential.toJSON() with the key's name added as "name". It answers
// {"redirect": "/settings/keys?notice=added"}.
func (h *Keys) RegisterFinish(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	var named struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(body, &named); err != nil {
		return models.Wrap(models.EInvalidRequest, err, "the request is not a JSON object")
	}
	if _, err := h.s.FinishRegistration(c.Request().Context(), s.User, named.Name, body); err != nil {
		return err
	}
	return redirectJSON(c, keysURL+"?notice=added")
}

// Rename serves POST /settings/keys/:id/rename (form field name).
func (h *Keys) Rename(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	id := c.Param("id")
	_, err = h.s.RenameKey(c.Request().Context(), s.User, id, c.FormValue("name"))
	if models.IsCode(err, models.EInvalidRequest) {
		return h.render(c, s, http.StatusUnprocessableEntity,
			keys.Form{RenameID: id, RenameName: c.FormValue("name"), RenameError: upperFirst(models.ErrorMessage(err)) + "."}, "")
	}
	if err != nil {
		return err
	}
	return seeOther(c, keysURL+"?notice=renamed")
}

// RemoveBegin serves POST /settings/keys/:id/remove/begin: removing a key
// needs a fresh security-key confirmation; this returns its request
// options as JSON.
func (h *Keys) RemoveBegin(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	opts, err := h.s.BeginRemoval(c.Request().Context(), s.User, c.Param("id"))
	if err != nil {
		return err
	}
	noStore(c)
	return c.JSONBlob(http.StatusOK, opts)
}

// RemoveFinish serves POST /settings/keys/:id/remove/finish with the
// assertion (credential.toJSON()) and answers {"redirect": …}.
func (h *Keys) RemoveFinish(c echo.Context) error {
	s, err := signedIn(c)
	if err != nil {
		return err
	}
	h = h.as(s)
	body, err := readJSON(c)
	if err != nil {
		return err
	}
	if err := h.s.FinishRemoval(c.Request().Context(), s.User, s.ID, c.Param("id"), body); err != nil {
		return err
	}
	return redirectJSON(c, keysURL+"?notice=removed")
}

// maxCeremonyBody bounds a WebAuthn response; real ones are a few KB.
const maxCeremonyBody = 64 << 10

// readJSON reads a WebAuthn request's JSON body.
func readJSON(c echo.Context) ([]byte, error) {
	req := c.Request()
	if mt, _, _ := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType)); mt != echo.MIMEApplicationJSON {
		return nil, models.Errorf(models.EInvalidRequest, "send the security key's response as application/json")
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, maxCeremonyBody+1))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe) || len(b) > maxCeremonyBody:
		return nil, models.Errorf(models.EInvalidRequest, "the security key's response is too large")
	case err != nil:
		return nil, models.Wrap(models.EInvalidRequest, err, "cannot read the request")
	}
	return b, nil
}

// redirectJSON ends a successful ceremony: the script goes to url.
func redirectJSON(c echo.Context, url string) error {
	noStore(c)
	return c.JSON(http.StatusOK, map[string]string{"redirect": url})
}
