package store_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

func newSigningKey(t *testing.T, at time.Time) models.SigningKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return models.SigningKey{ID: fmt.Sprintf("k_%x", pub[:16]), Private: priv, Public: pub, CreatedAt: at, Active: true}
}

type keyEntry struct {
	KID         string `json:"kid"`
	PublicKey   string `json:"public_key"`
	Active      bool   `json:"active"`
	PreviousKID string `json:"previous_kid"`
}

// entriesOf returns the data of the tenant's chain entries of kind,
// decoded into T, with their bodies, after checking the whole chain's links.
func entriesOf[T any](t *testing.T, st *store.Store, tenantID, kind string) ([]T, []models.AuditBody) {
	t.Helper()
	entries, err := st.AuditEntries(context.Background(), tenantID, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	checkChain(t, tenantID, entries, len(entries))
	var out []T
	var bodies []models.AuditBody
	for _, e := range entries {
		if e.Kind != kind {
			continue
		}
		b, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		var d T
		if err := json.Unmarshal(b.Data, &d); err != nil {
			t.Fatal(err)
		}
		out, bodies = append(out, d), append(bodies, b)
	}
	return out, bodies
}

// keyEntries returns the signing_key.added entries of the tenant's chain.
func keyEntries(t *testing.T, st *store.Store, tenantID string) []keyEntry {
	t.Helper()
	out, bodies := entriesOf[keyEntry](t, st, tenantID, models.AuditSigningKeyAdded)
	for _, b := range bodies {
		if b.Actor != models.ActorSystem {
			t.Errorf("key entry by %q", b.Actor)
		}
	}
	return out
}

// Every organization's chain names every signing key, exactly once: the
// keys that existed when it was created at its start, each key added
// later when it was added (with the key it replaced), also while keys are
// added and organizations created at once through several instances.
func TestSigningKeysAreInEveryChain(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			stores := sharedStores(t, kind, 3, store.Options{})
			st := stores[0]
			now := time.Now()
			early, err := st.CreateTenant(ctx, "early")
			if err != nil {
				t.Fatal(err)
			}
			if got := keyEntries(t, st, early.ID); len(got) != 0 {
				t.Fatalf("keys before there were any: %+v", got)
			}
			k1 := newSigningKey(t, now)
			if err := st.AddKey(ctx, k1); err != nil {
				t.Fatal(err)
			}
			k2 := newSigningKey(t, now.Add(time.Millisecond))
			if err := st.AddKey(ctx, k2); err != nil {
				t.Fatal(err)
			}
			got := keyEntries(t, st, early.ID)
			if len(got) != 2 || got[0].KID != k1.ID || got[0].PreviousKID != "" || got[1].KID != k2.ID ||
				got[1].PreviousKID != k1.ID || !got[1].Active {
				t.Fatalf("rotations in an existing chain: %+v", got)
			}
			if got[1].PublicKey != base64.RawURLEncoding.EncodeToString(k2.Public) {
				t.Errorf("public key %s, want k2's", got[1].PublicKey)
			}
			late, err := st.CreateTenant(ctx, "late")
			if err != nil {
				t.Fatal(err)
			}
			got = keyEntries(t, st, late.ID)
			if len(got) != 2 || got[0].KID != k1.ID || got[0].Active || got[1].KID != k2.ID || !got[1].Active {
				t.Fatalf("a new chain's start: %+v", got)
			}

			// Rotations and new organizations at once, through three
			// instances.
			const n = 12
			var wg sync.WaitGroup
			errs := make(chan error, 2*n)
			for i := range n {
				wg.Add(2)
				go func() {
					defer wg.Done()
					_, err := stores[i%3].CreateTenant(ctx, fmt.Sprintf("org-%d", i))
					errs <- err
				}()
				go func() {
					defer wg.Done()
					errs <- stores[(i+1)%3].AddKey(ctx, newSigningKey(t, time.Now()))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			keys, err := st.SigningKeys(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) != n+2 {
				t.Fatalf("%d keys, want %d", len(keys), n+2)
			}
			want := map[string]string{}
			for _, k := range keys {
				want[k.ID] = base64.RawURLEncoding.EncodeToString(k.Public)
			}
			tenants := []string{early.ID, late.ID}
			for i := range n {
				ten, err := st.TenantByName(ctx, fmt.Sprintf("org-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				tenants = append(tenants, ten.ID)
			}
			for _, id := range tenants {
				seen := map[string]int{}
				for _, k := range keyEntries(t, st, id) {
					seen[k.KID]++
					if want[k.KID] != k.PublicKey {
						t.Errorf("tenant %s: key %s recorded with another public key", id, k.KID)
					}
				}
				for kid := range want {
					if seen[kid] != 1 {
						t.Errorf("tenant %s: key %s recorded %d times", id, kid, seen[kid])
					}
				}
			}
		})
	}
}

// Keys added before chains recorded them are recorded, marked backfilled,
// when the server next starts: exactly once per organization, also when
// several instances start at once.
func TestSigningKeysFromBeforeAreBackfilled(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		old, err := store.Open(url, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { old.Close() })
		if err := old.MigrateTo(ctx, 21); err != nil {
			t.Fatal(err)
		}
		var tenants []string
		for _, name := range []string{"a", "b"} {
			ten, err := old.CreateTenant(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			tenants = append(tenants, ten.ID)
		}
		// Two keys as the older version stored them, recorded nowhere.
		for i, active := range []bool{false, true} {
			k := newSigningKey(t, time.Now())
			if err := old.Exec(ctx, "INSERT INTO signing_keys (kid, private_key, public_key, active, created_at) VALUES (?, ?, ?, ?, ?)",
				k.ID, base64.StdEncoding.EncodeToString(k.Private.Seed()), base64.StdEncoding.EncodeToString(k.Public), active, int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		stores := make([]*store.Store, 3)
		for i := range stores {
			if stores[i], err = store.Open(url, store.Options{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { stores[i].Close() })
		}
		if _, err := stores[0].Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		counts := make([]int, len(stores))
		for i, st := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := st.RecordSigningKeys(ctx)
				if err != nil {
					t.Error(err)
				}
				counts[i] = n
			}()
		}
		wg.Wait()
		if total := counts[0] + counts[1] + counts[2]; total != 4 {
			t.Fatalf("recorded %v, want 4 in all (2 keys × 2 organizations)", counts)
		}
		for _, id := range tenants {
			entries, err := stores[0].AuditEntries(ctx, id, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			got := keyEntries(t, stores[0], id)
			if len(entries) != 2 || len(got) != 2 || got[0].Active || !got[1].Active {
				t.Fatalf("tenant %s: %+v", id, got)
			}
			for _, e := range entries {
				if !strings.Contains(e.Body, `"backfilled":true`) {
					t.Errorf("not marked backfilled: %s", e.Body)
				}
			}
		}
		if n, err := stores[1].RecordSigningKeys(ctx); err != nil || n != 0 {
			t.Fatalf("again: %d (%v)", n, err)
		}
	})
}
