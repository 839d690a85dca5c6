// Package secret makes and checks credentials: reviewer passwords (argon2id,
// stored as PHC strings), agent API keys (random, stored as SHA-256) and
// random tokens.
package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Password length limits, in bytes. The upper one keeps a request from
// handing argon2 megabytes to hash.
const (
	MinPasswordLen = 8
	MaxPasswordLen = 1024
)

// Sizes of a new password hash: a 16-byte salt and a 32-byte hash.
const (
	saltLen = 16
	hashLen = 32
)

// Bounds on the parameters a stored hash may ask for. A hash outside them is
// treated as malformed rather than computed: a corrupted or hostile row must
// not make one login take gigabytes or minutes.
const (
	maxMemory  = 1 << 21 // KiB, 2 GiB
	maxTime    = 64
	minSaltLen = 8
	maxSaltLen = 64
	minHashLen = 16
	maxHashLen = 64
)

// APIKeyPrefix starts every agent API key, so that a leaked key is easy to
// recognise (for people and for secret scanners).
const APIKeyPrefix = "csk_"

// apiKeyBytes is the entropy of an API key: 256 bits.
const apiKeyBytes = 32

// ErrPasswordLength is returned by HashPassword for a password outside
// MinPasswordLen..MaxPasswordLen bytes.
var ErrPasswordLength = fmt.Errorf("password must be %d to %d bytes long", MinPasswordLen, MaxPasswordLen)

// phcB64 is the PHC string format's base64: standard alphabet, no padding.
// Strict rejects non-zero trailing bits, so each hash has one spelling.
var phcB64 = base64.RawStdEncoding.Strict()

// HashPassword hashes with DefaultPasswordParams (see Passwords.Hash). A
// service that hashes on behalf of many users uses its own Passwords, whose
// costs come from configuration.
func HashPassword(password string) (string, error) { return defaultPasswords.Hash(password) }

// VerifyPassword checks a password against a stored hash (see
// Passwords.Verify).
func VerifyPassword(encoded, password string) bool { return defaultPasswords.Verify(encoded, password) }

// NewAPIKey returns a new agent API key, "csk_" + 32 random bytes base64url
// (no padding), and its storage hash (see HashAPIKey). The key is shown once;
// only the hash is stored.
func NewAPIKey() (key, hash string, err error) {
	t, err := RandomToken(apiKeyBytes)
	if err != nil {
		return "", "", fmt.Errorf("api key: %w", err)
	}
	key = APIKeyPrefix + t
	return key, HashAPIKey(key), nil
}

// HashAPIKey returns "sha256:" + hex(SHA-256(key)). API keys are 256-bit
// random, so a fast hash suffices and allows an indexed lookup.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// RandomToken returns n random bytes base64url-encoded (no padding). n must
// be positive.
func RandomToken(n int) (string, error) {
	if n <= 0 {
		return "", fmt.Errorf("random token of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// params are argon2id's cost parameters.
type params struct {
	memory  uint32 // KiB
	time    uint32
	threads uint8
}

func encode(p params, salt, key []byte) string {
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.memory, p.time, p.threads, phcB64.EncodeToString(salt), phcB64.EncodeToString(key))
}

var errMalformed = errors.New("malformed")

// decode parses a PHC string made by encode, accepting only argon2id,
// version 19 and parameters within the bounds above.
func decode(encoded string) (p params, salt, key []byte, ok bool) {
	parts := strings.Split(encoded, "$")
	// "", "argon2id", "v=19", "m=…,t=…,p=…", salt, hash
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, false
	}
	if parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return p, nil, nil, false
	}
	kv := strings.Split(parts[3], ",")
	if len(kv) != 3 {
		return p, nil, nil, false
	}
	m, err1 := param(kv[0], "m", 1, maxMemory)
	t, err2 := param(kv[1], "t", 1, maxTime)
	th, err3 := param(kv[2], "p", 1, 255)
	if err := errors.Join(err1, err2, err3); err != nil {
		return p, nil, nil, false
	}
	p = params{memory: m, time: t, threads: uint8(th)}
	if p.memory < 8*uint32(p.threads) { // argon2's own minimum
		return p, nil, nil, false
	}

	salt, err := decodeB64(parts[4])
	if err != nil || len(salt) < minSaltLen || len(salt) > maxSaltLen {
		return p, nil, nil, false
	}
	key, err = decodeB64(parts[5])
	if err != nil || len(key) < minHashLen || len(key) > maxHashLen {
		return p, nil, nil, false
	}
	return p, salt, key, true
}

// decodeB64 decodes PHC base64. The decoder skips CR and LF; they are
// refused here so that a stored hash has exactly one spelling.
func decodeB64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errMalformed
	}
	return phcB64.DecodeString(s)
}

// param parses "name=value" with value a decimal in [lo, hi], written
// without sign or leading zeros so that each hash has one spelling.
func param(s, name string, lo, hi uint64) (uint32, error) {
	v, ok := strings.CutPrefix(s, name+"=")
	if !ok || v == "" || v[0] == '+' || (v[0] == '0' && len(v) > 1) {
		return 0, errMalformed
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n < lo || n > hi {
		return 0, errMalformed
	}
	return uint32(n), nil
}
