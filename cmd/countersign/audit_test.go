package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// TestAuditExportAndVerify: an approval and execution made through the
// real application, exported by the CLI, verify offline; a changed byte
// in the export makes verify exit 1 naming the entry.
func TestAuditExportAndVerify(t *testing.T) {
	ctx := context.Background()
	f := newDemoFixture(t)
	id := f.refund(t, "ord_1004", 100)
	shown := mustExec(t, nil, f.creds.ReviewerPassword+"\n", "review", "approve", id, "--db", f.db, "--tenant", "demo", "--user", "alice")
	p, err := f.a.Protocol.Get(ctx, f.agent.TenantID, id)
	if err != nil || p.Token == nil {
		t.Fatal(p, err)
	}
	// The terminal showed the effect preview and the approval names it.
	for _, want := range []string{"Refundable: ¥199.00 CNY → ¥198.00 CNY  [refundable_minor: 19900 → 19800]", "effect digest: " + p.EffectDigest} {
		if !strings.Contains(shown.stderr, want) {
			t.Fatalf("review approve did not show %q:\n%s", want, shown.stderr)
		}
	}
	if len(p.Decisions) != 1 || p.Decisions[0].EffectSeen != p.EffectDigest || p.EffectDigest == "" {
		t.Fatalf("decision effect %+v, proposal %q", p.Decisions, p.EffectDigest)
	}
	e, err := f.a.Protocol.Execute(ctx, f.agent, id, p.Token.Compact)
	if err != nil || e.ReceiptJWS == "" {
		t.Fatal(e, err)
	}
	dir := t.TempDir()
	export := filepath.Join(dir, "audit.jsonl")
	receipt := filepath.Join(dir, "receipt.jws")
	if err := os.WriteFile(receipt, []byte(e.ReceiptJWS+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustExec(t, nil, "", "audit", "export", "--db", f.db, "--tenant", "demo", "--since", "1h", "--out", export)

	r := mustExec(t, nil, "", "verify", "--receipt", receipt, "--export", export)
	t.Log(r.stdout)
	if !strings.Contains(r.stdout, "VERDICT: PROVEN") || !strings.Contains(r.stdout, "alice (password)") {
		t.Fatalf("verify output:\n%s", r.stdout)
	}
	// The API's JSON answer on stdin, and every receipt of the export.
	mustExec(t, nil, `{"execution_id":"`+e.ID+`","receipt":"`+e.ReceiptJWS+`"}`, "verify", "--receipt", "-", "--export", export)
	mustExec(t, nil, "", "verify", "--export", export)
	// With only the published keys: signature, digests and assertions.
	jwks, err := f.a.Protocol.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustExec(t, nil, "", "verify", "--receipt", receipt, "--jwks", jwksFile)
	if !strings.Contains(r.stdout, "not checked: no export given") || !strings.Contains(r.stdout, "VERDICT: RECEIPT VALID") {
		t.Fatalf("verify with a JWKS only:\n%s", r.stdout)
	}

	data, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.Contains(l, `"type":"entry"`) && strings.Contains(l, models.AuditDecisionApproved) {
			lines[i] = strings.Replace(l, `\"digest_seen\":\"sha256:`, `\"digest_seen\":\"sha256:0`, 1)
			break
		}
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	r = invoke(t, nil, "", "verify", "--receipt", receipt, "--export", bad)
	out, code := reported(r.err)
	// A broken link of the chain is not a bad signature: the code says
	// the evidence does not prove the receipt.
	if code != exitError || !strings.Contains(out, "audit entry") || !strings.Contains(r.stdout, "VERDICT: NOT PROVEN") ||
		!models.IsCode(r.err, models.ENotProven) {
		t.Fatalf("tampered export: exit %d, %q\n%s", code, out, r.stdout)
	}
}

func TestParseSince(t *testing.T) {
	now := mustTime(t, "2026-11-30T12:00:00Z")
	for in, want := range map[string]string{
		"2026-11-01T00:00:00Z": "2026-11-01T00:00:00Z",
		"2026-11-01":           "2026-11-01T00:00:00Z",
		"72h":                  "2026-11-27T12:00:00Z",
	} {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(mustTime(t, want)) {
			t.Errorf("parseSince(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "-5h", "2026-13-01"} {
		if _, err := parseSince(in, now); err == nil {
			t.Errorf("parseSince(%q) accepted", in)
		}
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVerifyNamesTheMandate: a write a standing mandate confirmed verifies
// offline, and the report names the mandate and its grantor instead of an
// approver.
func TestVerifyNamesTheMandate(t *testing.T) {
	ctx := context.Background()
	f := newDemoFixture(t)
	terms := models.MandateTerms{Tool: "refund_order", Tiers: []string{"low"},
		Money:     &models.MandateMoney{Field: "amount_minor", Currency: "CNY", PerCallCap: 1000, Budget: 5000},
		ExpiresAt: time.Now().Add(time.Hour), Reason: "sale"}
	mp, _, err := f.a.Protocol.RequestMandate(ctx, f.agent, writes.MandateInput{Terms: terms})
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, nil, f.creds.ReviewerPassword+"\n", "review", "approve", mp.ID, "--db", f.db, "--tenant", "demo", "--user", "alice")
	p, _, err := f.a.Protocol.Propose(ctx, f.agent, writes.ProposeInput{Tool: "refund_order",
		Arguments: json.RawMessage(`{"order_id":"ord_1001","amount_minor":700,"currency":"CNY","reason":"test"}`)})
	if err != nil || p.MandateID == "" || p.Token == nil {
		t.Fatalf("not confirmed by the mandate: %v %+v", err, p)
	}
	e, err := f.a.Protocol.Execute(ctx, f.agent, p.ID, p.Token.Compact)
	if err != nil || e.ReceiptJWS == "" {
		t.Fatal(e, err)
	}
	dir := t.TempDir()
	export, receipt := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "receipt.jws")
	if err := os.WriteFile(receipt, []byte(e.ReceiptJWS), 0o600); err != nil {
		t.Fatal(err)
	}
	mustExec(t, nil, "", "audit", "export", "--db", f.db, "--tenant", "demo", "--since", "1h", "--out", export)
	r := mustExec(t, nil, "", "verify", "--receipt", receipt, "--export", export)
	t.Log(r.stdout)
	for _, want := range []string{"confirmed by standing mandate " + p.MandateID, "✓ mandate " + p.MandateID,
		"VERDICT: PROVEN", "confirmed by mandate " + p.MandateID + " granted by alice (password)"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("verify output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// executedRefunds approves and executes a refund of each order through the
// real application and exports the whole log: it returns the export's
// path, a directory to write in, and the executions.
func executedRefunds(t *testing.T, orders ...string) (f *demoFixture, dir, export string, execs []*models.Execution) {
	t.Helper()
	ctx := context.Background()
	f = newDemoFixture(t)
	for _, order := range orders {
		id := f.refund(t, order, 100)
		mustExec(t, nil, f.creds.ReviewerPassword+"\n", "review", "approve", id, "--db", f.db, "--tenant", "demo", "--user", "alice")
		p, err := f.a.Protocol.Get(ctx, f.agent.TenantID, id)
		if err != nil || p.Token == nil {
			t.Fatal(p, err)
		}
		e, err := f.a.Protocol.Execute(ctx, f.agent, id, p.Token.Compact)
		if err != nil || e.ReceiptJWS == "" {
			t.Fatal(e, err)
		}
		execs = append(execs, e)
	}
	dir = t.TempDir()
	export = filepath.Join(dir, "audit.jsonl")
	mustExec(t, nil, "", "audit", "export", "--db", f.db, "--tenant", "demo", "--out", export)
	return f, dir, export, execs
}

// writeLines writes the lines of the file at from that keep picks to a
// new file in dir and returns its path.
func writeLines(t *testing.T, from, dir, name string, keep func(i int, line string) bool) string {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if keep(i, l) {
			out = append(out, l)
		}
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestVerifyNeedsAWholeExport: an export given must hold a chain. Its
// first two lines (the header and the JWKS: what an export --since a time
// after the last entry holds too), a JWKS document or an export without
// its header do not pass for one: verify exits 1 instead of calling the
// receipt valid without its chain.
func TestVerifyNeedsAWholeExport(t *testing.T) {
	_, dir, export, execs := executedRefunds(t, "ord_1004")
	receipt := filepath.Join(dir, "receipt.jws")
	if err := os.WriteFile(receipt, []byte(execs[0].ReceiptJWS), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct {
		export, want string
	}{
		"header and JWKS": {writeLines(t, export, dir, "head.jsonl", func(i int, _ string) bool { return i < 2 }), "holds no audit entries"},
		"JWKS": {writeLines(t, export, dir, "jwks.jsonl", func(_ int, l string) bool { return strings.Contains(l, `"type":"jwks"`) }),
			"no header line"},
		"no header": {writeLines(t, export, dir, "headless.jsonl", func(_ int, l string) bool { return !strings.Contains(l, `"type":"header"`) }),
			"no header line"},
	} {
		r := invoke(t, nil, "", "verify", "--export", tt.export, "--receipt", receipt)
		out, code := reported(r.err)
		if code != exitError || !models.IsCode(r.err, models.ENotProven) || !strings.Contains(out+r.stdout, tt.want) ||
			strings.Contains(r.stdout, "RECEIPT VALID") || strings.Contains(r.stdout, "PROVEN —") && !strings.Contains(r.stdout, "NOT PROVEN") {
			t.Errorf("%s: exit %d, %q\n%s", name, code, out, r.stdout)
		}
	}
}

// TestVerifyChainAlone: the export of an organization that executed
// nothing holds no receipts; verify checks its chain and checkpoints and
// says that no receipt was checked, and so does the Node verifier. An
// export with a receipt left out does not verify whole.
func TestVerifyChainAlone(t *testing.T) {
	f := newDemoFixture(t)
	dir := t.TempDir()
	export := filepath.Join(dir, "audit.jsonl")
	mustExec(t, nil, "", "audit", "export", "--db", f.db, "--tenant", "demo", "--out", export)
	r := mustExec(t, nil, "", "verify", "--export", export)
	for _, want := range []string{"✓ audit chain: entries 1 to", "✓ checkpoint", "✓ receipts: the chain records none and the export holds none",
		"VERDICT: CHAIN INTACT", "none was checked"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("verify output lacks %q:\n%s", want, r.stdout)
		}
	}
	if node, err := exec.LookPath("node"); err == nil {
		out, err := exec.Command(node, filepath.Join("..", "..", "docs", "verify-receipt.mjs"), "--export", export).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "no receipts were checked") {
			t.Errorf("node: %v\n%s", err, out)
		}
	}

	_, dir, export, _ = executedRefunds(t, "ord_1004", "ord_1005")
	first := true
	left := writeLines(t, export, dir, "left.jsonl", func(_ int, l string) bool {
		if strings.Contains(l, `"type":"receipt"`) && first {
			first = false
			return false
		}
		return true
	})
	r = invoke(t, nil, "", "verify", "--export", left)
	if out, code := reported(r.err); code != exitError || !strings.Contains(out, "which the export does not hold") {
		t.Fatalf("a receipt left out: exit %d, %q\n%s", code, out, r.stdout)
	}
}

// TestVerifyAnswerOfAnotherExecution: the API's answer for one execution
// holding another's receipt is refused by both verifiers, not proven for
// the execution the receipt names.
func TestVerifyAnswerOfAnotherExecution(t *testing.T) {
	_, dir, export, execs := executedRefunds(t, "ord_1004", "ord_1005")
	answer := `{"execution_id":"` + execs[0].ID + `","receipt":"` + execs[1].ReceiptJWS + `"}`
	r := invoke(t, nil, answer, "verify", "--receipt", "-", "--export", export)
	out, code := reported(r.err)
	if code != exitError || !strings.Contains(out, "the answer is of execution "+execs[0].ID) || strings.Contains(r.stdout, "PROVEN") {
		t.Fatalf("exit %d, %q\n%s", code, out, r.stdout)
	}
	// The right answer verifies.
	mustExec(t, nil, `{"execution_id":"`+execs[1].ID+`","receipt":"`+execs[1].ReceiptJWS+`"}`, "verify", "--receipt", "-", "--export", export)
	if node, err := exec.LookPath("node"); err == nil {
		file := filepath.Join(dir, "answer.json")
		if err := os.WriteFile(file, []byte(answer), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(node, filepath.Join("..", "..", "docs", "verify-receipt.mjs"), "--export", export, "--receipt", file).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "the answer is of execution "+execs[0].ID) {
			t.Errorf("node: %v\n%s", err, out)
		}
	}
}

// TestVerifyMarksWhatWasNotChecked: an element not checked is marked –,
// neither ✓ (proven) nor ✗ (broken).
func TestVerifyMarksWhatWasNotChecked(t *testing.T) {
	_, dir, export, execs := executedRefunds(t, "ord_1004")
	receipt := filepath.Join(dir, "receipt.jws")
	if err := os.WriteFile(receipt, []byte(execs[0].ReceiptJWS), 0o600); err != nil {
		t.Fatal(err)
	}
	jwks := writeLines(t, export, dir, "jwks.jsonl", func(_ int, l string) bool { return strings.Contains(l, `"type":"jwks"`) })
	r := mustExec(t, nil, "", "verify", "--receipt", receipt, "--jwks", jwks)
	if !strings.Contains(r.stdout, "\n– audit chain: not checked: no export given") || strings.Contains(r.stdout, "✓ audit chain: not checked") {
		t.Fatalf("verify with a JWKS only:\n%s", r.stdout)
	}
}
