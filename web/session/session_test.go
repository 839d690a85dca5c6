package session_test

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/web/session"
)

func TestSafeNext(t *testing.T) {
	for next, want := range map[string]string{
		"/":                             "/",
		"/history":                      "/history",
		"/proposals/prop_1?x=1#frag":    "/proposals/prop_1?x=1#frag",
		"/admin/agents?revoked=1":       "/admin/agents?revoked=1",
		"":                              "/",
		"history":                       "/",
		"//evil.example":                "/",
		"///evil.example":               "/",
		"/\\evil.example":               "/",
		"\\\\evil.example":              "/",
		"https://evil":                  "/",
		"HTTPS://evil":                  "/",
		"javascript:alert(1)":           "/",
		"/\tevil":                       "/",
		"/ok\r\nSet-Cookie: x=1":        "/",
		"/login":                        "/",
		"/login?next=//evil.example":    "/",
		"/logout":                       "/",
		"/" + strings.Repeat("a", 3000): "/",
	} {
		if got := session.SafeNext(next); got != want {
			t.Errorf("SafeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestLoginURL(t *testing.T) {
	for next, want := range map[string]string{
		"":                 "/login",
		"/":                "/login",
		"//evil":           "/login",
		"/history?a=1&b=2": "/login?next=%2Fhistory%3Fa%3D1%26b%3D2",
	} {
		if got := session.LoginURL(next); got != want {
			t.Errorf("LoginURL(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestNewManagerChecksKeys(t *testing.T) {
	for _, tc := range []struct {
		hash, block int
		ok          bool
	}{
		{64, 32, true}, {32, 16, true}, {64, 24, true},
		{0, 32, false}, {31, 32, false}, {64, 0, false}, {64, 20, false},
	} {
		_, err := session.NewManager(nil, session.Config{HashKey: make([]byte, tc.hash), BlockKey: make([]byte, tc.block)})
		if (err == nil) != tc.ok {
			t.Errorf("keys of %d and %d bytes: err %v, want ok=%v", tc.hash, tc.block, err, tc.ok)
		}
	}
}
