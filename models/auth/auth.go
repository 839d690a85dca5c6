// Package auth is the console's sign-in and administration domain: password
// sign-in with rate limiting held in the database, server-side sessions with
// idle and absolute timeouts, the session cookie's keys, and the admin
// operations on reviewers and agents. It imports no HTTP framework; the web
// layer (web/session) turns its sessions into cookies.
//
// Every method returns *models.Error values (or internal errors); the codes
// each one returns are named in its comment.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/internal/verified"
	"github.com/countersign/countersign/models/store"
)

// Defaults for Config's zero values.
const (
	DefaultIdleTimeout     = 30 * time.Minute
	DefaultAbsoluteTimeout = 12 * time.Hour
	DefaultMaxUserFailures = 5
	DefaultMaxIPFailures   = 20
	DefaultFailureWindow   = 15 * time.Minute
	// DefaultUserBackoff is the first wait once an account's free
	// failures are spent; it doubles per attempt up to FailureWindow.
	DefaultUserBackoff = 2 * time.Second
	// DefaultMaxDeviceFailures bounds failures per remembered device and
	// account in FailureWindow.
	DefaultMaxDeviceFailures = 10
)

// MaxNameLen bounds tenant, user and agent names, in bytes.
const MaxNameLen = 100

// Sizes of the random values the service makes, in bytes before encoding.
const (
	sessionIDBytes = 32
	csrfBytes      = 32
	passwordBytes  = 12 // 16 base64url characters, about 96 bits
	// HashKeyLen and BlockKeyLen are the cookie keys' lengths: HMAC-SHA256
	// with a 64-byte key, AES-256.
	HashKeyLen  = 64
	BlockKeyLen = 32
)

// AMRPassword is the authentication method of a password sign-in (RFC 8176).
const AMRPassword = "pwd"

// AMRWebAuthn is the authentication method of a passkey sign-in:
// models.AMRPasskey ("passkey"), never "webauthn", which in decisions and
// tokens means that the write itself was confirmed with a security key.
const AMRWebAuthn = models.AMRPasskey

// badLoginMessage is the one answer to every failed sign-in, whatever failed:
// the organization, the user, the password or a disabled account.
const badLoginMessage = "wrong organization, username or password"

// ApprovalEvidence is the evidence writes.Service.Confirm needs of a
// signed-in reviewer's approval: the user and the session's sign-in
// methods (models.Session.AMR; none means a password). It never says that
// the write was confirmed with a security key: only models/stepup, having
// verified an assertion, makes that evidence.
func ApprovalEvidence(u models.User, signIn []string) verified.Evidence {
	return verified.SignIn(u.ID, signIn)
}

// Device is a browser that signed in successfully before, as its
// remembered-device cookie (signed and encrypted with the session cookie's
// keys) says. The zero Device is an unknown browser.
type Device struct {
	// ID is the device's random id, made at its first successful sign-in.
	ID string
	// Accounts are the accounts that signed in from it, newest first.
	Accounts []DeviceAccount
}

// DeviceAccount is one account that signed in from a device.
type DeviceAccount struct {
	TenantID, UserID string
	// Tenant and User are the names typed at that sign-in.
	Tenant, User string
	At           time.Time
}

// MaxDeviceAccounts bounds how many accounts a device remembers.
const MaxDeviceAccounts = 8

// Knows reports whether the device signed in as that organization and
// username before.
func (d Device) Knows(tenantName, username string) bool {
	return d.account(tenantName, username) != nil
}

// KnowsOrganization reports whether any account of the organization
// signed in from the device before.
func (d Device) KnowsOrganization(tenantName string) bool {
	if d.ID == "" {
		return false
	}
	for _, a := range d.Accounts {
		if a.Tenant == tenantName {
			return true
		}
	}
	return false
}

