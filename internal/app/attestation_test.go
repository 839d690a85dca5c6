package app_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/google/uuid"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
)

// testMDS is a FIDO Metadata Service of the test's own: a root, a BLOB
// signing certificate under it, and BLOBs listing authenticator models.
type testMDS struct {
	t        *testing.T
	root     *x509.Certificate
	rootKey  *ecdsa.PrivateKey
	leaf     *x509.Certificate
	leafKey  *ecdsa.PrivateKey
	dir      string
	rootFile string
}

func newTestMDS(t *testing.T) *testMDS {
	t.Helper()
	m := &testMDS{t: t, dir: t.TempDir()}
	m.rootKey, m.root = m.cert("Test MDS root", nil, nil, true)
	m.leafKey, m.leaf = m.cert("Test MDS BLOB signer", m.root, m.rootKey, false)
	m.rootFile = filepath.Join(m.dir, "root.pem")
	if err := os.WriteFile(m.rootFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.root.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *testMDS) cert(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool) (*ecdsa.PrivateKey, *x509.Certificate) {
	m.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		m.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: ca}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		m.t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		m.t.Fatal(err)
	}
	return key, c
}

// blob writes a BLOB listing one model per AAGUID with its status, signed
// with signer (the test's BLOB signer when nil), and returns its path.
func (m *testMDS) blob(name string, signer *ecdsa.PrivateKey, models map[[16]byte]string) string {
	m.t.Helper()
	if signer == nil {
		signer = m.leafKey
	}
	var entries []map[string]any
	for aaguid, status := range models {
		id := uuid.UUID(aaguid).String()
		entries = append(entries, map[string]any{
			"aaguid": id,
			"metadataStatement": map[string]any{"description": "Test key " + status, "aaguid": id, "protocolFamily": "fido2",
				"schema": 3, "authenticatorVersion": 1, "attestationTypes": []string{"basic_surrogate"}},
			"statusReports":          []map[string]any{{"status": status, "effectiveDate": "2026-01-01"}},
			"timeOfLastStatusChange": "2026-01-01",
		})
	}
	enc := base64.RawURLEncoding
	header, _ := json.Marshal(map[string]any{"alg": "ES256", "typ": "JWT",
		"x5c": []string{base64.StdEncoding.EncodeToString(m.leaf.Raw), base64.StdEncoding.EncodeToString(m.root.Raw)}})
	payload, _ := json.Marshal(map[string]any{"legalHeader": "test", "no": 7, "nextUpdate": "2099-01-01", "entries": entries})
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	h := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, signer, h[:])
	if err != nil {
		m.t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	path := filepath.Join(m.dir, name)
	if err := os.WriteFile(path, []byte(signing+"."+enc.EncodeToString(sig)), 0o600); err != nil {
		m.t.Fatal(err)
	}
	return path
}

// With the FIDO metadata configured, a security key is registered only
// when its attestation proves a model the metadata lists and no status
// report revokes; a key that sends no attestation, an unlisted model and
// a revoked one are refused with a reason, and nothing is stored. A BLOB
// whose signature does not chain to the configured root stops the server
// before it serves.
func TestAttestationPolicyFromFIDOMetadata(t *testing.T) {
	t.Parallel()
	m := newTestMDS(t)
	certified, revoked := [16]byte{0xc1, 1}, [16]byte{0xde, 2}
	blob := m.blob("blob.jwt", nil, map[[16]byte]string{certified: "FIDO_CERTIFIED_L1", revoked: "REVOKED"})
	c := openConsole(t, func(cfg *app.Config) {
		cfg.RPID, cfg.Origins = testRPID, []string{testOrigin}
		cfg.FIDOMetadata, cfg.FIDOMetadataRoot = blob, m.rootFile
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
	forged := m.blob("forged.jwt", otherKey, map[[16]byte]string{certified: "FIDO_CERTIFIED_L1"})
	_, err = app.Open(t.Context(), app.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "f.db"),
		DefaultTenant: "demo", PasswordHash: cheapPasswordHash, RPID: testRPID, Origins: []string{testOrigin},
		FIDOMetadata: forged, FIDOMetadataRoot: m.rootFile})
	if err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("a forged BLOB: %v", err)
	}
}
