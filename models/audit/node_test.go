package audit_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/testenv"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/audit"
)

// nodeVerifier is docs/verify-receipt.mjs, the verifier written without Go.
func nodeVerifier(t *testing.T) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipOrFail(t, "node is not installed: the JavaScript verifier in docs/ cannot run")
	}
	_, file, _, _ := runtime.Caller(0)
	return node, filepath.Join(filepath.Dir(file), "..", "..", "docs", "verify-receipt.mjs")
}

// TestNodeVerifier: the dependency-free Node.js verifier accepts an
// untouched export with its receipts, and names what was changed in a
// tampered one, so the formats are open and not tied to Go.
func TestNodeVerifier(t *testing.T) {
	t.Parallel()
	node, script := nodeVerifier(t)
	w := newWorld(t, "sqlite")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	export := w.export(t)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(node, append([]string{script}, args...)...).CombinedOutput()
		return string(out), err
	}
	good := write("audit.jsonl", export)
	out, err := run("--export", good)
	if err != nil || !strings.Contains(out, "VERIFIED") || strings.Count(out, "ok   receipt of execution") != 2 {
		t.Fatalf("untouched export: %v\n%s", err, out)
	}
	out, err = run("--export", good, "--receipt", write("r.jws", []byte(w.stepup)))
	if err != nil || !strings.Contains(out, "security_key") {
		t.Fatalf("one receipt: %v\n%s", err, out)
	}

	decisionEntry := func(l string) bool {
		return strings.Contains(l, `"type":"entry"`) && strings.Contains(l, "decision.approved")
	}
	for name, tt := range map[string]struct {
		export []byte
		want   string
	}{
		"entry":      {tamper(t, export, decisionEntry, flip("body")), "FAIL audit entry"},
		"deleted":    {tamper(t, export, decisionEntry, func(string) string { return "" }), "FAIL audit entry"},
		"reordered":  {swapEntries(t, export), "FAIL audit entry"},
		"checkpoint": {tamper(t, export, has(`"type":"checkpoint"`), flip("jws")), "FAIL checkpoint"},
		"receipt":    {tamper(t, export, has(`"type":"receipt"`), flip("jws")), "FAIL receipt"},
		"jwks key":   {swapJWKSKey(t, export), "another public key than the JWKS"},
	} {
		out, err := run("--export", write(name+".jsonl", tt.export))
		if err == nil || !strings.Contains(out, tt.want) {
			t.Errorf("%s: %v, output:\n%s", name, err, out)
		}
	}

	// Security-key approvals: a forged receipt that names an evidence
	// whose signature was changed (and its digest with it), and one that
	// turns the security-key approval into a click.
	var x audit.Export
	if err := x.Read("export", bytes.NewReader(export)); err != nil {
		t.Fatal(err)
	}
	a := w.stepupRC.Approvers[0]
	raw := x.Evidence[a.DecisionID]
	var ev struct {
		Signature string `json:"signature"`
	}
	if err := json.Unmarshal([]byte(raw), &ev); err != nil || ev.Signature == "" {
		t.Fatalf("evidence %s (%v)", raw, err)
	}
	bad := []byte(ev.Signature)
	if bad[len(bad)/2] != 'A' {
		bad[len(bad)/2] = 'A'
	} else {
		bad[len(bad)/2] = 'B'
	}
	badRaw := strings.Replace(raw, ev.Signature, string(bad), 1)
	forgedRC := w.stepupRC
	forgedRC.Approvers = []models.ReceiptApprover{a}
	forgedRC.Approvers[0].EvidenceDigest = models.AuditHash([]byte(badRaw))
	quoted := func(v string) string { b, _ := json.Marshal(v); return string(b[1 : len(b)-1]) }
	badExport := bytes.Replace(export, []byte(quoted(raw)), []byte(quoted(badRaw)), 1)
	out, err = run("--export", write("badsig.jsonl", badExport), "--receipt", write("badsig.jws", []byte(w.resign(t, forgedRC))))
	if err == nil || !strings.Contains(out, "FAIL evidence of decision "+a.DecisionID) || !strings.Contains(out, "signature does not verify") {
		t.Errorf("an assertion with a changed signature: %v, output:\n%s", err, out)
	}
	clickRC := w.stepupRC
	clickRC.Approvers = []models.ReceiptApprover{a}
	clickRC.Approvers[0].Method = models.MethodPassword
	out, err = run("--export", good, "--receipt", write("click.jws", []byte(w.resign(t, clickRC))))
	if err == nil || !strings.Contains(out, "needs a security key") {
		t.Errorf("a click where the tier needs a security key: %v, output:\n%s", err, out)
	}

	// A receipt signed by a key planted in the database, before and after
	// a restart recorded the key late.
	planted := plantKey(t, w)
	forged := write("forged.jws", []byte(w.resign(t, w.stepupRC)))
	out, err = run("--export", write("planted.jsonl", w.export(t)), "--receipt", forged)
	if err == nil || !strings.Contains(out, planted) || !strings.Contains(out, "never recorded") {
		t.Errorf("planted key: %v, output:\n%s", err, out)
	}
	if _, err := w.st.RecordSigningKeys(w.ctx); err != nil {
		t.Fatal(err)
	}
	out, err = run("--export", write("backfilled.jsonl", w.export(t)), "--receipt", forged)
	if err == nil || !strings.Contains(out, planted) || !strings.Contains(out, "not added through countersign") {
		t.Errorf("planted key recorded late: %v, output:\n%s", err, out)
	}
}
