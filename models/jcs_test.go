package models

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// The audit bodies' strings are written in RFC 8785 form by hand; each must
// be what the canonicalizer (checked against the RFC's vectors) makes of
// the same string: every control character, quote and backslash, runs of
// plain bytes between them, and everything beyond ASCII as is.
func TestJCSStringIsCanonical(t *testing.T) {
	strs := []string{"", "plain", `"`, `\`, `a"b\c`, "\x00", "\x1f", "\x7f", "\b\t\n\f\r", "\x01\x02x\x03",
		"<a href=\"x\">&amp;</a>", "\u2028\u2029", "é😀", "tail\\", "\"head", strings.Repeat("ab\n", 40)}
	rng := rand.New(rand.NewPCG(8785, 1))
	pieces := []string{"a", "Z", "0", " ", `"`, `\`, "\x00", "\x07", "\x1f", "\x7f", "é", "\u2028", "😀", "<", "&"}
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		strs = append(strs, b.String())
	}
	for _, s := range strs {
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Canonical(enc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := jcsString(s)
		if err != nil || got != string(want) {
			t.Fatalf("jcsString(%q) = %s, %v; canonical %s", s, got, err, want)
		}
		prefixed, err := appendJCSString([]byte("x,"), s)
		if err != nil || string(prefixed) != "x,"+string(want) {
			t.Fatalf("appendJCSString(x, %q) = %s, %v", s, prefixed, err)
		}
	}
	for _, bad := range []string{"\xff", "ok\xfe", "\xc3"} {
		if utf8.ValidString(bad) {
			t.Fatalf("%q is valid", bad)
		}
		if _, err := jcsString(bad); ErrorCode(err) != EInternal {
			t.Errorf("jcsString(%q): %v", bad, err)
		}
	}
}
