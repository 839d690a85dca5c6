package app_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"golang.org/x/net/html"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
)

// With the FIDO metadata configured, a security key is registered only
// when its attestation proves a model the metadata lists and no status
// report revokes; a key that sends no attestation, one whose attestation
// is signed by itself (claiming a certified model), an unlisted model and
// a revoked one are refused with a reason, and nothing is stored. A key
// registered before the policy keeps working, and the keys page says it
// is not a certified model. A BLOB
// whose signature does not chain to the configured root stops the server
// before it serves.
func TestAttestationPolicyFromFIDOMetadata(t *testing.T) {
	t.Parallel()
	m := webauthntest.NewMDS(t)
	certified, revoked := [16]byte{0xc1, 1}, [16]byte{0xde, 2}
	blob := m.Blob("blob.jwt", nil, map[[16]byte]string{certified: "FIDO_CERTIFIED_L1", revoked: "REVOKED"})
	c := openConsole(t, func(cfg *app.Config) { cfg.RPID, cfg.Origins = testRPID, []string{testOrigin} })
	alice := c.alice()
	// A key from before the policy.
	old := newKey(t, alice)
	old.register("Old key")
	c.cfg.FIDOMetadata, c.cfg.FIDOMetadataRoot = blob, m.RootFile
	c.restart()
	refused := func(what string, k *key, words ...string) {
		t.Helper()
		status, out := k.tryRegister(what, old)
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
	if keys, _ := c.app.StepUp.Keys(t.Context(), mustUser(t, c, "alice")); len(keys) != 1 {
		t.Fatalf("refused keys were stored: %v", keys)
	}

	// A software key's own attestation (self attestation, which the
	// model's entry lists) claims the certified model but proves none.
	self := newKey(t, alice)
	self.auth.Aaguid = certified
	refused("self attestation", self, "signed by the key itself", "proves no model")
	// The same claim, attested under the vendor's root.
	good := newKey(t, alice)
	good.auth.Aaguid = certified
	good.attest = func(body map[string]any) {
		resp := body["response"].(map[string]any)
		obj, err := base64.RawURLEncoding.DecodeString(resp["attestationObject"].(string))
		if err != nil {
			t.Fatal(err)
		}
		cd, err := base64.RawURLEncoding.DecodeString(resp["clientDataJSON"].(string))
		if err != nil {
			t.Fatal(err)
		}
		resp["attestationObject"] = base64.RawURLEncoding.EncodeToString(m.Attest(obj, cd))
	}
	good.register("Certified key", old)
	keys, err := c.app.StepUp.Keys(t.Context(), mustUser(t, c, "alice"))
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	// The keys page tells the old key from the certified one; the old one
	// still works.
	page := alice.get("/settings/keys")
	var warned []string
	for _, row := range findAll(page.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "key-row" }) {
		if n := find(row, func(n *html.Node) bool { return attr(n, "data-testid") == "key-uncertified" }); n != nil {
			warned = append(warned, textOf(row))
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "Old key") || !strings.Contains(warned[0], "its attestation is signed by the key itself, so its model is unproven") {
		t.Fatalf("uncertified keys shown: %q", warned)
	}
	// The registered key approves as any other, and so does the old one.
	for i, k := range []*key{good, old} {
		p := c.propose(fmt.Sprintf("ord_200%d", i+1), 50000)
		k.approve(p)
		if got := c.reloadProposal(p.ID); got.Status != models.StatusConfirmed {
			t.Fatalf("approval with key %d: %s", i, got.Status)
		}
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
