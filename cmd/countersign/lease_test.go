package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/models/registry"
)

// The lease and heartbeat flags are checked, and a registry whose tool
// needs a longer lease than --execution-lease allows does not start.
func TestExecutionLeaseFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--execution-lease", "0s"},
		{"serve", "--lease-margin", "10m"},
		{"serve", "--heartbeat-interval", "10s", "--instance-timeout", "5s"},
	} {
		if _, code := reported(invoke(t, nil, "", args...).err); code != exitUsage {
			t.Errorf("%q: exit %d, want a usage error", args, code)
		}
	}

	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	yaml := strings.Replace(string(registry.DemoYAML()), "adapter: {kind: demo_ledger}",
		"adapter: {kind: http, base_url: http://127.0.0.1:9, secret_env: BIZ_SECRET, timeout: 1m}", 1)
	if err := os.WriteFile(tools, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	r := invoke(t, map[string]string{"BIZ_SECRET": "0123456789abcdef0123456789abcdef"}, "",
		"serve", "--addr", "127.0.0.1:0", "--db", "sqlite://"+filepath.Join(dir, "c.db"), "--tools", tools,
		"--execution-lease", "30s")
	if r.err == nil {
		t.Fatal("a 1m adapter timeout started under a 30s execution lease")
	}
	for _, want := range []string{"refund_order", "1m0s", "30s"} {
		if !strings.Contains(r.err.Error(), want) {
			t.Errorf("error %q does not name %q", r.err, want)
		}
	}
}
