package stepup

import (
	"slices"
	"testing"
	"time"

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

// A key's model is compromised while a report in effect gives it one of
// the compromise statuses, whatever its current status and however the
// key was attested; a retired or merely uncertified model is not, nor is
// a model the metadata does not list or a key that names no model. A
// report counts from its effective date and until its sunset date.
func TestCompromised(t *testing.T) {
	var (
		certified, retired, unlisted, recertified = [16]byte{1}, [16]byte{2}, [16]byte{3}, [16]byte{4}
		future, sunset, twice                     = [16]byte{5}, [16]byte{6}, [16]byte{7}
	)
	reports := map[[16]byte][]webauthntest.Report{
		certified:   {{Status: "FIDO_CERTIFIED_L1"}},
		retired:     {{Status: "FIDO_CERTIFIED_L1"}, {Status: "RETIRED", Effective: "2026-02-01"}},
		recertified: {{Status: "USER_VERIFICATION_BYPASS", Effective: "2026-02-01"}, {Status: "FIDO_CERTIFIED_L2", Effective: "2026-03-01"}},
		future:      {{Status: "FIDO_CERTIFIED_L1"}, {Status: "REVOKED", Effective: "2026-06-02"}},
		sunset:      {{Status: "ATTESTATION_KEY_COMPROMISE", Sunset: "2026-06-02"}},
		twice:       {{Status: "REVOKED"}, {Status: "USER_KEY_REMOTE_COMPROMISE"}, {Status: "REVOKED", Effective: "2026-03-01"}},
	}
	statuses := []string{"REVOKED", "USER_VERIFICATION_BYPASS", "ATTESTATION_KEY_COMPROMISE",
		"USER_KEY_REMOTE_COMPROMISE", "USER_KEY_PHYSICAL_COMPROMISE"}
	for i, s := range statuses {
		reports[[16]byte{0xa0, byte(i)}] = []webauthntest.Report{{Status: "FIDO_CERTIFIED_L1"}, {Status: s, Effective: "2026-02-01"}}
	}
	mds := webauthntest.NewMDS(t)
	md, err := LoadMetadata(mds.BlobReports("blob.jwt", nil, reports), mds.RootFile)
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC) // the future report's effective date, the sunset's end
	key := func(format string, aaguid [16]byte) models.SecurityKey {
		return models.SecurityKey{AttestationFormat: format, AttestationType: "basic_full", AAGUID: aaguid[:]}
	}
	for i, s := range statuses {
		aaguid := [16]byte{0xa0, byte(i)}
		if got := md.Compromised(t.Context(), key("packed", aaguid), day); !slices.Equal(got, []string{s}) {
			t.Errorf("%s: %q", s, got)
		}
		// Before its report takes effect the model is not compromised.
		if got := md.Compromised(t.Context(), key("packed", aaguid), time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC)); got != nil {
			t.Errorf("%s before its effective date: %q", s, got)
		}
	}
	self := key("packed", retired)
	self.AttestationType = "basic_surrogate"
	for _, c := range []struct {
		what string
		key  models.SecurityKey
		at   time.Time
		want []string
	}{
		{"certified", key("packed", certified), day, nil},
		{"retired", key("packed", retired), day, nil},
		{"unlisted", key("packed", unlisted), day, nil},
		{"recertified after a bypass", key("packed", recertified), day, []string{"USER_VERIFICATION_BYPASS"}},
		{"revoked from this day", key("packed", future), day, []string{"REVOKED"}},
		{"revoked from the next day", key("packed", future), day.Add(-time.Millisecond), nil},
		{"compromise until its sunset", key("packed", sunset), day.Add(-time.Millisecond), []string{"ATTESTATION_KEY_COMPROMISE"}},
		{"compromise at its sunset", key("packed", sunset), day, nil},
		{"each status once", key("packed", twice), day, []string{"REVOKED", "USER_KEY_REMOTE_COMPROMISE"}},
		{"no attestation, claiming a revoked model", key("none", twice), day, []string{"REVOKED", "USER_KEY_REMOTE_COMPROMISE"}},
		{"no format, claiming a revoked model", key("", twice), day, []string{"REVOKED", "USER_KEY_REMOTE_COMPROMISE"}},
		{"self attestation of a retired model", self, day, nil},
		{"no model", key("none", [16]byte{}), day, nil},
		{"bad aaguid", models.SecurityKey{AttestationFormat: "packed", AAGUID: []byte{7}}, day, nil},
	} {
		if got := md.Compromised(t.Context(), c.key, c.at); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
	// A retired model no longer meets the policy, but only the compromised
	// ones stop working.
	if got := md.Uncertified(t.Context(), key("packed", retired)); got == "" {
		t.Error("a retired model meets the policy")
	}
}
