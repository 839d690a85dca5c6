package auth_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/store"
)

var t0 = time.Date(2026, 9, 1, 9, 0, 0, 0, time.UTC)

type env struct {
	st     *store.Store
	clock  *models.FixedClock
	svc    *auth.Service
	tenant models.Tenant
	admin  models.User
	alice  models.User
}

const (
	adminPW = "admin-password-1"
	alicePW = "alice-password-1"
)

// cheapPasswords hashes with the smallest argon2id costs: the tests check
// the sign-in rules, not the hash's strength, and are configured the way
// production is, through auth.Config.Passwords.
var cheapPasswords, _ = secret.NewPasswords(secret.PasswordParams{MemoryKiB: 64, Time: 1, Threads: 1}, 0)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newEnv(t *testing.T) *env { return newEnvOn(t, "sqlite") }

// eachDB runs fn on a fresh SQLite file and on a fresh PostgreSQL database.
func eachDB(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { fn(t, newEnvOn(t, kind)) })
	}
}

func newEnvOn(t *testing.T, kind string) *env {
	t.Helper()
	ctx := context.Background()
	clock := models.NewFixedClock(t0)
	url := "sqlite://" + filepath.Join(t.TempDir(), "auth.db")
	if kind == "postgres" {
		url = pgtest.DSN(t)
	}
	st, err := store.Open(url, store.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, clock: clock, svc: auth.New(auth.Config{Store: st, Clock: clock, Passwords: cheapPasswords})}
	if e.tenant, err = st.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	e.admin = mustUser(t, st, e.tenant.ID, "root", models.RoleAdmin, adminPW)
	e.alice = mustUser(t, st, e.tenant.ID, "alice", models.RoleReviewer, alicePW)
	return e
}

