package secret

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/argon2"
)

func TestHashPasswordRoundTrip(t *testing.T) {
	t.Parallel()
	const password = "correct horse battery staple"
	encoded, err := HashPassword(password)
	if err != nil {
		t.Fatal(err)
	}
	phc := regexp.MustCompile(`^\$argon2id\$v=19\$m=65536,t=2,p=2\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)
	if !phc.MatchString(encoded) {
		t.Errorf("HashPassword = %q, want an argon2id PHC string with a 16-byte salt and 32-byte hash", encoded)
	}
	if !VerifyPassword(encoded, password) {
		t.Error("VerifyPassword(hash, password) = false, want true")
	}
	for _, wrong := range []string{"", "correct horse battery stapl", "correct horse battery staple ", "Correct horse battery staple"} {
		if VerifyPassword(encoded, wrong) {
			t.Errorf("VerifyPassword(hash, %q) = true, want false", wrong)
		}
	}

	// A fresh salt each time: the same password never gives the same string.
	again, err := HashPassword(password)
	if err != nil {
		t.Fatal(err)
	}
	if again == encoded {
		t.Error("two hashes of the same password are equal; the salt is not random")
	}
	if !VerifyPassword(again, password) {
		t.Error("second hash does not verify")
	}
}

// The bounds are checked before hashing, whatever the cost: the cheap
// cost keeps the accepted lengths from spending seconds of argon2id at the
// production cost, which TestHashPasswordRoundTrip covers.
func TestHashPasswordLength(t *testing.T) {
	t.Parallel()
	h, err := NewPasswords(cheap, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n  int
		ok bool
	}{
		{0, false},
		{7, false},
		{8, true},
		{1024, true},
		{1025, false},
	} {
		_, err := h.Hash(strings.Repeat("x", tc.n))
		if tc.ok && err != nil {
			t.Errorf("Hash(%d bytes): %v", tc.n, err)
		}
		if !tc.ok && !errors.Is(err, ErrPasswordLength) {
			t.Errorf("Hash(%d bytes): err %v, want ErrPasswordLength", tc.n, err)
		}
	}
	if !strings.Contains(ErrPasswordLength.Error(), "8") || !strings.Contains(ErrPasswordLength.Error(), "1024") {
		t.Errorf("ErrPasswordLength = %q, want it to name the limits", ErrPasswordLength)
	}
}

// TestVerifyPasswordKnownAnswer checks against the reference implementation:
// phc-winner-argon2's CLI, `echo -n password | argon2 somesalt -id -t 2 -m 6
// -p 1 -l 24`, gives 068d62b2…. It also shows that parameters, salt and
// hash length come from the string, not from today's defaults.
func TestVerifyPasswordKnownAnswer(t *testing.T) {
	key, _ := hex.DecodeString("068d62b26455936aa6ebe60060b0a65870dbfa3ddf8d41f7")
	encoded := "$argon2id$v=19$m=64,t=2,p=1$" + b64("somesalt") + "$" + base64.RawStdEncoding.EncodeToString(key)
	if !VerifyPassword(encoded, "password") {
		t.Errorf("VerifyPassword(%q, \"password\") = false, want true", encoded)
	}
	if VerifyPassword(encoded, "passwore") {
		t.Error("known-answer hash verifies a wrong password")
	}
}

func b64(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }

func TestVerifyPasswordTampered(t *testing.T) {
	const password = "hunter2hunter2"
	// Cheap parameters keep this table fast; the format is the same.
	salt := []byte("0123456789abcdef")
	good := encode(params{memory: 64, time: 1, threads: 1}, salt, mustKey(password, salt, 64, 1, 1, 32))
	if !VerifyPassword(good, password) {
		t.Fatalf("baseline %q does not verify", good)
	}
	parts := strings.Split(good, "$")
	with := func(i int, v string) string {
		p := append([]string(nil), parts...)
		p[i] = v
		return strings.Join(p, "$")
	}
	flip := func(s string) string {
		b := []byte(s)
		if b[3] == 'A' {
			b[3] = 'B'
		} else {
			b[3] = 'A'
		}
		return string(b)
	}
	for name, encoded := range map[string]string{
		"other memory":    with(3, "m=72,t=1,p=1"),
		"other time":      with(3, "m=64,t=2,p=1"),
		"other threads":   with(3, "m=64,t=1,p=2"),
		"other salt":      with(4, flip(parts[4])),
		"other hash":      with(5, flip(parts[5])),
		"shorter hash":    with(5, parts[5][:len(parts[5])-6]),
		"argon2i":         with(1, "argon2i"),
		"argon2d":         with(1, "argon2d"),
		"version 16":      with(2, "v=16"),
		"padded salt":     with(4, parts[4]+"=="),
		"url base64 salt": with(4, strings.NewReplacer("+", "-", "/", "_").Replace(b64("\xfb\xff\xfe\xfb\xff\xfe\xfb\xff\xfe\xfb\xff\xfe"))),
	} {
		if VerifyPassword(encoded, password) {
			t.Errorf("%s: VerifyPassword(%q) = true, want false", name, encoded)
		}
	}
}

func mustKey(password string, salt []byte, m, t uint32, p uint8, n uint32) []byte {
	return argon2.IDKey([]byte(password), salt, t, m, p, n)
}

func TestVerifyPasswordMalformed(t *testing.T) {
	salt, hash := b64("0123456789abcdef"), b64("0123456789abcdef0123456789abcdef")
	for _, encoded := range []string{
		"",
		"$",
		"password",
		"$argon2id$",
		"$argon2id$v=19$m=64,t=1,p=1$" + salt,
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + hash + "$",
		"argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + hash,
		"x$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=64,t=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=64,t=1,p=1,k=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=,t=1,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=-64,t=1,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=064,t=1,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=+64,t=1,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=0x40,t=1,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=64,t=0,p=1$" + salt + "$" + hash,
		"$argon2id$v=19$m=64,t=1,p=0$" + salt + "$" + hash,
		"$argon2id$v=19$m=64,t=1,p=256$" + salt + "$" + hash,
		"$argon2id$v=19$m=8,t=1,p=2$" + salt + "$" + hash,          // below 8 KiB per lane
		"$argon2id$v=19$m=4294967295,t=1,p=1$" + salt + "$" + hash, // 4 TiB: refused, not attempted
		"$argon2id$v=19$m=64,t=1000000,p=1$" + salt + "$" + hash,   // refused, not attempted
		"$argon2id$v=19$m=64,t=1,p=1$$" + hash,                     // no salt
		"$argon2id$v=19$m=64,t=1,p=1$" + b64("short") + "$" + hash, // salt too short
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$",                // no hash
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + b64("tiny"),  // hash too short
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + hash + "!",
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + " " + hash,
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + b64Short(hash), // non-zero trailing bits
		"$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + hash + "\n",
	} {
		if VerifyPassword(encoded, "0123456789") {
			t.Errorf("VerifyPassword(%q) = true, want false", encoded)
		}
		if _, _, _, ok := decode(encoded); ok {
			t.Errorf("decode(%q) accepted a malformed string", encoded)
		}
	}
}

// b64Short changes the last character of an unpadded base64 string so that
// its unused trailing bits are non-zero: a second spelling of the same bytes.
func b64Short(s string) string {
	last := s[len(s)-1]
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.IndexByte(alphabet, last)
	return s[:len(s)-1] + string(alphabet[i+1])
}

func TestVerifyPasswordTooLong(t *testing.T) {
	salt := []byte("0123456789abcdef")
	long := strings.Repeat("x", MaxPasswordLen+1)
	encoded := encode(params{memory: 64, time: 1, threads: 1}, salt, mustKey(long, salt, 64, 1, 1, 32))
	if VerifyPassword(encoded, long) {
		t.Error("VerifyPassword accepted a password longer than MaxPasswordLen")
	}
}

func TestNewAPIKey(t *testing.T) {
	format := regexp.MustCompile(`^csk_[A-Za-z0-9_-]{43}$`)
	seen := map[string]bool{}
	for range 100 {
		key, hash, err := NewAPIKey()
		if err != nil {
			t.Fatal(err)
		}
		if !format.MatchString(key) {
			t.Fatalf("NewAPIKey key = %q, want csk_ + 43 base64url characters", key)
		}
		raw, err := base64.RawURLEncoding.Strict().DecodeString(strings.TrimPrefix(key, APIKeyPrefix))
		if err != nil || len(raw) != 32 {
			t.Fatalf("key %q does not carry 32 bytes: %d, %v", key, len(raw), err)
		}
		if got, want := hash, HashAPIKey(key); got != want {
			t.Errorf("NewAPIKey hash = %s, want HashAPIKey(key) = %s", got, want)
		}
		if seen[key] || seen[hash] {
			t.Fatalf("NewAPIKey repeated %q", key)
		}
		seen[key], seen[hash] = true, true
	}
}

func TestHashAPIKey(t *testing.T) {
	const key = "csk_test"
	sum := sha256.Sum256([]byte(key))
	if got, want := HashAPIKey(key), "sha256:"+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("HashAPIKey = %s, want %s", got, want)
	}
	// Known answer: SHA-256("abc").
	if got, want := HashAPIKey("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("HashAPIKey(abc) = %s, want %s", got, want)
	}
	if HashAPIKey("csk_a") == HashAPIKey("csk_b") {
		t.Error("different keys hash alike")
	}
}

func TestRandomToken(t *testing.T) {
	for _, n := range []int{1, 16, 32, 33} {
		tok, err := RandomToken(n)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := base64.RawURLEncoding.Strict().DecodeString(tok)
		if err != nil {
			t.Fatalf("RandomToken(%d) = %q: not unpadded base64url: %v", n, tok, err)
		}
		if len(raw) != n {
			t.Errorf("RandomToken(%d) carries %d bytes", n, len(raw))
		}
		if strings.ContainsAny(tok, "=+/") {
			t.Errorf("RandomToken(%d) = %q, want URL-safe without padding", n, tok)
		}
	}
	seen := map[string]bool{}
	for range 1000 {
		tok, err := RandomToken(16)
		if err != nil {
			t.Fatal(err)
		}
		if seen[tok] {
			t.Fatalf("RandomToken(16) repeated %q", tok)
		}
		seen[tok] = true
	}
	for _, n := range []int{0, -1} {
		if _, err := RandomToken(n); err == nil {
			t.Errorf("RandomToken(%d): no error", n)
		}
	}
}
