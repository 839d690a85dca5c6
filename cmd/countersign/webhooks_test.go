package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// webhookAllowSnippet returns the README's lines showing where webhooks
// may go.
func webhookAllowSnippet(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- snippet: webhook-allow -->\n```sh\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README has no snippet webhook-allow")
	}
	return strings.Split(strings.TrimSpace(string(m[1])), "\n")
}

// TestServeSendsWebhooksWhereTheReadmeSays runs the README's two ways of
// allowing webhook destinations against "countersign serve --demo": with
// the flag, an endpoint in the allowed range registers and one beside it
// does not; with the variable, a receiver on this machine gets the
// proposal's events, which without it is refused.
func TestServeSendsWebhooksWhereTheReadmeSays(t *testing.T) {
	t.Parallel()
	lines := webhookAllowSnippet(t)
	if len(lines) != 2 {
		t.Fatalf("snippet has %d lines, want 2: %q", len(lines), lines)
	}
	register := func(b banner, url string) httpResult {
		t.Helper()
		return call(t, "POST", b.url+"/api/v1/webhooks", b.agentKey, `{"url":"`+url+`"}`, nil)
	}

	// countersign serve --webhook-allow 10.20.0.0/16
	flag := strings.Fields(strings.SplitN(lines[0], "#", 2)[0])
	if len(flag) != 4 || flag[0] != "countersign" || flag[1] != "serve" || flag[2] != "--webhook-allow" {
		t.Fatalf("first line %q", lines[0])
	}
	b, _, _ := startServer(t, nil, true, "--demo", "--addr", "127.0.0.1:0", "--db", tempDB(t), "--webhook-allow", flag[3])
	if r := register(b, "http://10.20.7.8/hook"); r.status != http.StatusCreated {
		t.Errorf("an endpoint in the allowed range: %d %s", r.status, r.body)
	}
	if r := register(b, "http://10.21.7.8/hook"); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "private") {
		t.Errorf("an endpoint beside the allowed range: %d %s", r.status, r.body)
	}

	// COUNTERSIGN_WEBHOOK_ALLOW=127.0.0.0/8,::1 countersign serve
	assign := strings.Fields(strings.SplitN(lines[1], "#", 2)[0])
	name, value, ok := strings.Cut(assign[0], "=")
	if !ok || name != "COUNTERSIGN_WEBHOOK_ALLOW" || strings.Join(assign[1:], " ") != "countersign serve" {
		t.Fatalf("second line %q", lines[1])
	}
	var got atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("webhook-signature") != "" {
			got.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	strict, _, _ := startServer(t, nil, true, "--demo", "--addr", "127.0.0.1:0", "--db", tempDB(t))
	if r := register(strict, recv.URL+"/hook"); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "loopback") {
		t.Errorf("a receiver on loopback without the variable: %d %s", r.status, r.body)
	}
	b, _, _ = startServer(t, map[string]string{name: value}, true, "--demo", "--addr", "127.0.0.1:0", "--db", tempDB(t))
	if r := register(b, recv.URL+"/hook"); r.status != http.StatusCreated {
		t.Fatalf("a receiver on loopback with the variable: %d %s", r.status, r.body)
	}
	p := call(t, "POST", b.url+"/api/v1/proposals", b.agentKey,
		`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":1000,"currency":"CNY","reason":"x"}}`, nil)
	if p.status != http.StatusCreated {
		t.Fatalf("propose: %d %s", p.status, p.body)
	}
	waitFor(t, 20*time.Second, "the receiver to get the proposal's events", func() bool { return got.Load() >= 2 })
}
