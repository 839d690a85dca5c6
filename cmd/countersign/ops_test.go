package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
)

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMetricsOnTheirOwnAddress: with --metrics-addr the metrics are served
// there (with the token, when given) and not on the main address.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	addr := freeAddr(t)
	env := map[string]string{"COUNTERSIGN_METRICS_TOKEN": "tok-1"}
	b, _, stop := startServer(t, env, false, "--addr", "127.0.0.1:0", "--db", tempDB(t), "--metrics-addr", addr)
	defer stop()
	if r := call(t, "GET", b.url+"/metrics", "tok-1", "", nil); r.status != http.StatusNotFound {
		t.Errorf("main address /metrics: %d, want 404 when metrics have an address of their own", r.status)
	}
	if r := call(t, "GET", "http://"+addr+"/metrics", "", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("metrics address without the token: %d, want 401", r.status)
	}
	r := call(t, "GET", "http://"+addr+"/metrics", "tok-1", "", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "countersign_reconcile_backlog 0") {
		t.Errorf("metrics address with the token: %d\n%.400s", r.status, r.body)
	}
}
