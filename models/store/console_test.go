package store_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

var consoleNow = time.Date(2026, 9, 1, 8, 0, 0, 0, time.UTC)

type consoleFixture struct {
	tenant, other    models.Tenant
	admin, reviewer  models.User
	otherAdmin       models.User
	otherAgent       models.Agent
	reviewerSession  models.Session
	reviewerSession2 models.Session
}

func consoleSetup(t *testing.T, st *store.Store) consoleFixture {
	t.Helper()
	ctx := context.Background()
	var f consoleFixture
	var err error
	if f.tenant, err = st.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if f.other, err = st.CreateTenant(ctx, "globex"); err != nil {
		t.Fatal(err)
	}
	if f.admin, err = st.CreateUser(ctx, f.tenant.ID, "root", models.RoleAdmin, "h-admin"); err != nil {
		t.Fatal(err)
	}
	if f.reviewer, err = st.CreateUser(ctx, f.tenant.ID, "alice", models.RoleReviewer, "h-alice"); err != nil {
		t.Fatal(err)
	}
	if f.otherAdmin, err = st.CreateUser(ctx, f.other.ID, "root", models.RoleAdmin, "h-other"); err != nil {
		t.Fatal(err)
	}
	if f.otherAgent, err = st.CreateAgent(ctx, f.other.ID, "bot", "", "sha256:other"); err != nil {
		t.Fatal(err)
	}
	for i, dst := range []*models.Session{&f.reviewerSession, &f.reviewerSession2} {
		*dst = models.Session{Handle: fmt.Sprintf("handle-%d", i), User: f.reviewer, Tenant: f.tenant, CSRF: "csrf",
			AMR: []string{"pwd"}, CreatedAt: consoleNow, LastSeen: consoleNow, ExpiresAt: consoleNow.Add(2 * time.Hour)}
		if err := st.CreateConsoleSession(ctx, *dst); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestConsoleSessionTimeouts(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		idle := 30 * time.Minute
		h := f.reviewerSession.Handle

		// Activity just inside the idle timeout keeps sliding it.
		now := consoleNow
		for range 3 {
			now = now.Add(idle - time.Millisecond)
			got, err := st.TouchConsoleSession(ctx, h, now, idle, 0, true)
			if err != nil {
				t.Fatalf("touch at %v: %v", now, err)
			}
			if got.User.ID != f.reviewer.ID || got.Tenant.Name != "acme" || got.CSRF != "csrf" || !got.LastSeen.Equal(now) {
				t.Fatalf("touch returned %+v", got)
			}
			if len(got.AMR) != 1 || got.AMR[0] != "pwd" {
				t.Errorf("AMR = %v", got.AMR)
			}
		}
		// Exactly idle after the last request: over.
		if _, err := st.TouchConsoleSession(ctx, h, now.Add(idle), idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("idle session: err %v, want unauthenticated", err)
		}

		// The absolute end holds whatever the activity.
		h2 := f.reviewerSession2.Handle
		end := f.reviewerSession2.ExpiresAt
		for now := consoleNow.Add(20 * time.Minute); now.Before(end); now = now.Add(20 * time.Minute) {
			if _, err := st.TouchConsoleSession(ctx, h2, now, idle, 0, true); err != nil {
				t.Fatalf("touch at %v: %v", now, err)
			}
		}
		if _, err := st.TouchConsoleSession(ctx, h2, end, idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("expired session: err %v, want unauthenticated", err)
		}
		if _, err := st.TouchConsoleSession(ctx, "no-such-handle", consoleNow, idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("unknown session: err %v, want unauthenticated", err)
		}
	})
}