func mustUser(t *testing.T, st *store.Store, tenantID, name string, role models.Role, pw string) models.User {
	t.Helper()
	h, err := cheapPasswords.Hash(pw)
	if err != nil {
		t.Fatal(err)
	}
	u, err := st.CreateUser(context.Background(), tenantID, name, role, h)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestLoginStartsASession(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, err := e.svc.Login(ctx, "acme", "alice", alicePW, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.ID) != 43 || len(s.CSRF) != 43 || s.Handle != auth.HandleOf(s.ID) || s.Handle == s.ID {
		t.Errorf("id %q, csrf %q, handle %q", s.ID, s.CSRF, s.Handle)
	}
	if s.User.ID != e.alice.ID || s.Tenant.ID != e.tenant.ID || !s.ExpiresAt.Equal(t0.Add(auth.DefaultAbsoluteTimeout)) {
		t.Errorf("session %+v", s)
	}
	got, err := e.svc.Session(ctx, s.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != s.ID || got.CSRF != s.CSRF || got.User.Name != "alice" || got.Tenant.Name != "acme" {
		t.Errorf("Session = %+v", got)
	}
	if len(got.AMR) != 1 || got.AMR[0] != auth.AMRPassword {
		t.Errorf("AMR = %v", got.AMR)
	}
	// Each sign-in is a new session.
	s2, err := e.svc.Login(ctx, "acme", "alice", alicePW, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if s2.ID == s.ID || s2.CSRF == s.CSRF {
		t.Error("a second sign-in reused the session id or CSRF token")
	}
}

func TestLoginFailuresLookAlike(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.SetUserDisabled(ctx, e.admin, e.alice.ID, true); err != nil {
		t.Fatal(err)
	}
	mustUser(t, e.st, e.tenant.ID, "bob", models.RoleReviewer, "bob-password-1")
	for name, try := range map[string][3]string{
		"wrong password":   {"acme", "bob", "wrong-password"},
		"unknown user":     {"acme", "nobody", "bob-password-1"},
		"unknown tenant":   {"nowhere", "bob", "bob-password-1"},
		"disabled user":    {"acme", "alice", alicePW},
		"empty password":   {"acme", "bob", ""},
		"oversize name":    {"acme", strings.Repeat("b", 500), "x"},
		"tenant case":      {"ACME", "bob", "bob-password-1"},
		"another's secret": {"acme", "bob", alicePW},
	} {
		_, err := e.svc.Login(ctx, try[0], try[1], try[2], "")
		if !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("%s: err %v, want unauthenticated", name, err)
			continue
		}
		if got, want := models.ErrorMessage(err), "wrong organization, username or password"; got != want {
			t.Errorf("%s: message %q, want %q", name, got, want)
		}
	}
}

func TestLoginBackoffPerAccount(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range 5 {
		if _, err := e.svc.Login(ctx, "acme", "alice", "wrong-password", "192.0.2.1"); !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	// The free failures are spent: the next attempt waits, even with the
	// right password, and the wait doubles with every further attempt.
	_, err := e.svc.Login(ctx, "acme", "alice", alicePW, "192.0.2.1")
	if !models.IsCode(err, models.ERateLimited) {
		t.Fatalf("sixth attempt: %v, want rate_limited", err)
	}
	msg := models.ErrorMessage(err)
	if !strings.Contains(msg, "Try again in 2 seconds") {
		t.Errorf("message %q does not say when to try again", msg)
	}
	if secs, ok := auth.RetryAfter(err); !ok || secs != 2 {
		t.Errorf("RetryAfter = %d, %v; want 2", secs, ok)
	}
	for _, wait := range []int{2, 4, 8, 16} {
		e.clock.Advance(time.Duration(wait)*time.Second - time.Millisecond)
		if _, err := e.svc.Login(ctx, "acme", "alice", "wrong-password", "192.0.2.1"); !models.IsCode(err, models.ERateLimited) {
			t.Fatalf("a millisecond before the %d s wait ends: %v", wait, err)
		}
		e.clock.Advance(time.Millisecond)
		if _, err := e.svc.Login(ctx, "acme", "alice", "wrong-password", "192.0.2.1"); !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("when the %d s wait ends: %v", wait, err)
		}
	}
	// Another user from elsewhere is not affected.
	if _, err := e.svc.Login(ctx, "acme", "root", adminPW, "198.51.100.7"); err != nil {
		t.Errorf("another user: %v", err)
	}
	// The wait doubles up to the failure window and stays there while the
	// guessing goes on; after it the right password works and clears the
	// account's failures.
	wait := 32 * time.Second
	var waits []int
	for range 6 {
		e.clock.Advance(wait)
		if _, err := e.svc.Login(ctx, "acme", "alice", "wrong-password", "192.0.2.1"); !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("after waiting %v: %v", wait, err)
		}
		_, err := e.svc.Login(ctx, "acme", "alice", alicePW, "192.0.2.2")
		secs, ok := auth.RetryAfter(err)
		if !ok {
			t.Fatalf("right password right after a failure: %v, want rate_limited", err)
		}
		waits = append(waits, secs)
		wait = time.Duration(secs) * time.Second
	}
	if got, want := fmt.Sprint(waits), "[64 128 256 512 900 900]"; got != want {
		t.Errorf("waits = %s, want %s (doubling, capped at the failure window)", got, want)
	}
	e.clock.Advance(wait)
	if _, err := e.svc.Login(ctx, "acme", "alice", alicePW, "192.0.2.2"); err != nil {
		t.Fatalf("after the wait: %v", err)
	}
	for i := range 5 {
		if _, err := e.svc.Login(ctx, "acme", "alice", "wrong-password", "192.0.2.2"); !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("failure %d after success: %v", i+1, err)
		}
	}
}

