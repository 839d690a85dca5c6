package audit_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/models/audit"
)

// nodeRun runs docs/verify-receipt.mjs with args and returns what it
// printed and its exit status.
func nodeRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	node, script := nodeVerifier(t)
	out, err := exec.Command(node, append([]string{script}, args...)...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("node: %v", err)
	return "", 0
}

// writeFile writes data to name in dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// keepLines returns the lines of export that keep picks.
func keepLines(export []byte, keep func(i int, line string) bool) []byte {
	var out []string
	for i, l := range strings.Split(strings.TrimRight(string(export), "\n"), "\n") {
		if keep(i, l) {
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

// An export given is an export: one with a header and the JWKS but no
// entries (its first two lines, or an honest export --since a time after
// the last entry) proves nothing about a receipt, and one without its
// header does not say whose chain it holds. Both verifiers refuse both,
// naming why.
func TestExportWithoutChainOrHeader(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	export := w.export(t)
	dir := t.TempDir()
	receipt := writeFile(t, dir, "click.jws", []byte(w.click))
	for name, tt := range map[string]struct {
		export  []byte
		element string
		want    string
	}{
		"no entries": {keepLines(export, func(i int, _ string) bool { return i < 2 }), "audit chain", "holds no audit entries"},
		"no header":  {keepLines(export, func(_ int, l string) bool { return !strings.Contains(l, `"type":"header"`) }), "export", "header line is missing"},
	} {
		t.Run(name, func(t *testing.T) {
			r := verify(t, tt.export, w.click)
			err := r.Err()
			if err == nil || !strings.Contains(err.Error(), tt.element+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Go: %v\n%+v", err, r.Checks)
			}
			if !r.ChainChecked {
				t.Error("Go: the chain of an export counts as not given")
			}
			out, code := nodeRun(t, "--export", writeFile(t, dir, strings.ReplaceAll(name, " ", "-")+".jsonl", tt.export), "--receipt", receipt)
			if code != 1 || !strings.Contains(out, "FAIL "+tt.element+": ") || !strings.Contains(out, tt.want) {
				t.Errorf("Node: exit %d\n%s", code, out)
			}
		})
	}
	// A JWKS and evidence, without an export, are still enough for the
	// receipt alone.
	var x audit.Export
	jwks := keepLines(export, func(_ int, l string) bool { return strings.Contains(l, `"type":"jwks"`) })
	if err := x.Read("jwks", bytes.NewReader(jwks)); err != nil {
		t.Fatal(err)
	}
	if r := x.VerifyReceipt(w.click); r.Err() != nil || r.ChainChecked {
		t.Errorf("a JWKS alone: %v, chain checked %v", r.Err(), r.ChainChecked)
	}
}
