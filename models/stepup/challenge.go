// Package stepup is countersign's security-key step-up (SPEC section 6): the
// registration and removal of reviewers' security keys and passkeys, the
// approval of a high-risk proposal with a WebAuthn assertion whose challenge
// is bound to exactly that proposal and digest, the evidence kept of each
// such approval, and its offline verification.
//
// It wraps go-webauthn; one *webauthn.WebAuthn is made by New. Ceremony
// state lives in the database (models.Ceremony) and is consumed once, so any
// instance can finish what another began and no response counts twice.
// Whether an approval completes a quorum, whether the requester may approve
// and whether the business state is still fresh stay the protocol's
// decisions: a verified assertion ends in writes.Service.Confirm with the
// authentication methods ["pwd","webauthn"] and the evidence.
//
// Every error is a *models.Error whose message is written for the reviewer;
// the go-webauthn cause, when there is one, is kept in its Err for the logs.
package stepup

import (
	"crypto/sha256"
	"encoding/binary"
)

// NonceSize is the size of the server nonce of a transaction challenge, in
// bytes.
const NonceSize = 32

// Challenge derives the WebAuthn challenge that binds an approval to one
// proposal and the digest of its arguments:
//
//	challenge = SHA-256( len(P) || P || len(D) || D || len(N) || N )
//
// where P is the proposal id and D the args digest, each as the UTF-8 bytes
// of the string exactly as the API shows it ("prop_01…", "sha256:<64 lower
// hex>"), N is the server nonce as raw bytes (NonceSize random bytes, kept
// in the evidence as base64url), and len(x) is the byte length of x as a
// 4-byte big-endian unsigned integer. The length prefixes make the encoding
// injective: no other (P, D, N) gives the same bytes to hash.
//
// The challenge sent to the authenticator is these 32 bytes; the client data
// carries them base64url-encoded without padding. Anyone holding the
// proposal id, its digest and the nonce can recompute it.
func Challenge(proposalID, argsDigest string, nonce []byte) []byte {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(proposalID), []byte(argsDigest), nonce} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}
