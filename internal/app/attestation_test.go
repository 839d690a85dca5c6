package app_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
)

// With the FIDO metadata configured, a security key is registered only
// when its attestation proves a model the metadata lists and no status
// report revokes; a key that sends no attestation, an unlisted model and
// a revoked one are refused with a reason, and nothing is stored. A BLOB
// whose signature does not chain to the configured root stops the server
// before it serves.
func TestAttestationPolicyFromFIDOMetadata(t *testing.T) {
	t.Parallel()
	m := webauthntest.NewMDS(t)
	certified, revoked := [16]byte{0xc1, 1}, [16]byte{0xde, 2}
	blob := m.Blob("blob.jwt", nil, map[[16]byte]string{certified: "FIDO_CERTIFIED_L1", revoked: "REVOKED"})
	c := openConsole(t, func(cfg *app.Config) {
		cfg.RPID, cfg.Origins = testRPID, []string{testOrigin}
		cfg.FIDOMetadata, cfg.FIDOMetadataRoot = blob, m.RootFile
	})
	alice := c.alice()
	refused := func(what string, k *key, words ...string) {
		t.Helper()
		status, out := k.tryRegister(what)
		wantRefusal(t, what, status, out, http.StatusForbidden, models.EStepUpFailed, words...)
	}

	unlisted := newKey(t, alice)
	refused("an unlisted model", unlisted, "certified by the FIDO Metadata Service", "no registered metadata")
	bad := newKey(t, alice)
	bad.auth.Aaguid = revoked
	refused("a revoked model", bad, "certified by the FIDO Metadata Service", "status")
	none := newKey(t, alice)
	none.auth.Aaguid = certified
	none.attest = func(body map[string]any) {
		resp := body["response"].(map[string]any)
		raw, err := base64.RawURLEncoding.DecodeString(resp["attestationObject"].(string))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := webauthncbor.Unmarshal(raw, &obj); err != nil {
			t.Fatal(err)
		}
		obj["fmt"], obj["attStmt"] = "none", map[string]any{}
		out, err := webauthncbor.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		resp["attestationObject"] = base64.RawURLEncoding.EncodeToString(out)
	}
	refused("no attestation", none, "sent no attestation")
	if keys, _ := c.app.StepUp.Keys(t.Context(), mustUser(t, c, "alice")); len(keys) != 0 {
		t.Fatalf("refused keys were stored: %v", keys)
	}

	good := newKey(t, alice)
	good.auth.Aaguid = certified
	good.register("Certified key")
	keys, err := c.app.StepUp.Keys(t.Context(), mustUser(t, c, "alice"))
	if err != nil || len(keys) != 1 || keys[0].AttestationType != "basic_surrogate" {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	// The registered key approves as any other.
	p := c.propose("ord_2001", 50000)
	good.approve(p)
	if got := c.reloadProposal(p.ID); got.Status != models.StatusConfirmed {
		t.Fatalf("approval with the certified key: %s", got.Status)
	}

	// A BLOB signed by another key than the one the root certifies.
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged := m.Blob("forged.jwt", otherKey, map[[16]byte]string{certified: "FIDO_CERTIFIED_L1"})
	_, err = app.Open(t.Context(), app.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "f.db"),
		DefaultTenant: "demo", PasswordHash: cheapPasswordHash, RPID: testRPID, Origins: []string{testOrigin},
		FIDOMetadata: forged, FIDOMetadataRoot: m.RootFile})
	if err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("a forged BLOB: %v", err)
	}
}
