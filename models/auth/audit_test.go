package auth_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
)

// refusals returns the session.sign_in_failed entries of the env's chain,
// decoded.
func refusals(t *testing.T, e *env) []models.AuditBody {
	t.Helper()
	entries, err := e.st.AuditEntries(context.Background(), e.tenant.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []models.AuditBody
	for _, en := range entries {
		if en.Kind != models.AuditSignInFailed {
			continue
		}
		b, err := en.Decode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

type refusalData struct {
	UserID      string `json:"user_id"`
	Method      string `json:"method"`
	Reason      string `json:"reason"`
	KnownDevice bool   `json:"known_device"`
}

func decodeRefusal(t *testing.T, b models.AuditBody) refusalData {
	t.Helper()
	var d refusalData
	if err := json.Unmarshal(b.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// A refused password sign-in to an existing account is in the
// organization's audit chain: who was tried, why it was refused, from a
// known device or not. What the rate limits turned away and names that are
// no account's leave no entry, so guessing cannot flood the chain or write
// attacker-chosen text into it.
func TestRefusedSignInsAreAudited(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for range 5 {
			if _, err := e.svc.Login(ctx, "acme", "alice", "wrong-password", "192.0.2.1"); !models.IsCode(err, models.EUnauthenticated) {
				t.Fatal(err)
			}
		}
		got := refusals(t, e)
		if len(got) != 5 {
			t.Fatalf("%d refusals recorded for 5 wrong passwords", len(got))
		}
		for _, b := range got {
			d := decodeRefusal(t, b)
			if b.Actor != models.ActorAnonymous || d.UserID != e.alice.ID || d.Reason != "wrong_password" ||
				d.Method != models.MethodPassword || d.KnownDevice {
				t.Errorf("entry %s %+v", b.Actor, d)
			}
			if strings.Contains(string(b.Data), "wrong-password") {
				t.Errorf("the guessed password is in the chain: %s", b.Data)
			}
		}

		// Turned away by the backoff before the password is checked: no entry.
		if _, err := e.svc.Login(ctx, "acme", "alice", "wrong-password", "192.0.2.1"); !models.IsCode(err, models.ERateLimited) {
			t.Fatalf("sixth attempt: %v", err)
		}
		// Names that are no account's: no entry, and the name is nowhere.
		for _, try := range [][2]string{{"acme", "nobody"}, {"acme", "nobody\u202e"}, {"nowhere", "alice"}} {
			if _, err := e.svc.Login(ctx, try[0], try[1], "x-password", "198.51.100.9"); !models.IsCode(err, models.EUnauthenticated) {
				t.Fatalf("%v: %v", try, err)
			}
		}
		if n := len(refusals(t, e)); n != 5 {
			t.Fatalf("%d refusals after a rate-limited attempt and unknown names, want 5", n)
		}
		entries, err := e.st.AuditEntries(ctx, e.tenant.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			if strings.Contains(en.Body, "nobody") {
				t.Errorf("an unknown name entered the chain: %s", en.Body)
			}
		}

		// A disabled account, with its right password, from a browser that
		// signed in to it before.
		bob := mustUser(t, e.st, e.tenant.ID, "bob", models.RoleReviewer, "bob-password-1")
		device := rememberedDevice(t, e, "bob", "bob-password-1")
		if _, err := e.svc.SetUserDisabled(ctx, e.admin, bob.ID, true); err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.SignIn(ctx, auth.LoginAttempt{Tenant: "acme", Username: "bob", Password: "bob-password-1", Device: device})
		if !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("disabled: %v", err)
		}
		got = refusals(t, e)
		if len(got) != 6 {
			t.Fatalf("%d refusals, want 6", len(got))
		}
		if d := decodeRefusal(t, got[5]); d.UserID != bob.ID || d.Reason != "account_disabled" || !d.KnownDevice {
			t.Errorf("disabled account from its known device: %+v", d)
		}
	})
}
