package webauthntest_test

import (
	"testing"

	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/countersign/countersign/internal/webauthntest"
)

// go-webauthn accepts every key NewCredential makes.
func TestNewCredentialKeysParse(t *testing.T) {
	for range 300 {
		c := webauthntest.NewCredential()
		if _, err := webauthncose.ParsePublicKey(c.Key.AttestationData()); err != nil {
			t.Fatalf("key does not parse: %v", err)
		}
	}
}