// TestConsoleSessionActivityWrites: a person's requests slide the idle
// timeout but write at most once per slideEvery; background requests never
// slide it.
func TestConsoleSessionActivityWrites(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		idle, every := 30*time.Minute, time.Minute
		h := f.reviewerSession.Handle
		start := f.reviewerSession.LastSeen

		got, err := st.TouchConsoleSession(ctx, h, start.Add(59*time.Second), idle, every, true)
		if err != nil || !got.LastSeen.Equal(start) {
			t.Fatalf("activity within a minute: last seen %v (%v), want unchanged %v", got.LastSeen, err, start)
		}
		at := start.Add(time.Minute)
		if got, err = st.TouchConsoleSession(ctx, h, at, idle, every, true); err != nil || !got.LastSeen.Equal(at) {
			t.Fatalf("activity a minute later: last seen %v (%v), want %v", got.LastSeen, err, at)
		}
		// Background requests see the session but never move it.
		for _, d := range []time.Duration{10 * time.Minute, 20 * time.Minute, idle - time.Millisecond} {
			if got, err = st.TouchConsoleSession(ctx, h, at.Add(d), idle, every, false); err != nil || !got.LastSeen.Equal(at) {
				t.Fatalf("background request at +%v: last seen %v (%v), want %v", d, got.LastSeen, err, at)
			}
		}
		if _, err := st.TouchConsoleSession(ctx, h, at.Add(idle), idle, every, false); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("background request at the idle timeout: err %v, want unauthenticated", err)
		}
		// A revoked session is not revived by a late slide.
		h2 := f.reviewerSession2.Handle
		if err := st.RevokeConsoleSession(ctx, h2, start.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TouchConsoleSession(ctx, h2, start.Add(2*time.Minute), idle, every, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("revoked session: err %v", err)
		}
	})
}

func TestConsoleSessionRevocation(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		idle := time.Hour
		at := consoleNow.Add(time.Minute)
		if err := st.RevokeConsoleSession(ctx, f.reviewerSession.Handle, at); err != nil {
			t.Fatal(err)
		}
		if err := st.RevokeConsoleSession(ctx, f.reviewerSession.Handle, at); err != nil {
			t.Errorf("second revoke: %v", err)
		}
		if _, err := st.TouchConsoleSession(ctx, f.reviewerSession.Handle, at, idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("revoked session: err %v", err)
		}
		if _, err := st.TouchConsoleSession(ctx, f.reviewerSession2.Handle, at, idle, 0, true); err != nil {
			t.Errorf("the other session ended too: %v", err)
		}

		// Another tenant's id does not reach the user's sessions.
		if err := st.RevokeUserConsoleSessions(ctx, f.other.ID, f.reviewer.ID, at); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TouchConsoleSession(ctx, f.reviewerSession2.Handle, at, idle, 0, true); err != nil {
			t.Errorf("revoked through another tenant: %v", err)
		}
		if err := st.RevokeUserConsoleSessions(ctx, f.tenant.ID, f.reviewer.ID, at); err != nil {
			t.Fatal(err)
		}
		if _, err := st.TouchConsoleSession(ctx, f.reviewerSession2.Handle, at, idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("after revoking the user's sessions: err %v", err)
		}
	})
}

func TestConsoleDisableAndPasswordEndSessions(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		idle := time.Hour
		at := consoleNow.Add(time.Minute)

		u, err := st.AdminSetPassword(ctx, f.admin, f.reviewer.ID, "h-new", at)
		if err != nil {
			t.Fatal(err)
		}
		if u.ID != f.reviewer.ID {
			t.Errorf("returned user %s", u.ID)
		}
		if _, h, _ := st.UserCredentials(ctx, f.tenant.ID, "alice"); h != "h-new" {
			t.Errorf("hash = %q, want h-new", h)
		}
		for _, s := range []models.Session{f.reviewerSession, f.reviewerSession2} {
			if _, err := st.TouchConsoleSession(ctx, s.Handle, at, idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
				t.Errorf("session survived a password reset: %v", err)
			}
		}

		// A disabled user's fresh session is refused even before it is
		// revoked; disabling revokes it too.
		fresh := f.reviewerSession
		fresh.Handle = "fresh"
		if err := st.CreateConsoleSession(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		if u, err = st.AdminSetUserDisabled(ctx, f.admin, f.reviewer.ID, true, at); err != nil || !u.Disabled {
			t.Fatalf("disable: %+v, %v", u, err)
		}
		if _, err := st.TouchConsoleSession(ctx, "fresh", at, idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("disabled user's session: %v", err)
		}
		if u, err = st.AdminSetUserDisabled(ctx, f.admin, f.reviewer.ID, false, at); err != nil || u.Disabled {
			t.Fatalf("enable: %+v, %v", u, err)
		}
		if _, err := st.TouchConsoleSession(ctx, "fresh", at, idle, 0, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("re-enabling revived a revoked session: %v", err)
		}
	})
}

