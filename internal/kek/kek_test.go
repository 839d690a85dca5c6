package kek_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/kek"
)

func mustGenerate(t *testing.T) *kek.KEK {
	t.Helper()
	k, _, err := kek.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := mustGenerate(t)
	secret := []byte("the signing key seed, 32 bytes!!")
	s := k.Seal(secret, "signing_keys/kid_1/private_key")
	if strings.Contains(s, base64.StdEncoding.EncodeToString(secret)) || bytes.Contains([]byte(s), secret) {
		t.Fatal("the sealed value shows the plaintext")
	}
	if id, ok := kek.Sealed(s); !ok || id != k.ID() {
		t.Fatalf("Sealed = %q, %v; want %q", id, ok, k.ID())
	}
	got, err := kek.Open(s, "signing_keys/kid_1/private_key", k)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if s2 := k.Seal(secret, "signing_keys/kid_1/private_key"); s2 == s {
		t.Error("two seals of the same value are equal: the nonce is not fresh")
	}
}

func TestOpenRefuses(t *testing.T) {
	k, other := mustGenerate(t), mustGenerate(t)
	s := k.Seal([]byte("secret"), "console_keys/session-cookie/hash_key")

	if _, err := kek.Open(s, "console_keys/session-cookie/block_key", k); err == nil {
		t.Error("a value opened for another column")
	}
	if _, err := kek.Open(s, "console_keys/other/hash_key", k); err == nil {
		t.Error("a value opened for another row")
	}
	_, err := kek.Open(s, "console_keys/session-cookie/hash_key", other)
	if !errors.Is(err, kek.ErrWrongKEK) || !strings.Contains(err.Error(), k.ID()) {
		t.Errorf("wrong KEK: %v; want ErrWrongKEK naming %s", err, k.ID())
	}
	if _, err := kek.Open(s, "console_keys/session-cookie/hash_key"); !errors.Is(err, kek.ErrNoKEK) {
		t.Errorf("no KEK: %v", err)
	}
	// Any flipped character of the ciphertext is caught.
	body := s[strings.LastIndexByte(s, ':')+1:]
	for i := range len(body) {
		b := []byte(body)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		tampered := s[:len(s)-len(body)] + string(b)
		if _, err := kek.Open(tampered, "console_keys/session-cookie/hash_key", k); err == nil {
			t.Fatalf("a value altered at %d opened", i)
		}
	}
	// Found among several keys (as during a rekey).
	if _, err := kek.Open(s, "console_keys/session-cookie/hash_key", other, nil, k); err != nil {
		t.Errorf("keyring: %v", err)
	}
}

func TestParse(t *testing.T) {
	raw := bytes.Repeat([]byte{7}, kek.Size)
	want, _ := kek.New(raw)
	for _, text := range []string{
		base64.StdEncoding.EncodeToString(raw) + "\n",
		base64.RawURLEncoding.EncodeToString(raw),
		"  " + hex.EncodeToString(raw) + " ",
	} {
		k, err := kek.Parse(text)
		if err != nil || k.ID() != want.ID() {
			t.Errorf("Parse(%q) = %v, %v", text, k, err)
		}
	}
	for _, text := range []string{"", "short", base64.StdEncoding.EncodeToString(raw[:16]), hex.EncodeToString(raw[:31])} {
		if _, err := kek.Parse(text); err == nil {
			t.Errorf("Parse(%q) accepted", text)
		}
	}
}