func (d Device) account(tenantName, username string) *DeviceAccount {
	if d.ID == "" {
		return nil
	}
	for i := range d.Accounts {
		if d.Accounts[i].Tenant == tenantName && d.Accounts[i].User == username {
			return &d.Accounts[i]
		}
	}
	return nil
}

// Remember returns the device with the session's account added (or moved)
// to the front, at most MaxDeviceAccounts, and a new id when it had none.
func (d Device) Remember(s models.Session, username string) (Device, error) {
	out := Device{ID: d.ID}
	if out.ID == "" {
		id, err := secret.RandomToken(16)
		if err != nil {
			return Device{}, err
		}
		out.ID = id
	}
	out.Accounts = append(out.Accounts, DeviceAccount{TenantID: s.Tenant.ID, UserID: s.User.ID,
		Tenant: s.Tenant.Name, User: username, At: s.CreatedAt})
	for _, a := range d.Accounts {
		if a.UserID != s.User.ID && len(out.Accounts) < MaxDeviceAccounts {
			out.Accounts = append(out.Accounts, a)
		}
	}
	return out, nil
}

// LoginAttempt is one password sign-in.
type LoginAttempt struct {
	Tenant, Username, Password string
	// ClientIP is the client's address as the server determined it
	// (behind trusted proxies, from X-Forwarded-For); may be empty.
	ClientIP string
	// Device is the browser's remembered device, zero when unknown.
	Device Device
	// Zone is the IANA time zone the browser reports, may be empty. See
	// adoptZone.
	Zone string
}

// Config configures a Service. Zero durations and limits take the defaults.
type Config struct {
	Store *store.Store
	// Clock is the only source of "now"; models.SystemClock when nil.
	Clock models.Clock
	// IdleTimeout ends a session that saw no request for that long.
	IdleTimeout time.Duration
	// AbsoluteTimeout ends a session that long after sign-in.
	AbsoluteTimeout time.Duration
	// MaxUserFailures and MaxIPFailures bound failed sign-ins per
	// organization and username, and per client address, in FailureWindow.
	MaxUserFailures int
	MaxIPFailures   int
	FailureWindow   time.Duration
	// Passwords hashes and checks passwords, with the configured costs and
	// a bound on concurrent hashes; default costs when nil.
	Passwords *secret.Passwords
	// UserBackoff is the first wait once MaxUserFailures are spent.
	UserBackoff time.Duration
	// MaxDeviceFailures bounds failures from one remembered device on one
	// account in FailureWindow.
	MaxDeviceFailures int
	// Keys is the attestation policy (*stepup.Service under a metadata
	// BLOB): a session begun with a passkey it now refuses ends at its
	// next request. Nil when there is no policy.
	Keys KeyPolicy
}

// KeyPolicy says why a registered key may no longer be used: its model is
// reported compromised. "" when it may.
type KeyPolicy interface {
	Compromised(ctx context.Context, k models.SecurityKey) string
}

// Service signs console users in and out and runs the admin operations.
// It holds no per-process state that matters across instances: sessions,
// rate limits and cookie keys all live in the database.
type Service struct {
	store    *store.Store
	clock    models.Clock
	idle     time.Duration
	absolute time.Duration
	maxUser  int
	maxIP    int
	window   time.Duration
	pw       *secret.Passwords
	backoff  time.Duration
	maxDev   int
	keys     KeyPolicy

	dummyOnce sync.Once
	dummy     string
}