func TestConsoleAdminScope(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		at := consoleNow.Add(time.Minute)

		// A reviewer, or an admin who was disabled or demoted since the
		// session began, is refused inside the transaction.
		staleAdmin := f.reviewer
		staleAdmin.Role = models.RoleAdmin
		for name, actor := range map[string]models.User{"reviewer": f.reviewer, "stale": staleAdmin} {
			if _, err := st.AdminListUsers(ctx, actor); !models.IsCode(err, models.EForbidden) {
				t.Errorf("%s: list users: %v", name, err)
			}
			if _, err := st.AdminCreateAgent(ctx, actor, "x", "", "sha256:x"); !models.IsCode(err, models.EForbidden) {
				t.Errorf("%s: create agent: %v", name, err)
			}
		}

		// Another tenant's rows are not found.
		if _, err := st.AdminRevokeAgent(ctx, f.admin, f.otherAgent.ID, at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("revoke other tenant's agent: %v", err)
		}
		if a, _ := st.AgentByID(ctx, f.other.ID, f.otherAgent.ID); a.RevokedAt != nil {
			t.Error("other tenant's agent was revoked")
		}
		if _, err := st.AdminSetUserDisabled(ctx, f.admin, f.otherAdmin.ID, true, at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("disable other tenant's user: %v", err)
		}
		if _, err := st.AdminSetPassword(ctx, f.admin, f.otherAdmin.ID, "h", at); !models.IsCode(err, models.ENotFound) {
			t.Errorf("reset other tenant's password: %v", err)
		}
		if _, err := st.AdminCreateAgent(ctx, f.admin, "x", f.otherAdmin.ID, "sha256:x"); !models.IsCode(err, models.ENotFound) {
			t.Errorf("owner from another tenant: %v", err)
		}
		users, err := st.AdminListUsers(ctx, f.admin)
		if err != nil {
			t.Fatal(err)
		}
		if len(users) != 2 || users[0].Name != "alice" || users[1].Name != "root" {
			t.Errorf("users = %+v", users)
		}
		agents, err := st.AdminListAgents(ctx, f.admin)
		if err != nil || len(agents) != 0 {
			t.Errorf("agents = %+v, %v", agents, err)
		}

		// Create, list, revoke (twice) within the tenant.
		a, err := st.AdminCreateAgent(ctx, f.admin, "bot", f.reviewer.ID, "sha256:mine")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AdminCreateAgent(ctx, f.admin, "bot", "", "sha256:mine2"); !models.IsCode(err, models.EAlreadyExists) {
			t.Errorf("duplicate agent: %v", err)
		}
		if _, err := st.AdminCreateUser(ctx, f.admin, "alice", models.RoleReviewer, "h"); !models.IsCode(err, models.EAlreadyExists) {
			t.Errorf("duplicate user: %v", err)
		}
		for range 2 {
			got, err := st.AdminRevokeAgent(ctx, f.admin, a.ID, at)
			if err != nil || got.RevokedAt == nil || !got.RevokedAt.Equal(at) {
				t.Errorf("revoke: %+v, %v", got, err)
			}
		}
		if _, err := st.AgentByKeyHash(ctx, "sha256:mine"); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("revoked key still authenticates: %v", err)
		}
	})
}

