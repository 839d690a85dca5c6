package models

import (
	"crypto/ed25519"
	"time"
)

// SigningKey is one Ed25519 key that signs confirmation tokens and
// receipts. Private is nil when only the public half is known. The token
// service makes and rotates keys; the store keeps them (sealed when a KEK
// is configured).
type SigningKey struct {
	// ID is the key id (JWS "kid"): "k_" followed by 32 lower-case hex
	// digits for keys made by the token service; URL-safe and unique.
	ID string
	// Private is the signing half; nil when only the public key is known.
	Private ed25519.PrivateKey
	// Public is the verifying half; always set.
	Public ed25519.PublicKey
	// CreatedAt is when the key was made.
	CreatedAt time.Time
	// Active marks the one key that signs new tokens.
	Active bool
}