// New returns a Service over cfg.Store.
func New(cfg Config) *Service {
	s := &Service{store: cfg.Store, clock: cfg.Clock, idle: cfg.IdleTimeout, absolute: cfg.AbsoluteTimeout,
		maxUser: cfg.MaxUserFailures, maxIP: cfg.MaxIPFailures, window: cfg.FailureWindow,
		backoff: cfg.UserBackoff, maxDev: cfg.MaxDeviceFailures, pw: cfg.Passwords, keys: cfg.Keys}
	if s.pw == nil {
		s.pw, _ = secret.NewPasswords(secret.DefaultPasswordParams, 0)
	}
	if s.clock == nil {
		s.clock = models.SystemClock{}
	}
	if s.idle <= 0 {
		s.idle = DefaultIdleTimeout
	}
	if s.absolute <= 0 {
		s.absolute = DefaultAbsoluteTimeout
	}
	if s.maxUser <= 0 {
		s.maxUser = DefaultMaxUserFailures
	}
	if s.maxIP <= 0 {
		s.maxIP = DefaultMaxIPFailures
	}
	if s.window <= 0 {
		s.window = DefaultFailureWindow
	}
	if s.backoff <= 0 {
		s.backoff = DefaultUserBackoff
	}
	if s.maxDev <= 0 {
		s.maxDev = DefaultMaxDeviceFailures
	}
	return s
}

// IdleTimeout is how long a session may go without a request.
func (s *Service) IdleTimeout() time.Duration { return s.idle }

// AbsoluteTimeout is how long a session lasts at most.
func (s *Service) AbsoluteTimeout() time.Duration { return s.absolute }

func badLogin() error { return models.Errorf(models.EUnauthenticated, badLoginMessage) }

// Login is SignIn from an unknown device.
func (s *Service) Login(ctx context.Context, tenantName, username, password, clientIP string) (models.Session, error) {
	return s.SignIn(ctx, LoginAttempt{Tenant: tenantName, Username: username, Password: password, ClientIP: clientIP})
}

// SignIn checks a password sign-in and starts a new session. Every failure —
// unknown organization or user, wrong password, disabled account — is
// EUnauthenticated with the same message and, as far as the password hash
// allows, the same timing.
//
// Guessing is limited so that an attacker cannot lock reviewers out:
//   - from a device that signed in to this account before (in.Device), only
//     that device's failures on the account count (MaxDeviceFailures per
//     window); neither the account's backoff nor the source address's limit
//     applies, so a flood of failures from elsewhere, or from the same
//     shared proxy address, never denies the right password there;
//   - from any other device, an account gets MaxUserFailures free failures,
//     then each further attempt waits UserBackoff, doubling up to the
//     failure window (a delay, not a lock: it ends by itself), and a source
//     address gets MaxIPFailures attempts per window.
//
// Beyond a limit it is ERateLimited, saying when to try again, even for the
// right password. Passkey sign-in (PasskeyLogin) has no password to guess
// and is not limited here. A success forgets the failures it was counted
// against. It may also return EUnavailable.
func (s *Service) SignIn(ctx context.Context, in LoginAttempt) (models.Session, error) {
	now := s.clock.Now()
	tenantName, username, password := in.Tenant, in.Username, in.Password
	if !plausibleName(tenantName) || !plausibleName(username) || password == "" || len(password) > secret.MaxPasswordLen {
		return models.Session{}, badLogin()
	}
	var limits []models.LoginLimit
	known := in.Device.account(tenantName, username)
	if known != nil {
		limits = []models.LoginLimit{{Key: "device:" + in.Device.ID + "\n" + known.UserID, Max: s.maxDev}}
	} else {
		limits = []models.LoginLimit{{Key: LoginUserKey(tenantName, username), Max: s.maxUser, Backoff: s.backoff}}
		if in.ClientIP != "" {
			limits = append(limits, models.LoginLimit{Key: "ip:" + in.ClientIP, Max: s.maxIP})
		}
	}
	retryAt, ok, err := s.store.ReserveLoginAttempt(ctx, now, s.window, limits)
	if err != nil {
		return models.Session{}, err
	}
	if !ok {
		return models.Session{}, rateLimited(now, retryAt)
	}

	user, hash, err := s.credentials(ctx, tenantName, username)
	if models.IsCode(err, models.ENotFound) {
		// Spend the time a real check takes, so that the answer's timing
		// does not tell which users exist.
		s.pw.Verify(s.dummyHash(), password)
		return models.Session{}, badLogin()
	}
	if err != nil {
		return models.Session{}, err
	}
	if reason := refusal(s.pw.Verify(hash, password), user.Disabled); reason != "" {
		s.recordRefusal(ctx, user, reason, known != nil, now)
		return models.Session{}, badLogin()
	}

	// The attempt succeeded: it was counted in advance, so take it back.
	for i, l := range limits {
		if i == 0 {
			err = s.store.ClearLoginAttempts(ctx, l.Key)
		} else {
			err = s.store.ReleaseLoginAttempt(ctx, l.Key)
		}
		if err != nil {
			return models.Session{}, err
		}
	}
	tenant, err := s.store.TenantByName(ctx, tenantName)
	if err != nil {
		return models.Session{}, err
	}
	if err := s.adoptZone(ctx, &user, in.Zone); err != nil {
		return models.Session{}, err
	}
	return s.start(ctx, user, tenant, []string{AMRPassword}, "", now)
}

