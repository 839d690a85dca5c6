package auth_test

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
)

// aliceKey registers a passkey for alice and returns it.
func aliceKey(t *testing.T, e *env) models.SecurityKey {
	t.Helper()
	return registerKey(t, e, e.alice, "Desk key", "desk")
}

func registerKey(t *testing.T, e *env, u models.User, name, cred string) models.SecurityKey {
	t.Helper()
	k, err := e.st.CreateSecurityKey(context.Background(), models.SecurityKey{TenantID: e.tenant.ID, UserID: u.ID,
		Name: name, CredentialID: []byte("cred-" + cred), PublicKey: []byte{0xa5, 0x01, 0x02}, PublicKeyAlgorithm: -7,
		AttestationType: "basic", AttestationFormat: "packed", AAGUID: bytes.Repeat([]byte{cred[0]}, 16),
		Flags: models.KeyFlags{UserPresent: true, UserVerified: true}, CreatedAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// modelPolicy reports one key model (AAGUID) compromised once flipped on,
// the way a metadata BLOB published after the sign-in does.
type modelPolicy struct {
	aaguid []byte
	on     atomic.Bool
	asked  atomic.Int32
}

func (p *modelPolicy) Compromised(_ context.Context, k models.SecurityKey) string {
	p.asked.Add(1)
	if p.on.Load() && bytes.Equal(k.AAGUID, p.aaguid) {
		return "model reported compromised"
	}
	return ""
}

// TestPasskeyLoginTakesOnlyTheUsersKey: the key a passkey session names
// must be the signing-in user's, in that tenant; anything else is the
// same refusal as a bad sign-in, and no session starts.
func TestPasskeyLoginTakesOnlyTheUsersKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rootKey := registerKey(t, e, e.admin, "Root key", "root")
	other, err := e.st.CreateTenant(ctx, "globex")
	if err != nil {
		t.Fatal(err)
	}
	foreign := aliceKey(t, e)
	foreign.TenantID = other.ID
	for name, k := range map[string]models.SecurityKey{
		"no key":              {},
		"another user's key":  rootKey,
		"key of other tenant": foreign,
	} {
		if _, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, k, ""); !models.IsCode(err, models.EUnauthenticated) {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
}

// TestPasskeySessionEndsWhenItsModelIsReportedCompromised: under the
// attestation policy, a session begun with a passkey ends at its next
// request once the key's model is reported compromised, and stays ended
// when the report is withdrawn. Password sessions and sessions begun with
// another model's key are untouched, and the policy is not consulted for
// password sessions at all.
func TestPasskeySessionEndsWhenItsModelIsReportedCompromised(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	desk := aliceKey(t, e)
	travel := registerKey(t, e, e.alice, "Travel key", "travel")
	policy := &modelPolicy{aaguid: desk.AAGUID}
	e.svc = auth.New(auth.Config{Store: e.st, Clock: e.clock, Passwords: cheapPasswords, Keys: policy})

	bad, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, desk, "")
	if err != nil {
		t.Fatal(err)
	}
	good, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, travel, "")
	if err != nil {
		t.Fatal(err)
	}
	pw, err := e.svc.Login(ctx, "acme", "alice", alicePW, "192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.svc.Session(ctx, bad.ID, true); err != nil || got.KeyID != desk.ID {
		t.Fatalf("before the report: %+v %v", got, err)
	}
	policy.asked.Store(0)
	if _, err := e.svc.Session(ctx, pw.ID, true); err != nil {
		t.Fatal(err)
	}
	if n := policy.asked.Load(); n != 0 {
		t.Errorf("policy consulted %d times for a password session", n)
	}

	policy.on.Store(true)
	_, err = e.svc.Session(ctx, bad.ID, true)
	if !models.IsCode(err, models.EUnauthenticated) || !strings.Contains(err.Error(), "Desk key") {
		t.Fatalf("session of the compromised model: %v, want unauthenticated naming the key", err)
	}
	for name, id := range map[string]string{"other model's session": good.ID, "password session": pw.ID} {
		if _, err := e.svc.Session(ctx, id, true); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	policy.on.Store(false)
	if _, err := e.svc.Session(ctx, bad.ID, true); !models.IsCode(err, models.EUnauthenticated) {
		t.Errorf("ended session after the report was withdrawn: %v, want it still ended", err)
	}
}

// TestPasskeySessionOfAKeyThatIsGoneEnds: a session naming a key the
// store does not hold (keys are only marked removed, so this is damage or
// a hand-edited database) ends like a compromised one instead of failing
// every request with not_found.
func TestPasskeySessionOfAKeyThatIsGoneEnds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.svc = auth.New(auth.Config{Store: e.st, Clock: e.clock, Passwords: cheapPasswords, Keys: &modelPolicy{}})
	gone := models.SecurityKey{ID: "sk_gone", TenantID: e.tenant.ID, UserID: e.alice.ID}
	s, err := e.svc.PasskeyLogin(ctx, e.tenant, e.alice, gone, "")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.svc.Session(ctx, s.ID, true); !models.IsCode(err, models.EUnauthenticated) {
			t.Fatalf("session of a key that is gone: %v, want unauthenticated", err)
		}
	}
}
