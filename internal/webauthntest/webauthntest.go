// Package webauthntest holds what tests need around the software
// authenticator github.com/descope/virtualwebauthn.
package webauthntest

import (
	"crypto/ecdsa"
	"crypto/x509"

	"github.com/descope/virtualwebauthn"
)

// NewCredential returns a new P-256 credential whose public key
// virtualwebauthn encodes correctly. It writes the COSE key's x and y
// coordinates without their leading zero bytes, so about one key in 128
// comes out shorter than 32 bytes, and go-webauthn rightly refuses it:
// tests would fail at random. Keys with full-length coordinates are kept.
func NewCredential() virtualwebauthn.Credential {
	for {
		c := virtualwebauthn.NewCredential(virtualwebauthn.KeyTypeEC2)
		k, err := x509.ParsePKCS8PrivateKey(c.Key.Data)
		if err != nil {
			panic("webauthntest: " + err.Error())
		}
		ec, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			panic("webauthntest: not an ECDSA key")
		}
		if len(ec.X.Bytes()) == 32 && len(ec.Y.Bytes()) == 32 {
			return c
		}
	}
}
