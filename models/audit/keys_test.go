package audit_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/countersign/countersign/models/audit"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
)

func checkNamed(r *audit.Report, element string) (ok bool, detail string) {
	for _, c := range r.Checks {
		if c.Element == element {
			return c.OK, c.Detail
		}
	}
	return false, "no such check"
}

// plantKey writes a signing key straight into the database and makes it
// the one that signs, as someone with write access to the database but not
// to countersign could; the token service picks it up as after a rotation.
func plantKey(t *testing.T, w *world) string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kid := fmt.Sprintf("k_%x", pub[:16])
	driver, dsn, insert := "pgx", w.url,
		"INSERT INTO signing_keys (kid, private_key, public_key, active, created_at) VALUES ($1, $2, $3, true, $4)"
	if path, ok := strings.CutPrefix(w.url, "sqlite://"); ok {
		driver, dsn = "sqlite", store.SQLiteDSN(path)
		insert = "INSERT INTO signing_keys (kid, private_key, public_key, active, created_at) VALUES (?, ?, ?, true, ?)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(w.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("UPDATE signing_keys SET active = false WHERE active"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(insert, kid, base64.StdEncoding.EncodeToString(priv.Seed()), base64.StdEncoding.EncodeToString(pub),
		w.clock.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.tokens.EnsureKey(w.ctx); err != nil {
		t.Fatal(err)
	}
	return kid
}

// The chain records the keys that sign: a receipt verifies only if its
// key is one the organization's chain recorded as countersign added it.
// A key planted in the database signs a receipt that the JWKS accepts,
// but the verifier names it, before and after a restart recorded the
// planted key late.
func TestReceiptSignerIsInTheChain(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			w := newWorld(t, kind)
			r := verify(t, w.export(t), w.click)
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if ok, d := checkNamed(r, "receipt signer"); !ok || !strings.Contains(d, w.firstKID) {
				t.Fatalf("receipt signer: %v %s", ok, d)
			}
			if ok, d := checkNamed(r, "signing keys"); !ok || !strings.Contains(d, "1 signing key") {
				t.Fatalf("signing keys: %v %s", ok, d)
			}

			// A rotation through countersign: still fine, both keys recorded.
			if _, err := w.tokens.Rotate(w.ctx); err != nil {
				t.Fatal(err)
			}
			rotated := w.export(t)
			if err := verify(t, rotated, w.stepup).Err(); err != nil {
				t.Fatalf("after a rotation: %v", err)
			}
			// A checkpoint from before the rotation, signed again with the
			// new key: the key did not exist at the head it states.
			var x audit.Export
			if err := x.Read("export", bytes.NewReader(rotated)); err != nil {
				t.Fatal(err)
			}
			first := x.Checkpoints[0]
			payload, err := base64.RawURLEncoding.DecodeString(strings.Split(first.JWS, ".")[1])
			if err != nil {
				t.Fatal(err)
			}
			resigned, kid, err := w.tokens.SignDocument(w.ctx, token.TypeCheckpoint, payload)
			if err != nil {
				t.Fatal(err)
			}
			err = verify(t, bytes.Replace(rotated, []byte(first.JWS), []byte(resigned), 1), w.stepup).Err()
			if err == nil || !strings.Contains(err.Error(), kid) || !strings.Contains(err.Error(), "added only at entry") {
				t.Fatalf("an old checkpoint signed with a newer key: %v", err)
			}

			planted := plantKey(t, w)
			forged := w.resign(t, w.stepupRC)
			r = verify(t, w.export(t), forged)
			if ok, d := checkNamed(r, "receipt signer"); ok || !strings.Contains(d, planted) || !strings.Contains(d, "never recorded") {
				t.Fatalf("a receipt signed by a planted key: %v %s", ok, d)
			}
			// The next start records the planted key, late: the chain
			// says so, and the receipt still does not verify.
			if n, err := w.st.RecordSigningKeys(w.ctx); err != nil || n != 1 {
				t.Fatalf("recorded %d (%v)", n, err)
			}
			r = verify(t, w.export(t), forged)
			err = r.Err()
			if err == nil || !strings.Contains(err.Error(), planted) || !strings.Contains(err.Error(), "not added through countersign") {
				t.Fatalf("after the planted key was recorded late: %v", err)
			}
		})
	}
}

// swapJWKSKey replaces the public key of the export's first JWKS key by
// another, keeping its kid.
func swapJWKSKey(t *testing.T, export []byte) []byte {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var x audit.Export
	if err := x.Read("export", bytes.NewReader(export)); err != nil {
		t.Fatal(err)
	}
	jwks := string(x.JWKS)
	i := strings.Index(jwks, `"x":"`) + 5
	j := i + strings.Index(jwks[i:], `"`)
	return bytes.Replace(export, []byte(jwks[i:j]), []byte(base64.RawURLEncoding.EncodeToString(pub)), 1)
}

// A JWKS whose key was swapped under its kid does not verify against the
// chain that recorded the key.
func TestSwappedJWKSKeyIsNamed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	err := verify(t, swapJWKSKey(t, w.export(t)), w.click).Err()
	if err == nil || !strings.Contains(err.Error(), "another public key than the JWKS") {
		t.Fatalf("swapped JWKS key: %v", err)
	}
}