// rememberedDevice signs in once, as a browser would, and returns the
// device its cookie would then carry.
func rememberedDevice(t *testing.T, e *env, user, pw string) auth.Device {
	t.Helper()
	s, err := e.svc.Login(context.Background(), "acme", user, pw, "192.0.2.50")
	if err != nil {
		t.Fatal(err)
	}
	d, err := auth.Device{}.Remember(s, user)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// An attacker guessing alice's password from many addresses delays
// sign-ins to her account from unknown browsers, never from hers.
func TestAttackerCannotLockOutARememberedDevice(t *testing.T) {
	eachDB(t, testAttackerCannotLockOutARememberedDevice)
}

func testAttackerCannotLockOutARememberedDevice(t *testing.T, e *env) {
	ctx := context.Background()
	device := rememberedDevice(t, e, "alice", alicePW)
	for i := range 60 {
		e.svc.Login(ctx, "acme", "alice", fmt.Sprintf("guess-%d", i), fmt.Sprintf("203.0.113.%d", i))
	}
	if _, err := e.svc.Login(ctx, "acme", "alice", alicePW, "198.51.100.1"); !models.IsCode(err, models.ERateLimited) {
		t.Fatalf("unknown browser during the attack: %v, want rate_limited", err)
	}
	s, err := e.svc.SignIn(ctx, auth.LoginAttempt{Tenant: "acme", Username: "alice", Password: alicePW,
		ClientIP: "203.0.113.7", Device: device})
	if err != nil {
		t.Fatalf("alice's own browser during the attack: %v", err)
	}
	if s.User.ID != e.alice.ID {
		t.Fatalf("signed in as %s", s.User.Name)
	}
	// Her browser's exemption covers her account only, and its own
	// guesses are bounded.
	if _, err := e.svc.SignIn(ctx, auth.LoginAttempt{Tenant: "acme", Username: "root", Password: adminPW,
		ClientIP: "203.0.113.7", Device: device}); err != nil {
		t.Errorf("another account from alice's browser, right password: %v", err)
	}
	for range auth.DefaultMaxDeviceFailures {
		e.svc.SignIn(ctx, auth.LoginAttempt{Tenant: "acme", Username: "alice", Password: "nope", Device: device})
	}
	_, err = e.svc.SignIn(ctx, auth.LoginAttempt{Tenant: "acme", Username: "alice", Password: alicePW, Device: device})
	if !models.IsCode(err, models.ERateLimited) {
		t.Errorf("after %d failures from the device: %v, want rate_limited", auth.DefaultMaxDeviceFailures, err)
	}
	// A device cookie for another account grants nothing for alice.
	other, err := auth.Device{ID: "someone-else"}.Remember(s, "someone")
	if err != nil {
		t.Fatal(err)
	}
	if other.Knows("acme", "alice") {
		t.Error("a device knows an account that never signed in from it")
	}
	if !other.KnowsOrganization("acme") || other.KnowsOrganization("globex") || (auth.Device{}).KnowsOrganization("") {
		t.Error("KnowsOrganization: want acme only")
	}
}

// Twenty failures on random names from one address (a shared proxy)
// block unknown browsers there, not reviewers whose browsers signed in
// before, and not passkey sign-in.
func TestSharedAddressFloodSparesKnownDevices(t *testing.T) {
	eachDB(t, testSharedAddressFloodSparesKnownDevices)
}

func testSharedAddressFloodSparesKnownDevices(t *testing.T, e *env) {
	ctx := context.Background()
	device := rememberedDevice(t, e, "root", adminPW)
	const proxy = "10.0.0.1"
	for i := range 20 {
		if _, err := e.svc.Login(ctx, "acme", fmt.Sprintf("random-%d", i), "x", proxy); !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if _, err := e.svc.Login(ctx, "acme", "alice", alicePW, proxy); !models.IsCode(err, models.ERateLimited) {
		t.Fatalf("unknown browser behind the flooded address: %v, want rate_limited", err)
	}
	if _, err := e.svc.SignIn(ctx, auth.LoginAttempt{Tenant: "acme", Username: "root", Password: adminPW,
		ClientIP: proxy, Device: device}); err != nil {
		t.Errorf("known browser behind the flooded address: %v", err)
	}
	if _, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, aliceKey(t, e), ""); err != nil {
		t.Errorf("passkey sign-in behind the flooded address: %v", err)
	}
}

func TestLoginRateLimitPerAddress(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// Twenty failures spread over many usernames from one address.
	for i := range 20 {
		name := "u" + strings.Repeat("x", i)
		if _, err := e.svc.Login(ctx, "acme", name, "wrong-password", "203.0.113.9"); !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if _, err := e.svc.Login(ctx, "acme", "alice", alicePW, "203.0.113.9"); !models.IsCode(err, models.ERateLimited) {
		t.Errorf("21st attempt from the address: %v, want rate_limited", err)
	}
	if _, err := e.svc.Login(ctx, "acme", "alice", alicePW, "203.0.113.10"); err != nil {
		t.Errorf("another address: %v", err)
	}
}

func TestSessionTimeouts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, err := e.svc.Login(ctx, "acme", "alice", alicePW, "")
	if err != nil {
		t.Fatal(err)
	}
	// Idle: a request every 29 minutes keeps it alive until the absolute
	// end; 30 minutes of silence ends it.
	for e.clock.Now().Add(29 * time.Minute).Before(s.ExpiresAt) {
		e.clock.Advance(29 * time.Minute)
		if _, err := e.svc.Session(ctx, s.ID, true); err != nil {
			t.Fatalf("at %v: %v", e.clock.Now(), err)
		}
	}
	e.clock.Set(s.ExpiresAt)
	if _, err := e.svc.Session(ctx, s.ID, true); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("past the absolute timeout: %v", err)
	}

	s2, err := e.svc.Login(ctx, "acme", "alice", alicePW, "")
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(auth.DefaultIdleTimeout)
	if _, err := e.svc.Session(ctx, s2.ID, true); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("idle for the idle timeout: %v", err)
	}
	for _, bad := range []string{"", "x", s2.Handle, strings.Repeat("A", 43) + "=", s2.ID + "A"} {
		if _, err := e.svc.Session(ctx, bad, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("Session(%q): %v", bad, err)
		}
	}
}

