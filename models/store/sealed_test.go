package store_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/kek"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
)

func newKEK(t *testing.T) *kek.KEK {
	t.Helper()
	k, _, err := kek.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// eachDBURL runs fn, in parallel subtests, with the URL of a fresh SQLite
// and a fresh PostgreSQL database, not yet migrated, so that it can open
// stores with various options and migrate them as far as it needs.
func eachDBURL(t *testing.T, fn func(t *testing.T, url string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			url := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
			if kind == "postgres" {
				url = pgtest.DSN(t)
			}
			fn(t, url)
		})
	}
}

func openWith(t *testing.T, url string, k *kek.KEK) *store.Store {
	t.Helper()
	st, err := store.Open(url, store.Options{KEK: k, Clock: models.NewFixedClock(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// storedKeys creates a token signing key and the cookie keys and returns
// their secret material.
func storedKeys(t *testing.T, st *store.Store) (seed, hashKey, blockKey []byte) {
	t.Helper()
	ctx := context.Background()
	if err := token.New(st, token.Config{}).EnsureKey(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := st.SigningKeys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("signing keys: %v, %v", keys, err)
	}
	hk, bk, err := st.ConsoleCookieKeys(ctx, bytes.Repeat([]byte{0xA5}, 64), bytes.Repeat([]byte{0x5A}, 32), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return keys[0].Private.Seed(), hk, bk
}

// dump is every value of every table, as text.
func dump(t *testing.T, st *store.Store) string {
	t.Helper()
	ctx := context.Background()
	db := st.DB()
	q := "SELECT name FROM sqlite_master WHERE type = 'table'"
	if st.Dialect() == store.Postgres {
		q = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	var b strings.Builder
	for _, table := range tables {
		rows, err := db.QueryContext(ctx, `SELECT * FROM "`+table+`"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				if bs, ok := v.([]byte); ok {
					b.Write(bs)
				} else {
					fmt.Fprint(&b, v)
				}
				b.WriteByte('|')
			}
			b.WriteByte('\n')
		}
		rows.Close()
	}
	return b.String()
}

// assertNoPlaintext fails when any encoding of a secret appears in text.
func assertNoPlaintext(t *testing.T, text string, secrets map[string][]byte) {
	t.Helper()
	for name, s := range secrets {
		for enc, form := range map[string]string{
			"raw": string(s), "base64": base64.StdEncoding.EncodeToString(s), "base64url": base64.RawURLEncoding.EncodeToString(s),
			"hex": hex.EncodeToString(s),
		} {
			if strings.Contains(text, form) {
				t.Errorf("the database dump holds the %s in plain (%s)", name, enc)
			}
		}
	}
}

func TestKeysAreEncryptedAtRest(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		k1 := newKEK(t)
		st := openWith(t, url, k1)
		seed, hk, bk := storedKeys(t, st)
		secrets := map[string][]byte{"signing key": seed, "private key": ed25519.NewKeyFromSeed(seed), "cookie hash key": hk, "cookie block key": bk}
		text := dump(t, st)
		assertNoPlaintext(t, text, secrets)
		if n := strings.Count(text, "kek1:"+k1.ID()+":"); n != 3 {
			t.Errorf("%d sealed values in the dump, want 3", n)
		}
		if r, err := st.CheckKeys(ctx); err != nil || r.Sealed != 3 || r.Plain != 0 {
			t.Errorf("CheckKeys = %+v, %v", r, err)
		}
		// The configured KEK reads them back.
		hk2, bk2, err := st.ConsoleCookieKeys(ctx, []byte("other-hash-key-other-hash-key-32"), []byte("other-block-key-other-block-k-32"), time.Now())
		if err != nil || !bytes.Equal(hk2, hk) || !bytes.Equal(bk2, bk) {
			t.Errorf("cookie keys read back differ: %v", err)
		}

		// Another KEK, or none, is refused and named.
		k2 := newKEK(t)
		_, err = openWith(t, url, k2).CheckKeys(ctx)
		var ke *store.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, kek.ErrWrongKEK) || !strings.Contains(err.Error(), k1.ID()) || !strings.Contains(err.Error(), k2.ID()) {
			t.Errorf("wrong KEK: %v; want a KeyError naming both KEKs", err)
		}
		if _, err := openWith(t, url, k2).SigningKeys(ctx); !errors.Is(err, kek.ErrWrongKEK) {
			t.Errorf("signing keys with the wrong KEK: %v", err)
		}
		if _, err := openWith(t, url, nil).CheckKeys(ctx); !errors.Is(err, kek.ErrNoKEK) || !strings.Contains(err.Error(), "--kek-file") {
			t.Errorf("no KEK: %v", err)
		}

		// A ciphertext moved to another column does not open.
		if _, err := st.DB().ExecContext(ctx, "UPDATE console_keys SET block_key = hash_key"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CheckKeys(ctx); err == nil || !strings.Contains(err.Error(), "does not authenticate") {
			t.Errorf("a value moved between columns: %v", err)
		}
	})
}

func TestRekey(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		// Keys made before there was a KEK are stored in plain.
		plain := openWith(t, url, nil)
		seed, hk, bk := storedKeys(t, plain)
		if r, err := plain.CheckKeys(ctx); err != nil || r.Plain != 3 {
			t.Fatalf("CheckKeys = %+v, %v", r, err)
		}
		if _, err := plain.Rekey(ctx); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("rekey without a KEK: %v", err)
		}

		k1 := newKEK(t)
		st1 := openWith(t, url, k1)
		if r, err := st1.CheckKeys(ctx); err != nil || r.Plain != 3 {
			t.Fatalf("plain keys under a KEK: %+v, %v (they must still be readable, to be rekeyed)", r, err)
		}
		if n, err := st1.Rekey(ctx); err != nil || n != 3 {
			t.Fatalf("Rekey = %d, %v", n, err)
		}
		assertNoPlaintext(t, dump(t, st1), map[string][]byte{"signing key": seed, "cookie hash key": hk, "cookie block key": bk})
		if r, _ := st1.CheckKeys(ctx); r.Sealed != 3 || r.Plain != 0 {
			t.Errorf("after rekey: %+v", r)
		}

		// To a new KEK: the old one is needed once, then no longer works.
		k2 := newKEK(t)
		st2 := openWith(t, url, k2)
		if _, err := st2.Rekey(ctx); !errors.Is(err, kek.ErrWrongKEK) {
			t.Errorf("rekey without the old KEK: %v", err)
		}
		if n, err := st2.Rekey(ctx, k1); err != nil || n != 3 {
			t.Fatalf("Rekey(k1) = %d, %v", n, err)
		}
		keys, err := st2.SigningKeys(ctx)
		if err != nil || !bytes.Equal(keys[0].Private.Seed(), seed) {
			t.Errorf("the signing key changed in the rekey: %v", err)
		}
		hk2, bk2, err := st2.ConsoleCookieKeys(ctx, nil, nil, time.Now())
		if err != nil || !bytes.Equal(hk2, hk) || !bytes.Equal(bk2, bk) {
			t.Errorf("the cookie keys changed in the rekey: %v", err)
		}
		if _, err := st1.CheckKeys(ctx); !errors.Is(err, kek.ErrWrongKEK) {
			t.Errorf("the old KEK still reads the keys: %v", err)
		}
	})
}

// TestConcurrentRekeys: two rekeys racing (as from two terminals) never
// lose or garble a key: each either succeeds or is refused as
// state_changed, and every key ends sealed and unchanged.
func TestConcurrentRekeys(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		seed, hk, bk := storedKeys(t, openWith(t, url, nil))
		k := newKEK(t)
		a, b := openWith(t, url, k), openWith(t, url, k)
		errs := make(chan error, 2)
		for _, st := range []*store.Store{a, b} {
			go func() {
				_, err := st.Rekey(ctx)
				errs <- err
			}()
		}
		ok := 0
		for range 2 {
			err := <-errs
			switch {
			case err == nil:
				ok++
			case models.IsCode(err, models.EStateChanged), models.IsCode(err, models.EUnavailable):
			default:
				t.Errorf("rekey: %v", err)
			}
		}
		if ok == 0 {
			t.Fatal("neither rekey succeeded")
		}
		if r, err := a.CheckKeys(ctx); err != nil || r.Sealed != 3 || r.Plain != 0 {
			t.Fatalf("after the race: %+v, %v", r, err)
		}
		keys, _ := a.SigningKeys(ctx)
		hk2, bk2, err := a.ConsoleCookieKeys(ctx, nil, nil, time.Now())
		if err != nil || !bytes.Equal(keys[0].Private.Seed(), seed) || !bytes.Equal(hk2, hk) || !bytes.Equal(bk2, bk) {
			t.Errorf("a key changed in the race: %v", err)
		}
	})
}

// TestWebhookSecretsSealed: a webhook signing secret is key material too:
// under a KEK the database holds only its sealed form, the dispatcher reads
// it back, and another KEK cannot.
func TestWebhookSecretsSealed(t *testing.T) {
	t.Parallel()
	eachDBURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		k1 := newKEK(t)
		st := openWith(t, url, k1)
		tn, err := st.CreateTenant(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		const secret = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTMy"
		ep, err := st.CreateWebhookEndpoint(ctx, models.ActorSystem, models.WebhookEndpoint{TenantID: tn.ID, URL: "http://127.0.0.1:9/hook"}, secret)
		if err != nil {
			t.Fatal(err)
		}
		if text := dump(t, st); strings.Contains(text, secret) || strings.Contains(text, secret[len("whsec_"):]) {
			t.Error("the webhook secret is in the database dump")
		}
		if _, got, err := st.WebhookTarget(ctx, ep.ID); err != nil || got != secret {
			t.Errorf("WebhookTarget = %q, %v; want the secret back", got, err)
		}
		if _, _, err := openWith(t, url, newKEK(t)).WebhookTarget(ctx, ep.ID); !errors.Is(err, kek.ErrWrongKEK) {
			t.Errorf("another KEK read the secret: %v", err)
		}
	})
}