// refusal names why a sign-in with a password that verified (or not) to
// an account that is disabled (or not) is refused; "" when it is not.
func refusal(verified, disabled bool) string {
	switch {
	case !verified:
		return "wrong_password"
	case disabled:
		return "account_disabled"
	}
	return ""
}

// recordRefusal appends the refused sign-in to the account's organization's
// audit chain. It is best effort: the answer is the same whether or not
// the entry could be written, so that a failing write does not tell an
// existing account from an unknown name.
func (s *Service) recordRefusal(ctx context.Context, u models.User, reason string, knownDevice bool, now time.Time) {
	_ = s.store.Audit(ctx, u.TenantID, now, models.AuditEvent{Kind: models.AuditSignInFailed, Actor: models.ActorAnonymous,
		Data: map[string]any{"user_id": u.ID, "method": models.MethodPassword, "reason": reason, "known_device": knownDevice}})
}

// PasskeyLogin starts a new session for user, whose assertion by key the
// caller has verified (stepup.Service.FinishPasskeyLogin); the session's
// AMR is ["webauthn"], and it ends when key is flagged, removed from
// another session or refused by the attestation policy (Session). The
// user is read again: one that is unknown in the tenant, or disabled, is
// EUnauthenticated; so is a key that is not the user's. It may also return
// EUnavailable. zone is the browser's, as in LoginAttempt.
func (s *Service) PasskeyLogin(ctx context.Context, tenant models.Tenant, user models.User, key models.SecurityKey, zone string) (models.Session, error) {
	if key.ID == "" || key.TenantID != tenant.ID || key.UserID != user.ID {
		return models.Session{}, badLogin()
	}
	u, _, err := s.store.UserCredentials(ctx, tenant.ID, user.Name)
	if models.IsCode(err, models.ENotFound) {
		return models.Session{}, badLogin()
	}
	if err != nil {
		return models.Session{}, err
	}
	if u.ID != user.ID || u.Disabled {
		return models.Session{}, badLogin()
	}
	if err := s.adoptZone(ctx, &u, zone); err != nil {
		return models.Session{}, err
	}
	return s.start(ctx, u, tenant, []string{AMRWebAuthn}, key.ID, s.clock.Now())
}

// adoptZone makes zone, the one the browser signing in reports, u's zone
// when u has chosen none, so that the console shows times in it from the
// first page on; the console need not find the zone out afterwards and
// draw that page again. A chosen zone stays, even one chosen in another
// browser meanwhile (the store sets the zone only where none is set). A
// name that is no zone is ignored: a sign-in does not fail over it.
func (s *Service) adoptZone(ctx context.Context, u *models.User, zone string) error {
	if zone == "" || u.TimeZone != "" {
		return nil
	}
	if _, err := models.LoadZone(zone); err != nil {
		return nil
	}
	return s.store.SetUserTimeZone(ctx, u.TenantID, u.ID, zone, true)
}

