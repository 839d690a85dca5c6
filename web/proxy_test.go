package web

import (
	"net/http/httptest"
	"testing"
)

// The client address the sign-in limits key on comes from X-Forwarded-For
// only when the connection's peer is a trusted proxy; a spoofed header
// from anyone else is ignored.
func TestClientAddressBehindTrustedProxies(t *testing.T) {
	trusted, err := ParsePrefixes([]string{"10.0.0.0/8", "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, peer, xff string
		trusted         bool
		want            string
	}{
		{"no proxies configured: header ignored", "203.0.113.5:4000", "198.51.100.1", false, "203.0.113.5"},
		{"no proxies configured, private peer: header ignored", "10.1.2.3:4000", "198.51.100.1", false, "10.1.2.3"},
		{"untrusted peer spoofs the header", "203.0.113.5:4000", "198.51.100.1", true, "203.0.113.5"},
		{"untrusted loopback peer", "127.0.0.1:4000", "198.51.100.1", true, "127.0.0.1"},
		{"trusted proxy", "10.1.2.3:4000", "198.51.100.1", true, "198.51.100.1"},
		{"trusted single address", "192.0.2.7:4000", "198.51.100.1", true, "198.51.100.1"},
		{"client prepends a forged hop", "10.1.2.3:4000", "6.6.6.6, 198.51.100.1", true, "198.51.100.1"},
		{"chain of trusted proxies", "10.1.2.3:4000", "198.51.100.1, 10.9.9.9", true, "198.51.100.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var list = trusted
			if !tt.trusted {
				list = nil
			}
			r := httptest.NewRequest("POST", "/login", nil)
			r.RemoteAddr = tt.peer
			r.Header.Set("X-Forwarded-For", tt.xff)
			r.Header.Set("X-Real-IP", "6.6.6.6")
			if got := ipExtractor(list)(r); got != tt.want {
				t.Errorf("client address = %q, want %q", got, tt.want)
			}
		})
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.example", ""} {
		if _, err := ParsePrefixes([]string{bad}); err == nil {
			t.Errorf("ParsePrefixes(%q) accepted", bad)
		}
	}
}
