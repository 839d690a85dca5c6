package audit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/audit"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/checkpoint"
	"github.com/countersign/countersign/models/writes"
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

// The approvals a receipt names are the chain's: a receipt naming another
// user for the recorded decision (as one signed after the decision's row
// was rewritten in the database would) fails in both verifiers, naming
// the decision entry and the token's.
func TestReceiptApproversAreTheChains(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	export := w.export(t)
	rc := claims(t, w.click)
	for name, tt := range map[string]struct {
		edit func(*models.SignedReceipt)
		want []string
	}{
		"another approver": {func(rc *models.SignedReceipt) { rc.Approvers[0].UserID = w.admin.ID },
			[]string{"the recorded approval (user, digest shown, method, evidence) differs from the receipt's", "the token was issued on the approvals of"}},
		"an unrecorded approval": {func(rc *models.SignedReceipt) {
			rc.Approvers = append(rc.Approvers, rc.Approvers[0])
			rc.Approvers[1].DecisionID = "dec_unrecorded"
		}, []string{"dec_unrecorded", "the chain records 1 approvals, the receipt 2"}},
	} {
		t.Run(name, func(t *testing.T) {
			forged := rc
			forged.Approvers = slices.Clone(rc.Approvers)
			tt.edit(&forged)
			receipt := w.resign(t, forged)
			r := verify(t, export, receipt)
			var failed []string
			for _, c := range r.Failed() {
				failed = append(failed, c.Element+": "+c.Detail)
			}
			for _, want := range tt.want {
				if !strings.Contains(strings.Join(failed, "\n"), want) {
					t.Errorf("Go does not say %q:\n%s", want, strings.Join(failed, "\n"))
				}
			}
			out, err := runNode(t, export, receipt)
			if err == nil || !strings.Contains(out, "FAIL") || !strings.Contains(out, tt.want[0]) {
				t.Errorf("Node: %v, want %q\n%s", err, tt.want[0], out)
			}
		})
	}
}

// claims are a receipt's claims, read without checking its signature.
func claims(t *testing.T, compact string) models.SignedReceipt {
	t.Helper()
	parts := strings.Split(compact, ".")
	payload, err := b64.DecodeString(parts[1])
	var rc models.SignedReceipt
	if err != nil || json.Unmarshal(payload, &rc) != nil {
		t.Fatalf("receipt %s: %v", compact, err)
	}
	return rc
}

// An export checked whole holds each receipt its chain records, once: one
// left out, or replaced by a copy of another, is named by both verifiers,
// though every receipt that is there verifies.
func TestExportHoldsEveryReceipt(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	export := w.export(t)
	dir := t.TempDir()
	receiptLine := func(compact string) func(string) bool {
		return func(l string) bool { return strings.Contains(l, `"type":"receipt"`) && strings.Contains(l, compact) }
	}
	var stepupLine string
	for _, l := range strings.Split(string(export), "\n") {
		if receiptLine(w.stepup)(l) {
			stepupLine = l
		}
	}
	for name, tt := range map[string]struct {
		export []byte
		want   string
	}{
		"left out":   {tamper(t, export, receiptLine(w.click), func(string) string { return "" }), "which the export does not hold"},
		"replaced":   {tamper(t, export, receiptLine(w.click), func(string) string { return stepupLine }), "which the export does not hold"},
		"held twice": {append(slices.Clone(export), []byte(stepupLine+"\n")...), "receipts of execution"},
		"untouched":  {export, ""},
	} {
		t.Run(name, func(t *testing.T) {
			var x audit.Export
			if err := x.Read("export", bytes.NewReader(tt.export)); err != nil {
				t.Fatal(err)
			}
			err := x.VerifyExport().Err()
			out, code := nodeRun(t, "--export", writeFile(t, dir, strings.ReplaceAll(name, " ", "-")+".jsonl", tt.export))
			if tt.want == "" {
				if err != nil || code != 0 {
					t.Fatalf("Go: %v; Node: exit %d\n%s", err, code, out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Go: %v", err)
			}
			// Node stops at the first failure: a copy held twice is
			// found while the receipts are checked, one missing after.
			nodeWant := tt.want
			if name != "left out" {
				nodeWant = "more than one receipt of execution"
			}
			if code != 1 || !strings.Contains(out, "FAIL") || !strings.Contains(out, nodeWant) {
				t.Errorf("Node: exit %d\n%s", code, out)
			}
			// Each receipt there verifies on its own.
			for _, l := range x.Receipts {
				if err := x.VerifyReceipt(l.JWS).Err(); err != nil {
					t.Errorf("receipt of %s: %v", l.ExecutionID, err)
				}
			}
		})
	}
}

// The Node verifier's mistakes of use exit 2, as countersign verify's
// do, and a file it cannot read is named, exit 1, without a stack trace.
func TestNodeVerifierUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.jsonl")
	export := writeFile(t, dir, "audit.jsonl", []byte(`{"type":"header","format":"countersign.audit.export.v1","tenant":"ten_1"}`+"\n"))
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "--export is required"},
		{[]string{"--receipt", missing}, 2, "--export is required"},
		{[]string{"--export"}, 2, "--export needs a value"},
		{[]string{"--export", export, "--jwks", missing}, 2, "unknown argument --jwks"},
		{[]string{"--export", missing}, 1, "cannot read --export " + missing + ": no such file"},
		{[]string{"--export", export, "--receipt", missing}, 1, "cannot read --receipt " + missing + ": no such file"},
	} {
		out, code := nodeRun(t, tt.args...)
		if code != tt.code || !strings.Contains(out, tt.want) || strings.Contains(out, "    at ") {
			t.Errorf("%v: exit %d, want %d and %q:\n%s", tt.args, code, tt.code, tt.want, out)
		}
	}
}

