package stepup

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/metadata"
	"github.com/go-webauthn/webauthn/metadata/providers/memory"
	"github.com/google/uuid"

	"github.com/countersign/countersign/models"
)

// Metadata is an attestation policy: the FIDO Metadata Service's list of
// certified authenticator models (an MDS3 BLOB, read from a file the
// operator keeps current), with which a security key must prove its model
// when it is registered, and by which a registered key of a model it
// reports compromised stops approving (Compromised).
type Metadata struct {
	Provider metadata.Provider
	// Number and NextUpdate are the BLOB's serial number and the date by
	// which the service publishes the next one; Entries is how many models
	// it lists.
	Number     int
	NextUpdate time.Time
	Entries    int
}

// Stale reports whether a newer BLOB should have been published by now.
func (m *Metadata) Stale(now time.Time) bool { return now.After(m.NextUpdate.Add(24 * time.Hour)) }

// LoadMetadata reads an MDS3 BLOB from path and checks its signature chain
// against the root certificate in rootPath (PEM), or against the FIDO
// Alliance's production root when rootPath is "". Every entry must parse.
// The policy it returns accepts a key only when its model (AAGUID) has an
// entry, its attestation is of a type the entry lists and chains to the
// entry's attestation roots (never self attestation, which chains to
// nothing: FinishRegistration refuses it), and no status report marks the
// model revoked or compromised.
func LoadMetadata(path, rootPath string) (*Metadata, error) {
	blob, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("FIDO metadata: %w", err)
	}
	var opts []metadata.DecoderOption
	if rootPath != "" {
		root, err := rootCertificate(rootPath)
		if err != nil {
			return nil, err
		}
		opts = append(opts, metadata.WithRootCertificate(root))
	}
	dec, err := metadata.NewDecoder(opts...)
	if err != nil {
		return nil, fmt.Errorf("FIDO metadata: %w", err)
	}
	payload, err := dec.DecodeBytes([]byte(strings.TrimSpace(string(blob))))
	if err != nil {
		return nil, fmt.Errorf("FIDO metadata %s: the BLOB does not verify against the metadata root: %w", path, err)
	}
	md, err := dec.Parse(payload)
	if err != nil {
		return nil, fmt.Errorf("FIDO metadata %s: %w", path, err)
	}
	p, err := memory.New(memory.WithMetadata(md.ToMap()), memory.WithValidateEntry(true),
		memory.WithValidateTrustAnchor(true), memory.WithValidateStatus(true), memory.WithValidateAttestationTypes(true))
	if err != nil {
		return nil, fmt.Errorf("FIDO metadata: %w", err)
	}
	return &Metadata{Provider: p, Number: md.Parsed.Number, NextUpdate: md.Parsed.NextUpdate, Entries: len(md.Parsed.Entries)}, nil
}

// rootCertificate reads a PEM certificate and returns its DER in base64,
// as the metadata decoder takes its root.
func rootCertificate(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("FIDO metadata root: %w", err)
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != "CERTIFICATE" {
		return "", fmt.Errorf("FIDO metadata root %s: not a PEM certificate", path)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes), nil
}

// Uncertified says why a registered key does not meet the policy as the
// metadata stands now ("" when it does): registered without attestation
// (before the policy, or by an authenticator that sends none), self
// attestation (signed by the key itself, proving no model), a model the
// metadata does not list, or one a status report has since revoked. Such a
// key keeps working, unless the metadata reports its model compromised
// (Compromised); it is for its owner to replace.
func (m *Metadata) Uncertified(ctx context.Context, k models.SecurityKey) string {
	if k.AttestationFormat == "" || k.AttestationFormat == "none" {
		return "registered without attestation, so its model is unknown"
	}
	if selfAttested(k.AttestationType) {
		return "its attestation is signed by the key itself, so its model is unproven"
	}
	id, err := uuid.FromBytes(k.AAGUID)
	if err != nil {
		return "its model is unknown"
	}
	entry, err := m.Provider.GetEntry(ctx, id)
	if err != nil || entry == nil {
		return "its model is not in the FIDO metadata"
	}
	if err := m.Provider.ValidateStatusReports(ctx, entry.StatusReports); err != nil {
		var status []string
		for _, r := range metadata.EffectiveStatusReports(entry.StatusReports, time.Now()) {
			status = append(status, string(r.Status))
		}
		if len(status) == 0 {
			return "the FIDO metadata no longer certifies its model (no status report in effect)"
		}
		return "the FIDO metadata no longer certifies its model (status " + strings.Join(status, ", ") + ")"
	}
	return ""
}

// CompromisedStatuses are the FIDO statuses under which a registered key of
// the model stops counting as a security key, whenever it was registered:
// the model's certification was revoked, or its user verification, its
// attestation key or the keys it holds can be defeated. The go-webauthn
// library's default undesired statuses are these and RETIRED, which says the
// vendor no longer supports the model, not that it is unsafe: a key of a
// retired model is refused at registration but keeps working (Uncertified
// marks it).
var CompromisedStatuses = []metadata.AuthenticatorStatus{metadata.Revoked, metadata.UserVerificationBypass,
	metadata.AttestationKeyCompromise, metadata.UserKeyRemoteCompromise, metadata.UserKeyPhysicalCompromise}

// Compromised returns the CompromisedStatuses that the metadata reports, in
// effect at now, for the model of a registered key, each once, in the
// order of the reports; none when the metadata does not list the model.
// The model is the AAGUID the key gave at registration, proven by its
// attestation or not: an authenticator that sent none, or attested itself,
// still names its own model when it is honest, and one that lies has no
// reason to claim a compromised one. A key whose model is unknown (no
// AAGUID, or all zeros, as some browsers send without attestation) is
// never compromised by this test; Uncertified marks it. A report that
// names one attestation certificate counts for the whole model, as it
// does at registration.
func (m *Metadata) Compromised(ctx context.Context, k models.SecurityKey, now time.Time) []string {
	id, err := uuid.FromBytes(k.AAGUID)
	if err != nil || id == uuid.Nil {
		return nil
	}
	entry, err := m.Provider.GetEntry(ctx, id)
	if err != nil || entry == nil {
		return nil
	}
	var out []string
	for _, r := range metadata.EffectiveStatusReports(entry.StatusReports, now) {
		if slices.Contains(CompromisedStatuses, r.Status) && !slices.Contains(out, string(r.Status)) {
			out = append(out, string(r.Status))
		}
	}
	return out
}

// selfAttested reports whether an attestation type (as the library names
// it) is self attestation: signed by the credential's own key, with no
// certificate that a vendor's root vouches for.
func selfAttested(attestationType string) bool {
	return attestationType == string(metadata.BasicSurrogate) || attestationType == "self"
}