func TestLoginAttemptLimits(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		window := 15 * time.Minute
		user := models.LoginLimit{Key: "user:acme\nalice", Max: 3}
		ip := models.LoginLimit{Key: "ip:192.0.2.1", Max: 5}
		limits := []models.LoginLimit{user, ip}
		reserve := func(now time.Time) (time.Time, bool) {
			t.Helper()
			at, ok, err := st.ReserveLoginAttempt(ctx, now, window, limits)
			if err != nil {
				t.Fatal(err)
			}
			return at, ok
		}
		start := consoleNow
		for i := range 3 {
			if _, ok := reserve(start.Add(time.Duration(i) * time.Minute)); !ok {
				t.Fatalf("attempt %d refused", i+1)
			}
		}
		retryAt, ok := reserve(start.Add(5 * time.Minute))
		if ok {
			t.Fatal("fourth attempt allowed")
		}
		if want := start.Add(window); !retryAt.Equal(want) {
			t.Errorf("retryAt = %v, want %v", retryAt, want)
		}
		// The refused attempt counted against no limit: the address has
		// room for two more (3 of 5 used) under another username.
		other := []models.LoginLimit{{Key: "user:acme\nbob", Max: 3}, ip}
		for i := range 2 {
			if _, ok, err := st.ReserveLoginAttempt(ctx, start.Add(6*time.Minute), window, other); err != nil || !ok {
				t.Fatalf("bob attempt %d: ok=%v err=%v", i+1, ok, err)
			}
		}
		if _, ok, _ := st.ReserveLoginAttempt(ctx, start.Add(6*time.Minute), window, other); ok {
			t.Fatal("the address limit did not hold")
		}
		// A released attempt frees one slot; clearing frees the user key.
		if err := st.ReleaseLoginAttempt(ctx, ip.Key); err != nil {
			t.Fatal(err)
		}
		if err := st.ClearLoginAttempts(ctx, user.Key); err != nil {
			t.Fatal(err)
		}
		if _, ok := reserve(start.Add(7 * time.Minute)); !ok {
			t.Fatal("refused after clear and release")
		}
		if _, ok := reserve(start.Add(7 * time.Minute)); ok {
			t.Fatal("the address limit did not hold after one release")
		}
		// Once the window has passed, everything starts again.
		if _, ok := reserve(start.Add(window)); !ok {
			t.Fatal("refused after the window")
		}
	})
}

func TestLoginAttemptLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		limits := []models.LoginLimit{{Key: "user:acme\nalice", Max: 5}}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			allowed int
		)
		for range 30 {
			wg.Go(func() {
				_, ok, err := st.ReserveLoginAttempt(ctx, consoleNow, 15*time.Minute, limits)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if allowed != 5 {
			t.Errorf("%d of 30 parallel attempts allowed, want exactly 5", allowed)
		}
	})
}

func TestConsoleCookieKeysCreatedOnce(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		type pair struct{ h, b []byte }
		results := make([]pair, 8)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				h := bytes.Repeat([]byte{byte(i + 1)}, 64)
				b := bytes.Repeat([]byte{byte(i + 101)}, 32)
				gh, gb, err := st.ConsoleCookieKeys(ctx, h, b, consoleNow)
				if err != nil {
					t.Error(err)
				}
				results[i] = pair{gh, gb}
			})
		}
		wg.Wait()
		for i, r := range results {
			if len(r.h) != 64 || len(r.b) != 32 {
				t.Fatalf("result %d: lengths %d, %d", i, len(r.h), len(r.b))
			}
			if !bytes.Equal(r.h, results[0].h) || !bytes.Equal(r.b, results[0].b) {
				t.Errorf("instances disagree on the keys: %d vs 0", i)
			}
		}
		h, b, err := st.ConsoleCookieKeys(ctx, make([]byte, 64), make([]byte, 32), consoleNow)
		if err != nil || !bytes.Equal(h, results[0].h) || !bytes.Equal(b, results[0].b) {
			t.Errorf("later call replaced the keys (%v)", err)
		}
	})
}

func TestPruneConsole(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		idle := time.Hour
		// Session 1 is revoked at +1m; session 2 stays live (expires +2h).
		if err := st.RevokeConsoleSession(ctx, f.reviewerSession.Handle, consoleNow.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.ReserveLoginAttempt(ctx, consoleNow, 15*time.Minute, []models.LoginLimit{{Key: "ip:x", Max: 5}}); err != nil {
			t.Fatal(err)
		}
		// Nothing ended before the start.
		if n, err := st.PruneConsole(ctx, consoleNow); err != nil || n != 0 {
			t.Fatalf("prune at start: %d, %v", n, err)
		}
		if _, err := st.TouchConsoleSession(ctx, f.reviewerSession2.Handle, consoleNow.Add(30*time.Minute), idle, 0, true); err != nil {
			t.Fatal(err)
		}
		// As of +2m, the session revoked at +1m and the attempt window
		// started at 0 are over; the live session was seen at +30m.
		n, err := st.PruneConsole(ctx, consoleNow.Add(2*time.Minute))
		if err != nil || n != 2 {
			t.Fatalf("prune: %d, %v; want 2", n, err)
		}
		if _, err := st.TouchConsoleSession(ctx, f.reviewerSession2.Handle, consoleNow.Add(31*time.Minute), idle, 0, true); err != nil {
			t.Errorf("the live session was pruned: %v", err)
		}
	})
}