func (s *Service) credentials(ctx context.Context, tenantName, username string) (models.User, string, error) {
	t, err := s.store.TenantByName(ctx, tenantName)
	if err != nil {
		return models.User{}, "", err
	}
	return s.store.UserCredentials(ctx, t.ID, username)
}

// start creates a new session record with fresh random id and CSRF token.
func (s *Service) start(ctx context.Context, user models.User, tenant models.Tenant, amr []string, keyID string, now time.Time) (models.Session, error) {
	id, err := secret.RandomToken(sessionIDBytes)
	if err != nil {
		return models.Session{}, err
	}
	csrf, err := secret.RandomToken(csrfBytes)
	if err != nil {
		return models.Session{}, err
	}
	sess := models.Session{ID: id, Handle: HandleOf(id), User: user, Tenant: tenant, CSRF: csrf, AMR: amr, KeyID: keyID,
		CreatedAt: now, LastSeen: now, ExpiresAt: now.Add(s.absolute)}
	if err := s.store.CreateConsoleSession(ctx, sess); err != nil {
		return models.Session{}, err
	}
	return sess, nil
}

// LoginUserKey is the rate-limit key of one organization and username.
func LoginUserKey(tenantName, username string) string {
	return "user:" + tenantName + "\n" + username
}

func rateLimited(now, retryAt time.Time) error {
	wait := max(retryAt.Sub(now), time.Second)
	n, unit := int(math.Ceil(wait.Minutes())), "minute"
	if wait < time.Minute {
		n, unit = int(math.Ceil(wait.Seconds())), "second"
	}
	if n != 1 {
		unit += "s"
	}
	e := models.Errorf(models.ERateLimited, "Too many failed sign-in attempts. Try again in %d %s (after %s).",
		n, unit, retryAt.UTC().Format("15:04 UTC"))
	e.Details = map[string]any{"retry_after": int(math.Ceil(wait.Seconds()))}
	return e
}

// RetryAfter returns how long an ERateLimited error from Login asks to
// wait, in whole seconds, for a Retry-After header.
func RetryAfter(err error) (int, bool) {
	var e *models.Error
	if !errors.As(err, &e) || e.Code != models.ERateLimited {
		return 0, false
	}
	n, ok := e.Details["retry_after"].(int)
	return n, ok
}

// dummyHash is a valid password hash of a random password, made once.
func (s *Service) dummyHash() string {
	s.dummyOnce.Do(func() {
		pw, err := secret.RandomToken(24)
		if err == nil {
			s.dummy, _ = s.pw.Hash(pw)
		}
	})
	return s.dummy
}

// ActivityResolution is how often a session's last activity is written: a
// person's requests within a minute of the last recorded one write nothing,
// so the idle timeout is exact to within this much (it can end up to a
// minute early, never late).
const ActivityResolution = time.Minute

// Session returns the live session whose raw id is rawID. A person's
// request (active) slides its idle timeout; a background refresh the page
// makes by itself (a live list's poll or event stream) does not, so an open
// tab left alone still ends at the idle timeout. A malformed, unknown,
// revoked, idle, expired session, or one whose user was disabled, is
// EUnauthenticated; EUnavailable when the database does not answer. So is
// a session begun with a passkey whose model the attestation policy now
// reports compromised: it is ended for good, on every instance, even if
// the policy changes again (a flagged or removed key ended its sessions
// as it was flagged or removed).
func (s *Service) Session(ctx context.Context, rawID string, active bool) (models.Session, error) {
	if !wellFormedID(rawID) {
		return models.Session{}, models.Errorf(models.EUnauthenticated, "not signed in")
	}
	now := s.clock.Now()
	sess, err := s.store.TouchConsoleSession(ctx, HandleOf(rawID), now, s.idle, ActivityResolution, active)
	if err != nil {
		return models.Session{}, err
	}
	if s.keys != nil && sess.KeyID != "" {
		key, err := s.store.SessionKey(ctx, sess.Tenant.ID, sess.User.ID, sess.KeyID)
		why := ""
		switch {
		case models.IsCode(err, models.ENotFound):
			// Keys are only ever marked removed; one that is gone
			// entirely vouches for nothing.
			key.Name, why = sess.KeyID, "it is no longer registered"
		case err != nil:
			return models.Session{}, err
		default:
			why = s.keys.Compromised(ctx, key)
		}
		if why != "" {
			if err := s.store.RevokeConsoleSession(ctx, sess.Handle, now); err != nil {
				return models.Session{}, err
			}
			return models.Session{}, models.Errorf(models.EUnauthenticated,
				"your session has ended: the passkey %q you signed in with no longer signs anyone in (%s); sign in with your password", key.Name, why)
		}
	}
	sess.ID = rawID
	return sess, nil
}