func TestLogout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s, err := e.svc.Login(ctx, "acme", "alice", alicePW, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Logout(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Session(ctx, s.ID, true); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("after logout: %v", err)
	}
	if err := e.svc.Logout(ctx, s.ID); err != nil {
		t.Errorf("second logout: %v", err)
	}
	if err := e.svc.Logout(ctx, "garbage"); err != nil {
		t.Errorf("logout of garbage: %v", err)
	}
}

func TestAdminOperations(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()

	// Reviewers may do none of it.
	if _, err := e.svc.ListUsers(ctx, e.alice); !models.IsCode(err, models.EForbidden) {
		t.Errorf("reviewer lists users: %v", err)
	}
	if _, _, err := e.svc.CreateAgent(ctx, e.alice, "bot", ""); !models.IsCode(err, models.EForbidden) {
		t.Errorf("reviewer creates an agent: %v", err)
	}
	if _, err := e.svc.SetUserDisabled(ctx, e.admin, e.admin.ID, true); !models.IsCode(err, models.EForbidden) {
		t.Errorf("admin disables themselves: %v", err)
	}
	if _, _, err := e.svc.CreateUser(ctx, e.admin, " padded", models.RoleReviewer); !models.IsCode(err, models.EInvalidRequest) {
		t.Errorf("bad name: %v", err)
	}
	if _, _, err := e.svc.CreateUser(ctx, e.admin, "carol", "owner"); !models.IsCode(err, models.EInvalidRequest) {
		t.Errorf("bad role: %v", err)
	}

	// A created user signs in with the password shown once.
	carol, pw, err := e.svc.CreateUser(ctx, e.admin, "carol", models.RoleReviewer)
	if err != nil {
		t.Fatal(err)
	}
	if len(pw) < secret.MinPasswordLen {
		t.Errorf("generated password %q is short", pw)
	}
	s, err := e.svc.Login(ctx, "acme", "carol", pw, "")
	if err != nil {
		t.Fatal(err)
	}

	// A reset ends the sessions; the old password fails, the new works.
	_, pw2, err := e.svc.ResetPassword(ctx, e.admin, carol.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Session(ctx, s.ID, true); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("session survived the reset: %v", err)
	}
	if _, err := e.svc.Login(ctx, "acme", "carol", pw, ""); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("old password: %v", err)
	}
	if _, err := e.svc.Login(ctx, "acme", "carol", pw2, ""); err != nil {
		t.Errorf("new password: %v", err)
	}

	// An agent key works until revoked.
	a, key, err := e.svc.CreateAgent(ctx, e.admin, "bot", carol.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a.OwnerUserID != carol.ID || !strings.HasPrefix(key, secret.APIKeyPrefix) {
		t.Errorf("agent %+v key %q", a, key)
	}
	if got, err := e.st.AgentByKeyHash(ctx, secret.HashAPIKey(key)); err != nil || got.ID != a.ID {
		t.Errorf("key does not authenticate: %v", err)
	}
	if _, err := e.svc.RevokeAgent(ctx, e.admin, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.AgentByKeyHash(ctx, secret.HashAPIKey(key)); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("revoked key: %v", err)
	}
	agents, err := e.svc.ListAgents(ctx, e.admin)
	if err != nil || len(agents) != 1 || agents[0].RevokedAt == nil {
		t.Errorf("agents %+v, %v", agents, err)
	}
}

func TestCookieKeysSurviveRestart(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	h1, b1, err := e.svc.CookieKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(h1) != auth.HashKeyLen || len(b1) != auth.BlockKeyLen {
		t.Fatalf("lengths %d, %d", len(h1), len(b1))
	}
	h2, b2, err := auth.New(auth.Config{Store: e.st}).CookieKeys(ctx)
	if err != nil || !bytes.Equal(h1, h2) || !bytes.Equal(b1, b2) {
		t.Errorf("a new service got other keys (%v)", err)
	}
}
