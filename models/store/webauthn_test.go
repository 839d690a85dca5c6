package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

func newKey(f consoleFixture, cred string) models.SecurityKey {
	return models.SecurityKey{TenantID: f.tenant.ID, UserID: f.reviewer.ID, Name: "YubiKey " + cred,
		CredentialID: []byte("cred-" + cred), PublicKey: []byte{0xa5, 0x01, 0x02}, PublicKeyAlgorithm: -7,
		AttestationType: "self", AttestationFormat: "packed", AAGUID: bytes.Repeat([]byte{7}, 16),
		Flags:      models.KeyFlags{UserPresent: true, UserVerified: true, BackupEligible: true, Raw: 0x4d},
		Transports: []string{"usb", "nfc"}, Attachment: "cross-platform",
		Attestation: json.RawMessage(`{"object":"o"}`), Extensions: json.RawMessage(`{"rk":true}`),
		CreatedAt: consoleNow}
}

func TestSecurityKeysKeepEveryField(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		want := newKey(f, "a")
		got, err := st.CreateSecurityKey(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		want.ID = got.ID
		keys, err := st.SecurityKeys(ctx, f.tenant.ID, f.reviewer.ID)
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys: %v %v", keys, err)
		}
		k := keys[0]
		if !bytes.Equal(k.CredentialID, want.CredentialID) || !bytes.Equal(k.PublicKey, want.PublicKey) ||
			!bytes.Equal(k.AAGUID, want.AAGUID) || k.Flags != want.Flags || k.AttestationFormat != "packed" ||
			k.AttestationType != "self" || k.PublicKeyAlgorithm != -7 || k.Attachment != "cross-platform" ||
			len(k.Transports) != 2 || k.Transports[1] != "nfc" || string(k.Attestation) != `{"object":"o"}` ||
			string(k.Extensions) != `{"rk":true}` || !k.CreatedAt.Equal(consoleNow) || k.Name != "YubiKey a" {
			t.Errorf("stored key %+v\nwant %+v", k, want)
		}

		// Credential ids are unique, across users and tenants.
		dup := newKey(f, "a")
		dup.UserID, dup.TenantID = f.otherAdmin.ID, f.other.ID
		if _, err := st.CreateSecurityKey(ctx, dup); !models.IsCode(err, models.EAlreadyExists) {
			t.Errorf("duplicate credential id: %v, want already_exists", err)
		}

		// Other tenants and users do not see it.
		if _, err := st.SecurityKey(ctx, f.other.ID, f.reviewer.ID, k.ID); !models.IsCode(err, models.ENotFound) {
			t.Errorf("other tenant: %v", err)
		}
		if _, err := st.SecurityKey(ctx, f.tenant.ID, f.admin.ID, k.ID); !models.IsCode(err, models.ENotFound) {
			t.Errorf("other user: %v", err)
		}
		if _, err := st.RenameSecurityKey(ctx, f.tenant.ID, f.admin.ID, k.ID, "mine now"); !models.IsCode(err, models.ENotFound) {
			t.Errorf("rename by another user: %v", err)
		}
		r, err := st.RenameSecurityKey(ctx, f.tenant.ID, f.reviewer.ID, k.ID, "Desk key")
		if err != nil || r.Name != "Desk key" {
			t.Errorf("rename: %+v %v", r, err)
		}

		// Removal hides it from the user but the history still finds it.
		if err := st.RemoveSecurityKey(ctx, f.tenant.ID, f.admin.ID, k.ID, "", consoleNow); !models.IsCode(err, models.ENotFound) {
			t.Errorf("removal by another user: %v", err)
		}
		if err := st.RemoveSecurityKey(ctx, f.tenant.ID, f.reviewer.ID, k.ID, "", consoleNow); err != nil {
			t.Fatal(err)
		}
		if err := st.RemoveSecurityKey(ctx, f.tenant.ID, f.reviewer.ID, k.ID, "", consoleNow); !models.IsCode(err, models.ENotFound) {
			t.Errorf("second removal: %v", err)
		}
		if keys, _ := st.SecurityKeys(ctx, f.tenant.ID, f.reviewer.ID); len(keys) != 0 {
			t.Errorf("removed key still listed: %v", keys)
		}
		byCred, err := st.SecurityKeyByCredentialID(ctx, f.tenant.ID, want.CredentialID)
		if err != nil || byCred.ID != k.ID || byCred.RemovedAt == nil {
			t.Errorf("by credential id: %+v %v", byCred, err)
		}
		if _, err := st.RecordKeyUse(ctx, f.tenant.ID, f.reviewer.ID, k.ID, models.KeyUse{SignCount: 9}, consoleNow); !models.IsCode(err, models.ENotFound) {
			t.Errorf("use of a removed key: %v", err)
		}
	})
}