// Logout ends the session whose raw id is rawID. Ending an unknown or ended
// session is no error; EUnavailable when the database does not answer.
func (s *Service) Logout(ctx context.Context, rawID string) error {
	if !wellFormedID(rawID) {
		return nil
	}
	return s.store.RevokeConsoleSession(ctx, HandleOf(rawID), s.clock.Now())
}

// RevokeUserSessions ends every session of a user of the tenant, e.g. when
// the account was compromised. Disabling a user and resetting a password do
// this themselves, in the same transaction. EUnavailable on database errors.
func (s *Service) RevokeUserSessions(ctx context.Context, tenantID, userID string) error {
	return s.store.RevokeUserConsoleSessions(ctx, tenantID, userID, s.clock.Now())
}

// pruneMargin is how long ended sessions are kept, for the record.
const pruneMargin = 24 * time.Hour

// Prune deletes sessions that ended at least a day ago (expired, revoked or
// idle) and sign-in attempt windows that are over, and returns how many
// rows went. Run it now and then; nothing depends on it but table size.
// EUnavailable on database errors.
func (s *Service) Prune(ctx context.Context) (int64, error) {
	keep := max(pruneMargin, s.idle, s.window)
	return s.store.PruneConsole(ctx, s.clock.Now().Add(-keep))
}

// CookieKeys returns the session cookie's authentication key (64 bytes) and
// encryption key (32 bytes), creating them on first use. Creation is an
// insert-once followed by a read, so instances starting together agree, and
// restarts keep the keys (and so the sessions). EUnavailable on database
// errors.
func (s *Service) CookieKeys(ctx context.Context) (hashKey, blockKey []byte, err error) {
	hk, err := randomBytes(HashKeyLen)
	if err != nil {
		return nil, nil, err
	}
	bk, err := randomBytes(BlockKeyLen)
	if err != nil {
		return nil, nil, err
	}
	hashKey, blockKey, err = s.store.ConsoleCookieKeys(ctx, hk, bk, s.clock.Now())
	if err != nil {
		return nil, nil, err
	}
	if len(hashKey) < 32 || (len(blockKey) != 16 && len(blockKey) != 24 && len(blockKey) != 32) {
		return nil, nil, fmt.Errorf("stored console cookie keys have the wrong lengths (%d, %d)", len(hashKey), len(blockKey))
	}
	return hashKey, blockKey, nil
}

// requireAdmin is the fast refusal; the store re-checks inside its
// transaction against the current row.
func requireAdmin(actor models.User) error {
	if actor.ID == "" || actor.Role != models.RoleAdmin || actor.Disabled {
		return models.Errorf(models.EForbidden, "only administrators can manage reviewers and agents")
	}
	return nil
}

// ListUsers returns the console users of the actor's tenant, by name.
// EForbidden unless actor is an admin.
func (s *Service) ListUsers(ctx context.Context, actor models.User) ([]models.User, error) {
	if err := requireAdmin(actor); err != nil {
		return nil, err
	}
	return s.store.AdminListUsers(ctx, actor)
}

