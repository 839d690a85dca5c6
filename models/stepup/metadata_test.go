package stepup

import (
	"testing"

	"github.com/countersign/countersign/internal/webauthntest"
	"github.com/countersign/countersign/models"
)

// A key is certified while the metadata lists its model with a certified
// status, and the reason names what the metadata says otherwise.
func TestUncertified(t *testing.T) {
	certified, revoked, unlisted := [16]byte{1}, [16]byte{2}, [16]byte{3}
	mds := webauthntest.NewMDS(t)
	md, err := LoadMetadata(mds.Blob("blob.jwt", nil, map[[16]byte]string{
		certified: "FIDO_CERTIFIED_L1", revoked: "REVOKED"}), mds.RootFile)
	if err != nil {
		t.Fatal(err)
	}
	key := func(format string, aaguid []byte) models.SecurityKey {
		return models.SecurityKey{AttestationFormat: format, AttestationType: "basic_full", AAGUID: aaguid}
	}
	self := key("packed", certified[:])
	self.AttestationType = "basic_surrogate"
	for _, c := range []struct {
		what string
		key  models.SecurityKey
		want string
	}{
		{"certified", key("packed", certified[:]), ""},
		{"self attestation", self, "its attestation is signed by the key itself, so its model is unproven"},
		{"revoked", key("packed", revoked[:]), "the FIDO metadata no longer certifies its model (status REVOKED)"},
		{"unlisted", key("packed", unlisted[:]), "its model is not in the FIDO metadata"},
		{"no attestation", key("none", certified[:]), "registered without attestation, so its model is unknown"},
		{"no format", key("", certified[:]), "registered without attestation, so its model is unknown"},
		{"bad aaguid", key("packed", []byte{1, 2}), "its model is unknown"},
	} {
		if got := md.Uncertified(t.Context(), c.key); got != c.want {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}