// The report says what holds and no more: from an export starting after
// the proposal's creation, the story is not also said to be whole; the
// receipt signer, when the keys are recorded before the export starts, is
// marked not checked, with that reason; a checkpoint over a broken chain
// is not said to anchor it; and Node does not speak of a checkpoint at 0.
func TestReportSaysWhatHolds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	// A refund proposed before the export starts and executed after.
	w.clock.Advance(time.Minute)
	p, _, err := w.svc.Propose(w.ctx, w.agent, writes.ProposeInput{Tool: "refund_order",
		Arguments: json.RawMessage(`{"order_id":"ord_1002","amount_minor":500,"currency":"CNY","reason":"lost"}`)})
	if err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	start := w.clock.Now()
	c, err := w.svc.Confirm(w.ctx, writes.ConfirmInput{Reviewer: w.reviewer, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
		EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(w.reviewer, nil)})
	if err != nil {
		t.Fatal(err)
	}
	e, err := w.svc.Execute(w.ctx, w.agent, c.ID, c.Token.Compact)
	if err != nil || e.ReceiptJWS == "" {
		t.Fatal(e, err)
	}
	late := e.ReceiptJWS
	var buf bytes.Buffer
	x := audit.Exporter{Checkpointer: checkpoint.Checkpointer{Store: w.st, Tokens: w.tokens}}
	if _, err := x.Export(w.ctx, &buf, w.tenant, start, w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	since := buf.Bytes()
	check := func(r *audit.Report, element string) (audit.Check, bool) {
		for _, c := range r.Checks {
			if c.Element == element {
				return c, true
			}
		}
		return audit.Check{}, false
	}

	r := verify(t, since, late)
	if c, ok := check(r, "proposal story"); !ok || c.OK {
		t.Errorf("proposal story: %+v", r.Checks)
	}
	for _, c := range r.Checks {
		if c.Element == "proposal story" && c.OK {
			t.Errorf("the story is said to fail and to hold: %+v", c)
		}
		if c.Element == "anchor" && strings.Contains(c.Detail, "from creation") {
			t.Errorf("the anchor is said to cover a creation not in the export: %+v", c)
		}
	}
	if c, ok := check(r, "receipt signer"); !ok || !c.NotChecked || !strings.Contains(c.Detail, "the export starts at entry") {
		t.Errorf("receipt signer: %+v", c)
	}

	decisionEntry := func(l string) bool {
		return strings.Contains(l, `"type":"entry"`) && strings.Contains(l, "decision.approved")
	}
	export := w.export(t)
	r = verify(t, tamper(t, export, decisionEntry, func(string) string { return "" }), w.stepup)
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Element, "checkpoint ") && !strings.Contains(c.Detail, "anchors nothing") {
			t.Errorf("a checkpoint over a broken chain: %+v", c)
		}
		if c.Element == "anchor" && !strings.Contains(c.Detail, "broken") {
			t.Errorf("anchor: %+v", c)
		}
	}

	dir := t.TempDir()
	noCheckpoint := tamper(t, export, has(`"type":"checkpoint"`), func(string) string { return "" })
	out, code := nodeRun(t, "--export", writeFile(t, dir, "no-checkpoint.jsonl", noCheckpoint), "--receipt", writeFile(t, dir, "click.jws", []byte(w.click)))
	if code != 1 || strings.Contains(out, "checkpoint at 0") || !strings.Contains(out, "no checkpoint signs any of them") {
		t.Errorf("Node without a checkpoint: exit %d\n%s", code, out)
	}
}