// SetTimeZone stores the zone u reads times in (an IANA name). With
// fromBrowser it is only a default: a zone the user chose stays.
// EInvalidRequest for a name that is no zone.
func (s *Service) SetTimeZone(ctx context.Context, u models.User, zone string, fromBrowser bool) error {
	if _, err := models.LoadZone(zone); err != nil {
		return err
	}
	return s.store.SetUserTimeZone(ctx, u.TenantID, u.ID, zone, fromBrowser)
}

// SecurityKeyCounts counts each user's security keys that may approve, for
// the reviewers page. EForbidden unless actor is an admin.
func (s *Service) SecurityKeyCounts(ctx context.Context, actor models.User) (map[string]int, error) {
	if err := requireAdmin(actor); err != nil {
		return nil, err
	}
	return s.store.AdminSecurityKeyCounts(ctx, actor)
}

// CreateUser creates a console user in the actor's tenant with a generated
// password, returned once and stored only hashed. EForbidden unless actor
// is an admin; EInvalidRequest for a bad name or role; EAlreadyExists when
// the name is taken.
func (s *Service) CreateUser(ctx context.Context, actor models.User, name string, role models.Role) (models.User, string, error) {
	if err := requireAdmin(actor); err != nil {
		return models.User{}, "", err
	}
	if err := CheckName("user", name); err != nil {
		return models.User{}, "", err
	}
	if !role.Valid() {
		return models.User{}, "", models.Errorf(models.EInvalidRequest, "role must be reviewer or admin")
	}
	pw, hash, err := s.newPassword()
	if err != nil {
		return models.User{}, "", err
	}
	u, err := s.store.AdminCreateUser(ctx, actor, name, role, hash)
	if err != nil {
		return models.User{}, "", err
	}
	return u, pw, nil
}

// SetUserDisabled disables or re-enables a user of the actor's tenant;
// disabling ends the user's sessions and voids the user's approvals of
// proposals still awaiting confirmation, in the same transaction. EForbidden
// unless actor is an admin, for an admin disabling themselves, and for
// disabling the tenant's last active administrator; ENotFound for users of
// other tenants.
func (s *Service) SetUserDisabled(ctx context.Context, actor models.User, userID string, disabled bool) (models.User, error) {
	if err := requireAdmin(actor); err != nil {
		return models.User{}, err
	}
	if disabled && userID == actor.ID {
		return models.User{}, models.Errorf(models.EForbidden, "you cannot disable your own account")
	}
	return s.store.AdminSetUserDisabled(ctx, actor, userID, disabled, s.clock.Now())
}

// SetUserRole gives a user of the actor's tenant role, the actor
// included; the user's sessions stay, and read the new role at their next
// request. EInvalidRequest for an unknown role; EForbidden unless actor is
// an admin, and for taking the role of the tenant's last active
// administrator (themselves included); ENotFound for users of other
// tenants.
func (s *Service) SetUserRole(ctx context.Context, actor models.User, userID string, role models.Role) (models.User, error) {
	if err := requireAdmin(actor); err != nil {
		return models.User{}, err
	}
	if !role.Valid() {
		return models.User{}, models.Errorf(models.EInvalidRequest, "role must be reviewer or admin")
	}
	return s.store.AdminSetUserRole(ctx, actor, userID, role, s.clock.Now())
}

// ResetPassword gives a user of the actor's tenant a new generated
// password, returned once, and ends the user's sessions in the same
// transaction. EForbidden unless actor is an admin; ENotFound for users of
// other tenants.
func (s *Service) ResetPassword(ctx context.Context, actor models.User, userID string) (models.User, string, error) {
	if err := requireAdmin(actor); err != nil {
		return models.User{}, "", err
	}
	pw, hash, err := s.newPassword()
	if err != nil {
		return models.User{}, "", err
	}
	u, err := s.store.AdminSetPassword(ctx, actor, userID, hash, s.clock.Now())
	if err != nil {
		return models.User{}, "", err
	}
	return u, pw, nil
}

