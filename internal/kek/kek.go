// Package kek encrypts key material at rest with a key-encryption key (KEK):
// token signing keys, console cookie keys and any other secret a store keeps.
// Each value is sealed with AES-256-GCM under the KEK, with the KEK's id
// stored beside the ciphertext (so a wrong KEK is named, not guessed at) and
// additional authenticated data naming the row and column it belongs to (so
// a ciphertext copied into another row does not open).
package kek

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Size is the length of a KEK in bytes (AES-256).
const Size = 32

// prefix starts every sealed value: "kek1:<id>:<base64url(nonce|ciphertext)>".
const prefix = "kek1:"

// KEK is a key-encryption key. It is safe for concurrent use.
type KEK struct {
	id   string
	aead cipher.AEAD
}

// New makes a KEK of exactly Size bytes.
func New(key []byte) (*KEK, error) {
	if len(key) != Size {
		return nil, fmt.Errorf("a key-encryption key has %d bytes, not %d", Size, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("countersign kek id\x00"), key...))
	return &KEK{id: hex.EncodeToString(sum[:6]), aead: aead}, nil
}

// Parse reads a KEK written as base64 (standard or URL alphabet, padded or
// not) or hex of 32 bytes; surrounding white space is ignored.
func Parse(text string) (*KEK, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return nil, errors.New("the key-encryption key is empty")
	}
	if b, err := hex.DecodeString(s); err == nil && len(b) == Size {
		return New(b)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return New(b)
		}
	}
	return nil, fmt.Errorf("the key-encryption key is neither base64 nor hex of %d bytes (make one with: openssl rand -base64 32)", Size)
}

// Load reads a KEK from a file (see Parse).
func Load(path string) (*KEK, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key file: %w", err)
	}
	k, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("key-encryption key file %s: %w", path, err)
	}
	return k, nil
}

// Generate makes a random KEK and returns it with its base64 text.
func Generate() (*KEK, string, error) {
	b := make([]byte, Size)
	if _, err := rand.Read(b); err != nil {
		return nil, "", err
	}
	k, err := New(b)
	return k, base64.StdEncoding.EncodeToString(b), err
}

// ID names the KEK without revealing it: the first 12 hex digits of a hash.
func (k *KEK) ID() string { return k.id }

// Seal encrypts plaintext for the place named by aad (e.g.
// "signing_keys/kid_1/private_key") and returns the text to store.
func (k *KEK) Seal(plaintext []byte, aad string) string {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("kek: no randomness: %v", err)) // crypto/rand never fails on supported platforms
	}
	out := k.aead.Seal(nonce, nonce, plaintext, []byte(aad))
	return prefix + k.id + ":" + base64.RawURLEncoding.EncodeToString(out)
}

// Sealed reports whether stored is a value made by Seal, and which KEK
// sealed it.
func Sealed(stored string) (kekID string, ok bool) {
	rest, ok := strings.CutPrefix(stored, prefix)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, ":")
	return id, ok
}

// ErrWrongKEK means a value was sealed under another KEK than the ones
// given; ErrNoKEK that it is sealed and no KEK was given.
var (
	ErrWrongKEK = errors.New("sealed under another key-encryption key")
	ErrNoKEK    = errors.New("sealed, and no key-encryption key is configured")
)

// Open decrypts a value made by Seal for the same aad with one of keys
// (nil entries are skipped). Errors name the KEK the value needs.
func Open(stored, aad string, keys ...*KEK) ([]byte, error) {
	id, ok := Sealed(stored)
	if !ok {
		return nil, errors.New("not a sealed value")
	}
	var k *KEK
	given := 0
	for _, c := range keys {
		if c == nil {
			continue
		}
		given++
		if c.id == id {
			k = c
		}
	}
	switch {
	case given == 0:
		return nil, fmt.Errorf("%w (it needs KEK %s)", ErrNoKEK, id)
	case k == nil:
		return nil, fmt.Errorf("%w: it needs KEK %s", ErrWrongKEK, id)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(stored[len(prefix)+len(id)+1:])
	if err != nil || len(raw) < k.aead.NonceSize()+k.aead.Overhead() {
		return nil, errors.New("sealed value is malformed")
	}
	n := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(aad))
	if err != nil {
		return nil, fmt.Errorf("sealed value does not authenticate under KEK %s for %s (altered, or moved from another row)", id, aad)
	}
	return plain, nil
}
