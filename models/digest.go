package models

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	"github.com/gowebpki/jcs"
)

// DigestPrefix prefixes every digest with its algorithm.
const DigestPrefix = "sha256:"

// Canonical returns the RFC 8785 (JCS) canonical form of a JSON text.
// It returns EInvalidRequest for text that is not a single JSON value.
func Canonical(doc []byte) ([]byte, error) {
	if !json.Valid(doc) {
		return nil, Errorf(EInvalidRequest, "not valid JSON")
	}
	out, err := jcs.Transform(doc)
	if err != nil {
		return nil, Wrap(EInvalidRequest, err, "JSON cannot be put in canonical form")
	}
	return out, nil
}

// Digest returns "sha256:" + hex(SHA-256(JCS(doc))). Two JSON texts with the
// same meaning give the same digest.
func Digest(doc []byte) (string, error) {
	c, err := Canonical(doc)
	if err != nil {
		return "", err
	}
	return CanonicalDigest(c), nil
}

// CanonicalDigest is Digest of a text already in canonical form
// (Canonical's output), without putting it in that form again:
// Digest(doc) == CanonicalDigest(Canonical(doc)).
func CanonicalDigest(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// DigestValue marshals v and returns its digest.
func DigestValue(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", Wrap(EInvalidRequest, err, "value cannot be encoded as JSON")
	}
	return Digest(b)
}

// ResourceSet returns the sorted, de-duplicated form of ids that a batch
// proposal fixes at proposal time, and its digest.
func ResourceSet(ids []string) ([]string, string, error) {
	set := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			set = append(set, id)
		}
	}
	sort.Strings(set)
	d, err := DigestValue(set)
	return set, d, err
}
