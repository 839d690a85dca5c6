package webauthntest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/google/uuid"
)

// MDS is a FIDO Metadata Service of a test's own: a root, a BLOB signing
// certificate under it, and BLOBs listing authenticator models; and a
// vendor's attestation root, which every model lists, under which Attest
// certifies a software key as the model its AAGUID names.
type MDS struct {
	t       testing.TB
	root    *x509.Certificate
	rootKey *ecdsa.PrivateKey
	leaf    *x509.Certificate
	leafKey *ecdsa.PrivateKey
	// vendor is the attestation root; attKey signs attestations under
	// attestation certificates it issues.
	vendor    *x509.Certificate
	vendorKey *ecdsa.PrivateKey
	dir       string
	// RootFile is the root certificate (PEM), for --fido-mds-root.
	RootFile string
}

// NewMDS makes the service's keys and certificates under a test directory.
func NewMDS(t testing.TB) *MDS {
	t.Helper()
	m := &MDS{t: t, dir: t.TempDir()}
	m.rootKey, m.root = m.cert("Test MDS root", nil, nil, true)
	m.leafKey, m.leaf = m.cert("Test MDS BLOB signer", m.root, m.rootKey, false)
	m.vendorKey, m.vendor = m.cert("Test vendor attestation root", nil, nil, true)
	m.RootFile = filepath.Join(m.dir, "root.pem")
	if err := os.WriteFile(m.RootFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.root.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *MDS) cert(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool) (*ecdsa.PrivateKey, *x509.Certificate) {
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

// Blob writes a BLOB listing one model per AAGUID with its status (a
// FIDO status such as FIDO_CERTIFIED_L1 or REVOKED; each model lists the
// vendor's attestation root and both basic attestation types, full (a
// certificate under that root, as Attest makes) and surrogate (self
// attestation, as a software key sends by itself), signed with signer
// (the service's BLOB signer when nil), and returns its path.
func (m *MDS) Blob(name string, signer *ecdsa.PrivateKey, models map[[16]byte]string) string {
	m.t.Helper()
	reports := make(map[[16]byte][]Report, len(models))
	for aaguid, status := range models {
		reports[aaguid] = []Report{{Status: status}}
	}
	return m.BlobReports(name, signer, reports)
}

// Report is one status report of a model: a FIDO status, the date it takes
// effect (YYYY-MM-DD; 2026-01-01 when empty) and, when set, the date it
// ends (its sunset).
type Report struct{ Status, Effective, Sunset string }

// BlobReports is Blob with each model's status reports, in order.
func (m *MDS) BlobReports(name string, signer *ecdsa.PrivateKey, models map[[16]byte][]Report) string {
	m.t.Helper()
	if signer == nil {
		signer = m.leafKey
	}
	var entries []map[string]any
	for aaguid, reports := range models {
		id := uuid.UUID(aaguid).String()
		var rs []map[string]any
		last := "2026-01-01"
		for _, r := range reports {
			if r.Effective == "" {
				r.Effective = "2026-01-01"
			}
			rep := map[string]any{"status": r.Status, "effectiveDate": r.Effective}
			if r.Sunset != "" {
				rep["sunsetDate"] = r.Sunset
			}
			rs, last = append(rs, rep), r.Effective
		}
		entries = append(entries, map[string]any{
			"aaguid": id,
			"metadataStatement": map[string]any{"description": "Test key " + id, "aaguid": id, "protocolFamily": "fido2",
				"schema": 3, "authenticatorVersion": 1, "attestationTypes": []string{"basic_full", "basic_surrogate"},
				"attestationRootCertificates": []string{base64.StdEncoding.EncodeToString(m.vendor.Raw)}},
			"statusReports":          rs,
			"timeOfLastStatusChange": last,
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

// idFIDOGenCeAAGUID is the attestation certificate extension that names
// the authenticator's model (id-fido-gen-ce-aaguid).
var idFIDOGenCeAAGUID = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 45724, 1, 1, 4}

// Attest turns a registration's self attestation (a "packed" attestation
// object signed with the credential's own key, as virtualwebauthn makes
// it) into a full basic one: signed by an attestation key whose
// certificate, under the vendor's root, names the AAGUID in the
// authenticator data. clientDataJSON is the registration's client data.
func (m *MDS) Attest(attestationObject, clientDataJSON []byte) []byte {
	m.t.Helper()
	var obj struct {
		Fmt      string         `cbor:"fmt"`
		AuthData []byte         `cbor:"authData"`
		AttStmt  map[string]any `cbor:"attStmt"`
	}
	if err := webauthncbor.Unmarshal(attestationObject, &obj); err != nil {
		m.t.Fatal(err)
	}
	if len(obj.AuthData) < 53 {
		m.t.Fatalf("authenticator data without attested credential data (%d bytes)", len(obj.AuthData))
	}
	aaguid, err := asn1.Marshal(obj.AuthData[37:53])
	if err != nil {
		m.t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		m.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject: pkix.Name{Country: []string{"US"}, Organization: []string{"Test vendor"},
			OrganizationalUnit: []string{"Authenticator Attestation"}, CommonName: "Test key attestation"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true,
		ExtraExtensions: []pkix.Extension{{Id: idFIDOGenCeAAGUID, Value: aaguid}}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.vendor, &key.PublicKey, m.vendorKey)
	if err != nil {
		m.t.Fatal(err)
	}
	hash := sha256.Sum256(clientDataJSON)
	digest := sha256.Sum256(append(append([]byte{}, obj.AuthData...), hash[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		m.t.Fatal(err)
	}
	out, err := webauthncbor.Marshal(map[string]any{"fmt": "packed", "authData": obj.AuthData,
		"attStmt": map[string]any{"alg": int64(-7), "sig": sig, "x5c": []any{der}}})
	if err != nil {
		m.t.Fatal(err)
	}
	return out
}
