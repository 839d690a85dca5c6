package auth_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
)

// TestSignInAdoptsTheBrowserZone: the zone a browser reports when it
// signs in becomes the user's when they have none; it never replaces one,
// a name that is no zone is ignored without failing the sign-in, and a
// refused sign-in stores nothing.
func TestSignInAdoptsTheBrowserZone(t *testing.T) {
	eachDB(t, testSignInAdoptsTheBrowserZone)
}

func testSignInAdoptsTheBrowserZone(t *testing.T, e *env) {
	ctx := context.Background()
	zoneOf := func(name string) string {
		t.Helper()
		u, _, err := e.st.UserCredentials(ctx, e.tenant.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		return u.TimeZone
	}
	signIn := func(name, pw, zone string) error {
		_, err := e.svc.SignIn(ctx, auth.LoginAttempt{Tenant: "acme", Username: name, Password: pw, ClientIP: "192.0.2.1", Zone: zone})
		return err
	}

	if err := signIn("alice", "wrong-password", "Asia/Shanghai"); !models.IsCode(err, models.EUnauthenticated) {
		t.Fatalf("wrong password: %v", err)
	}
	if got := zoneOf("alice"); got != "" {
		t.Fatalf("a refused sign-in stored the zone %q", got)
	}
	for _, bad := range []string{"Mars/Olympus", "Local", "../../etc/passwd", "Europe/Berlin\x00", string(make([]byte, 65))} {
		if err := signIn("alice", alicePW, bad); err != nil {
			t.Fatalf("sign-in reporting the zone %q: %v", bad, err)
		}
		if got := zoneOf("alice"); got != "" {
			t.Fatalf("the zone %q was stored as %q", bad, got)
		}
	}
	if err := signIn("alice", alicePW, ""); err != nil || zoneOf("alice") != "" {
		t.Fatalf("no zone reported: %v, stored %q", err, zoneOf("alice"))
	}
	if err := signIn("alice", alicePW, "Asia/Shanghai"); err != nil {
		t.Fatal(err)
	}
	if got := zoneOf("alice"); got != "Asia/Shanghai" {
		t.Fatalf("zone after signing in from Shanghai = %q", got)
	}
	// Another browser's zone does not replace it.
	if err := signIn("alice", alicePW, "Europe/Berlin"); err != nil {
		t.Fatal(err)
	}
	if got := zoneOf("alice"); got != "Asia/Shanghai" {
		t.Errorf("zone after signing in from Berlin = %q, want it kept", got)
	}
	// Nor does it replace a zone the user chose.
	if err := e.svc.SetTimeZone(ctx, e.admin, "UTC", false); err != nil {
		t.Fatal(err)
	}
	if err := signIn("root", adminPW, "America/New_York"); err != nil {
		t.Fatal(err)
	}
	if got := zoneOf("root"); got != "UTC" {
		t.Errorf("chosen zone after a sign-in from New York = %q, want UTC", got)
	}
}

// TestPasskeySignInAdoptsTheBrowserZone: the same for a passkey sign-in.
func TestPasskeySignInAdoptsTheBrowserZone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := aliceKey(t, e)
	if _, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, key, "Not/AZone"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, key, "Asia/Tokyo"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, key, "Europe/Paris"); err != nil {
		t.Fatal(err)
	}
	u, _, err := e.st.UserCredentials(ctx, e.tenant.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if u.TimeZone != "Asia/Tokyo" {
		t.Errorf("zone = %q, want Asia/Tokyo (the first valid one reported)", u.TimeZone)
	}
}
