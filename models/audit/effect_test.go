package audit_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// The receipt's effect digest is bound: re-signed (a leaked key) with
// another effect digest, the approver's effect_seen no longer matches;
// with the approver's effect_seen changed too, the chain's decision entry
// says otherwise. Both verifiers refuse.
func TestEffectDigestTampering(t *testing.T) {
	w := newWorld(t, "sqlite")
	export := w.export(t)
	var rc models.SignedReceipt
	parts := strings.Split(w.click, ".")
	if err := json.Unmarshal(mustB64(t, parts[1]), &rc); err != nil {
		t.Fatal(err)
	}
	if rc.EffectDigest == "" || len(rc.Approvers) != 1 || rc.Approvers[0].EffectSeen != rc.EffectDigest {
		t.Fatalf("receipt effect %q approvers %+v", rc.EffectDigest, rc.Approvers)
	}
	if err := verify(t, export, w.click).Err(); err != nil {
		t.Fatal(err)
	}
	other := "sha256:" + strings.Repeat("ab", 32)
	resign := func(edit func(*models.SignedReceipt)) string {
		t.Helper()
		f := rc
		f.Approvers = append([]models.ReceiptApprover(nil), rc.Approvers...)
		edit(&f)
		return w.resign(t, f)
	}
	digestOnly := resign(func(r *models.SignedReceipt) { r.EffectDigest = other })
	both := resign(func(r *models.SignedReceipt) { r.EffectDigest, r.Approvers[0].EffectSeen = other, other })
	for name, tt := range map[string]struct{ receipt, want string }{
		"effect digest":           {digestOnly, "digests"},
		"effect digest and shown": {both, "differs from the receipt's"},
	} {
		r := verify(t, export, tt.receipt)
		named := false
		for _, c := range r.Failed() {
			named = named || strings.Contains(c.Element+": "+c.Detail, tt.want)
		}
		if r.Err() == nil || !named {
			t.Errorf("%s: %v, want a failed check naming %q: %+v", name, r.Err(), tt.want, r.Failed())
		}
	}

	node, script := nodeVerifier(t)
	dir := t.TempDir()
	ex := filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(ex, export, 0o600); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "r.jws")
	if err := os.WriteFile(f, []byte(digestOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(node, script, "--export", ex, "--receipt", f).CombinedOutput(); err == nil || !strings.Contains(string(out), "another effect preview") {
		t.Errorf("node accepted another effect digest: %v\n%s", err, out)
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := b64.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