func TestSignCounterNeverGoesBackwards(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		use := func(k models.SecurityKey, n uint32, at time.Duration) (models.SecurityKey, error) {
			return st.RecordKeyUse(ctx, f.tenant.ID, f.reviewer.ID, k.ID,
				models.KeyUse{SignCount: n, Flags: models.KeyFlags{UserPresent: true, UserVerified: true, BackupEligible: true, BackupState: true, Raw: 0x5d}},
				consoleNow.Add(at))
		}

		// An authenticator without a counter (always 0) may be used again and again.
		zero, err := st.CreateSecurityKey(ctx, newKey(f, "zero"))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := use(zero, 0, time.Duration(i)*time.Minute); err != nil {
				t.Fatalf("use %d of a counterless key: %v", i, err)
			}
		}

		k, err := st.CreateSecurityKey(ctx, newKey(f, "counting"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := use(k, 5, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got.SignCount != 5 || got.LastUsedAt == nil || !got.LastUsedAt.Equal(consoleNow.Add(time.Minute)) ||
			!got.Flags.BackupState || got.Flags.Raw != 0x5d {
			t.Errorf("after use: %+v", got)
		}
		if _, err := use(k, 6, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		// Standing still is a regression too (§7.2: "less than or equal").
		if _, err := use(k, 6, 3*time.Minute); !models.IsCode(err, models.EStepUpFailed) {
			t.Fatalf("same counter again: %v, want step_up_failed", err)
		}
		flagged, err := st.SecurityKey(ctx, f.tenant.ID, f.reviewer.ID, k.ID)
		if err != nil || flagged.FlaggedAt == nil || !flagged.FlaggedAt.Equal(consoleNow.Add(3*time.Minute)) || flagged.SignCount != 6 {
			t.Fatalf("the regression did not flag the key (or moved its counter): %+v %v", flagged, err)
		}
		// Once flagged, even a higher counter is refused.
		if _, err := use(k, 100, 4*time.Minute); !models.IsCode(err, models.EStepUpFailed) {
			t.Errorf("flagged key used: %v", err)
		}

		// A counter going back from 5 to 3.
		k2, err := st.CreateSecurityKey(ctx, newKey(f, "cloned"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := use(k2, 5, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := use(k2, 3, 2*time.Minute); !models.IsCode(err, models.EStepUpFailed) {
			t.Fatalf("counter 5 → 3: %v", err)
		}
		if k, _ := st.SecurityKey(ctx, f.tenant.ID, f.reviewer.ID, k2.ID); k.FlaggedAt == nil {
			t.Error("regression 5 → 3 not flagged")
		}

		// Copies of one key presenting old counters at once: flagged once.
		k3, err := st.CreateSecurityKey(ctx, newKey(f, "raced"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := use(k3, 5, time.Minute); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := use(k3, 2, 2*time.Minute); !models.IsCode(err, models.EStepUpFailed) {
					t.Errorf("concurrent regression: %v", err)
				}
			}()
		}
		wg.Wait()

		// The chain records each flag once, by the use that set it.
		entries, err := st.AuditEntries(ctx, f.tenant.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		flags := map[string]map[string]any{}
		for _, e := range entries {
			if e.Kind != models.AuditKeyFlagged {
				continue
			}
			b, _ := e.Decode()
			var d map[string]any
			if err := json.Unmarshal(b.Data, &d); err != nil {
				t.Fatal(err)
			}
			id, _ := d["key_id"].(string)
			if _, dup := flags[id]; dup {
				t.Errorf("key %s flagged twice in the chain", id)
			}
			flags[id] = d
		}
		if len(flags) != 3 || flags[k.ID] == nil || flags[k2.ID] == nil || flags[k3.ID] == nil {
			t.Fatalf("flag entries %v, want one for each of the three regressed keys", flags)
		}
		if d := flags[k2.ID]; d["stored_sign_count"] != 5.0 || d["presented_sign_count"] != 3.0 || d["user_id"] != f.reviewer.ID {
			t.Errorf("flag of k2: %v", d)
		}
	})
}

func TestConcurrentKeyUsesAdvanceOnce(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		k, err := st.CreateSecurityKey(ctx, newKey(f, "race"))
		if err != nil {
			t.Fatal(err)
		}
		// The same assertion (counter 7) presented by 10 finishes at once:
		// one advances the counter, the others see a counter that did not
		// move forward.
		var ok atomic.Int32
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				if _, err := st.RecordKeyUse(ctx, f.tenant.ID, f.reviewer.ID, k.ID, models.KeyUse{SignCount: 7}, consoleNow); err == nil {
					ok.Add(1)
				} else if !models.IsCode(err, models.EStepUpFailed) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Errorf("%d uses with counter 7 succeeded, want 1", ok.Load())
		}
	})
}

func TestCeremonyIsConsumedOnce(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		c, err := st.CreateCeremony(ctx, models.Ceremony{TenantID: f.tenant.ID, UserID: f.reviewer.ID,
			Kind: models.CeremonyRegistration, Nonce: []byte{1, 2, 3}, Challenge: "challenge-1",
			SessionData: json.RawMessage(`{"challenge":"challenge-1"}`), CreatedAt: consoleNow,
			ExpiresAt: consoleNow.Add(2 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.CeremonyByChallenge(ctx, f.tenant.ID, "challenge-1")
		if err != nil || got.ID != c.ID || got.UserID != f.reviewer.ID || !bytes.Equal(got.Nonce, []byte{1, 2, 3}) ||
			string(got.SessionData) != `{"challenge":"challenge-1"}` || got.ConsumedAt != nil || got.ProposalID != "" {
			t.Fatalf("by challenge: %+v %v", got, err)
		}
		if _, err := st.CeremonyByChallenge(ctx, f.other.ID, "challenge-1"); !models.IsCode(err, models.ENotFound) {
			t.Errorf("other tenant found the ceremony: %v", err)
		}
		if _, err := st.CreateCeremony(ctx, models.Ceremony{TenantID: f.tenant.ID, UserID: f.reviewer.ID,
			Kind: models.CeremonyRegistration, Challenge: "challenge-1", SessionData: json.RawMessage(`{}`),
			CreatedAt: consoleNow, ExpiresAt: consoleNow.Add(time.Minute)}); !models.IsCode(err, models.EAlreadyExists) {
			t.Errorf("a challenge issued twice: %v", err)
		}

		// Twenty finishes at once: exactly one consumes it.
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				err := st.ConsumeCeremony(ctx, f.tenant.ID, c.ID, consoleNow.Add(time.Minute))
				switch {
				case err == nil:
					wins.Add(1)
				case !models.IsCode(err, models.EAlreadyConsumed):
					t.Errorf("concurrent consume: %v", err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d consumptions, want 1", wins.Load())
		}
		if got, _ := st.CeremonyByChallenge(ctx, f.tenant.ID, "challenge-1"); got.ConsumedAt == nil {
			t.Error("consumed_at not recorded")
		}

		// Right-open validity: at expires_at the ceremony is over.
		c2, err := st.CreateCeremony(ctx, models.Ceremony{TenantID: f.tenant.ID, UserID: f.reviewer.ID,
			Kind: models.CeremonyRemoval, Challenge: "challenge-2", SessionData: json.RawMessage(`{}`),
			CreatedAt: consoleNow, ExpiresAt: consoleNow.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.ConsumeCeremony(ctx, f.tenant.ID, c2.ID, consoleNow.Add(time.Minute)); !models.IsCode(err, models.ECeremonyExpired) {
			t.Errorf("consume at expiry: %v, want ceremony_expired", err)
		}
		if err := st.ConsumeCeremony(ctx, f.other.ID, c2.ID, consoleNow); !models.IsCode(err, models.ENotFound) {
			t.Errorf("consume from another tenant: %v", err)
		}

		// Pruning deletes what expired.
		n, err := st.PruneConsole(ctx, consoleNow.Add(3*time.Minute))
		if err != nil || n < 2 {
			t.Fatalf("prune: %d %v", n, err)
		}
		if _, err := st.CeremonyByChallenge(ctx, f.tenant.ID, "challenge-2"); !models.IsCode(err, models.ENotFound) {
			t.Errorf("expired ceremony not pruned: %v", err)
		}
	})
}

func TestRegistrationOpenedWithoutAKeyCannotFinishOnceOneExists(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		opened := consoleNow // a proof-less registration began here
		victims := newKey(f, "victim")
		victims.CreatedAt = opened.Add(time.Second)
		if _, err := st.CreateSecurityKey(ctx, victims); err != nil {
			t.Fatal(err)
		}
		late := newKey(f, "attacker")
		late.CreatedAt = opened.Add(2 * time.Second)
		if _, err := st.CreateSecurityKeyIfNoneSince(ctx, late, opened); !models.IsCode(err, models.EStepUpFailed) {
			t.Fatalf("finish after another key appeared: %v, want step_up_failed", err)
		}
		// A registration opened after the existing key (with proof) finishes.
		if _, err := st.CreateSecurityKeyIfNoneSince(ctx, late, victims.CreatedAt); err != nil {
			t.Fatalf("registration opened after the last key: %v", err)
		}
		// Concurrent proof-less finishes: one key at most.
		f2 := consoleSetup2(t, st, f)
		var wg sync.WaitGroup
		var ok atomic.Int32
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k := newKey(f2, "race-"+string(rune('a'+i)))
				k.CreatedAt = opened.Add(time.Duration(i+1) * time.Millisecond)
				if _, err := st.CreateSecurityKeyIfNoneSince(ctx, k, opened); err == nil {
					ok.Add(1)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Fatalf("%d proof-less registrations finished, want 1", ok.Load())
		}
	})
}

// consoleSetup2 is f with its reviewer replaced by a fresh user without keys.
func consoleSetup2(t *testing.T, st *store.Store, f consoleFixture) consoleFixture {
	t.Helper()
	u, err := st.CreateUser(context.Background(), f.tenant.ID, "fresh-reviewer", models.RoleReviewer, "x")
	if err != nil {
		t.Fatal(err)
	}
	f.reviewer = u
	return f
}

// TestKeySessionsEndWithTheKey: flagging a key (its counter went
// backwards) ends every session begun with it, in the same transaction;
// removing it ends them all but the one it is removed from. Password
// sessions, another key's sessions and sessions of other users or tenants
// that happen to name the same key id are untouched, and the audit entry
// counts what it ended.
func TestKeySessionsEndWithTheKey(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		f := consoleSetup(t, st)
		flagged, err := st.CreateSecurityKey(ctx, newKey(f, "flagged"))
		if err != nil {
			t.Fatal(err)
		}
		removed, err := st.CreateSecurityKey(ctx, newKey(f, "removed"))
		if err != nil {
			t.Fatal(err)
		}
		session := func(handle string, u models.User, tenant models.Tenant, keyID string) string {
			t.Helper()
			s := models.Session{Handle: handle, User: u, Tenant: tenant, CSRF: "csrf", AMR: []string{"webauthn"}, KeyID: keyID,
				CreatedAt: consoleNow, LastSeen: consoleNow, ExpiresAt: consoleNow.Add(2 * time.Hour)}
			if err := st.CreateConsoleSession(ctx, s); err != nil {
				t.Fatal(err)
			}
			return handle
		}
		live := func(handle string) bool {
			t.Helper()
			s, err := st.TouchConsoleSession(ctx, handle, consoleNow.Add(time.Minute), time.Hour, 0, false)
			if err != nil && !models.IsCode(err, models.EUnauthenticated) {
				t.Fatal(err)
			}
			return err == nil && s.Handle == handle
		}
		flag1 := session("flag-1", f.reviewer, f.tenant, flagged.ID)
		flag2 := session("flag-2", f.reviewer, f.tenant, flagged.ID)
		rem1 := session("rem-1", f.reviewer, f.tenant, removed.ID)
		rem2 := session("rem-2", f.reviewer, f.tenant, removed.ID)
		adminSame := session("admin-same-id", f.admin, f.tenant, flagged.ID)
		otherSame := session("other-same-id", f.otherAdmin, f.other, flagged.ID)
		if s, err := st.TouchConsoleSession(ctx, flag1, consoleNow, time.Hour, 0, false); err != nil || s.KeyID != flagged.ID {
			t.Fatalf("session keeps its key: %+v %v", s, err)
		}

		use := func(n uint32) error {
			_, err := st.RecordKeyUse(ctx, f.tenant.ID, f.reviewer.ID, flagged.ID, models.KeyUse{SignCount: n}, consoleNow)
			return err
		}
		if err := use(5); err != nil {
			t.Fatal(err)
		}
		if err := use(4); err == nil {
			t.Fatal("regressed counter accepted")
		}
		want := map[string]bool{flag1: false, flag2: false, rem1: true, rem2: true, adminSame: true, otherSame: true,
			f.reviewerSession.Handle: true}
		for h, w := range want {
			if got := live(h); got != w {
				t.Errorf("after flagging: session %s live = %v, want %v", h, got, w)
			}
		}

		if err := st.RemoveSecurityKey(ctx, f.tenant.ID, f.reviewer.ID, removed.ID, rem2, consoleNow); err != nil {
			t.Fatal(err)
		}
		want[rem1] = false
		for h, w := range want {
			if got := live(h); got != w {
				t.Errorf("after removal: session %s live = %v, want %v", h, got, w)
			}
		}

		entries, err := st.AuditEntries(ctx, f.tenant.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		ended := map[string]float64{}
		for _, e := range entries {
			if e.Kind != "security_key.flagged" && e.Kind != "security_key.removed" {
				continue
			}
			b, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			var data struct {
				SessionsEnded float64 `json:"sessions_ended"`
			}
			if err := json.Unmarshal(b.Data, &data); err != nil {
				t.Fatal(err)
			}
			ended[e.Kind] = data.SessionsEnded
		}
		if ended["security_key.flagged"] != 2 || ended["security_key.removed"] != 1 {
			t.Errorf("sessions_ended in the audit = %v, want flagged 2, removed 1", ended)
		}
	})
}