// ListAgents returns the agents of the actor's tenant, by name, revoked
// ones included. EForbidden unless actor is an admin.
func (s *Service) ListAgents(ctx context.Context, actor models.User) ([]models.Agent, error) {
	if err := requireAdmin(actor); err != nil {
		return nil, err
	}
	return s.store.AdminListAgents(ctx, actor)
}

// CreateAgent creates an agent in the actor's tenant and returns its API
// key, shown once and stored only hashed. ownerUserID may be empty.
// EForbidden unless actor is an admin; EInvalidRequest for a bad name;
// EAlreadyExists when the name is taken; ENotFound for an owner outside the
// tenant.
func (s *Service) CreateAgent(ctx context.Context, actor models.User, name, ownerUserID string) (models.Agent, string, error) {
	if err := requireAdmin(actor); err != nil {
		return models.Agent{}, "", err
	}
	if err := CheckName("agent", name); err != nil {
		return models.Agent{}, "", err
	}
	key, hash, err := secret.NewAPIKey()
	if err != nil {
		return models.Agent{}, "", err
	}
	a, err := s.store.AdminCreateAgent(ctx, actor, name, ownerUserID, hash)
	if err != nil {
		return models.Agent{}, "", err
	}
	return a, key, nil
}

// RevokeAgent revokes an agent's key in the actor's tenant; revoking a
// revoked agent changes nothing. EForbidden unless actor is an admin;
// ENotFound for agents of other tenants.
func (s *Service) RevokeAgent(ctx context.Context, actor models.User, agentID string) (models.Agent, error) {
	if err := requireAdmin(actor); err != nil {
		return models.Agent{}, err
	}
	return s.store.AdminRevokeAgent(ctx, actor, agentID, s.clock.Now())
}

// CheckName refuses names that would be awkward or misleading to show and
// type: empty, longer than MaxNameLen bytes, not UTF-8, surrounded by
// blanks, or holding control or bidi-control characters. EInvalidRequest.
func CheckName(kind, name string) error {
	switch {
	case name == "":
		return models.Errorf(models.EInvalidRequest, "the %s name is empty", kind)
	case len(name) > MaxNameLen:
		return models.Errorf(models.EInvalidRequest, "the %s name is longer than %d bytes", kind, MaxNameLen)
	case !utf8.ValidString(name):
		return models.Errorf(models.EInvalidRequest, "the %s name is not valid UTF-8", kind)
	case strings.TrimSpace(name) != name:
		return models.Errorf(models.EInvalidRequest, "the %s name starts or ends with white space", kind)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsControl(r) || isBidiControl(r) }) >= 0:
		return models.Errorf(models.EInvalidRequest, "the %s name contains control characters", kind)
	}
	return nil
}

func plausibleName(name string) bool { return name != "" && len(name) <= MaxNameLen }

func isBidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

// HandleOf returns the store key of a raw session id: hex SHA-256.
func HandleOf(rawID string) string {
	sum := sha256.Sum256([]byte(rawID))
	return hex.EncodeToString(sum[:])
}

// wellFormedID reports whether rawID could be one of ours: 32 bytes,
// base64url without padding. Anything else is refused before the database.
func wellFormedID(rawID string) bool {
	if len(rawID) != base64.RawURLEncoding.EncodedLen(sessionIDBytes) {
		return false
	}
	_, err := base64.RawURLEncoding.Strict().DecodeString(rawID)
	return err == nil
}

func (s *Service) newPassword() (password, hash string, err error) {
	password, err = secret.RandomToken(passwordBytes)
	if err != nil {
		return "", "", err
	}
	hash, err = s.pw.Hash(password)
	if err != nil {
		return "", "", err
	}
	return password, hash, nil
}

func randomBytes(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("random key: %w", err)
	}
	return b, nil
}
