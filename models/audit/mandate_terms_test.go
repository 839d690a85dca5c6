package audit_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// mandateRefund has the mandate of mandateReceipt confirm and execute one
// more refund and returns its receipt.
func mandateRefund(t *testing.T, w *world, mandateID, order string, amount int64) string {
	t.Helper()
	w.clock.Advance(time.Second)
	args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "lost"})
	p, _, err := w.svc.Propose(w.ctx, w.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if p.MandateID != mandateID || p.Token == nil {
		t.Fatalf("the refund of %d was not confirmed by mandate %s: status %s, note %q", amount, mandateID, p.Status, p.MandateNote)
	}
	e, err := w.svc.Execute(w.ctx, w.agent, p.ID, p.Token.Compact)
	if err != nil || e.ReceiptJWS == "" {
		t.Fatalf("execute: %v %+v", err, e)
	}
	return e.ReceiptJWS
}

// loosen rewrites the stored mandate, as someone with write access to the
// database (or a bug) could: the terms the server then applies, and the
// columns its conditional spend checks. What the grantors approved — the
// grant proposal's arguments and their digest in the chain — stays.
func loosen(t *testing.T, w *world, mandateID string, change func(*models.MandateTerms)) {
	t.Helper()
	m, err := w.svc.Mandate(w.ctx, w.tenant.ID, mandateID)
	if err != nil {
		t.Fatal(err)
	}
	terms := m.Terms
	change(&terms)
	raw, err := json.Marshal(terms)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.st.Gorm().Exec("UPDATE mandates SET terms = ?, budget = ?, max_uses = ? WHERE id = ?",
		string(raw), terms.Money.Budget, terms.MaxUses, mandateID).Error; err != nil {
		t.Fatal(err)
	}
}

// failsWith checks that both verifiers refuse a receipt, naming why.
func failsWith(t *testing.T, export []byte, receipt, goWant, nodeWant string) {
	t.Helper()
	r := verify(t, export, receipt)
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), goWant) {
		t.Errorf("countersign verify: %v, want a failure saying %q\n%+v", err, goWant, r.Checks)
	}
	out, err := runNode(t, export, receipt)
	if err == nil || !strings.Contains(out, "FAIL") || !strings.Contains(out, nodeWant) {
		t.Errorf("node verifier: %v, want a failure saying %q\n%s", err, nodeWant, out)
	}
}

func runNode(t *testing.T, export []byte, receipt string) (string, error) {
	t.Helper()
	node, script := nodeVerifier(t)
	dir := t.TempDir()
	ex, rf := filepath.Join(dir, "audit.jsonl"), filepath.Join(dir, "r.jws")
	if err := os.WriteFile(ex, export, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rf, []byte(receipt), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, script, "--export", ex, "--receipt", rf).CombinedOutput()
	return string(out), err
}

// A mandate receipt carries the terms the grantors approved, and both
// verifiers check the write against them: its tier, target and amount, and
// in the chain its place among the mandate's uses (count, budget, expiry,
// revocation).
func TestMandateReceiptCarriesTermsAndTheWriteFitsThem(t *testing.T) {
	w := newWorld(t, "sqlite")
	compact, rc, m := mandateReceipt(t, w)
	if got, err := models.Digest(rc.Mandate.Terms); err != nil || got != m.TermsDigest {
		t.Fatalf("the receipt's terms hash to %s (%v), the mandate's digest is %s", got, err, m.TermsDigest)
	}
	r := verify(t, w.export(t), compact)
	if err := r.Err(); err != nil {
		t.Fatalf("%v\n%+v", err, r.Checks)
	}
	var fits, use bool
	for _, c := range r.Checks {
		fits = fits || (c.OK && c.Element == "terms of mandate "+m.ID && strings.Contains(c.Detail, "tier high among [high low]") &&
			strings.Contains(c.Detail, "amount_minor 25000 CNY within the per-call cap"))
		use = use || (c.OK && c.Element == "use of mandate "+m.ID && strings.Contains(c.Detail, "use 1 of 3") &&
			strings.Contains(c.Detail, "25000 of a budget of 100000 CNY"))
	}
	if !fits || !use {
		t.Fatalf("the report does not show the write against the terms (fits %v, use %v): %+v", fits, use, r.Checks)
	}
	if out, err := runNode(t, w.export(t), compact); err != nil || !strings.Contains(out, "fits its terms") ||
		!strings.Contains(out, "use 1 of 3") {
		t.Fatalf("node: %v\n%s", err, out)
	}
}

// Receipts re-signed with the server's key (a leaked key) cannot change or
// drop the terms: they must hash to the digest the grantors approved.
func TestMandateReceiptTermsTampering(t *testing.T) {
	w := newWorld(t, "sqlite")
	compact, rc, m := mandateReceipt(t, w)
	export := w.export(t)
	terms := m.Terms
	terms.Money.PerCallCap = 10_000_000
	raw, _ := json.Marshal(terms)
	forged := rc
	fm := *rc.Mandate
	fm.Terms = raw
	forged.Mandate = &fm
	failsWith(t, export, w.resign(t, forged), "not to the terms digest", "do not hash to its terms digest")

	fm.Terms = nil
	failsWith(t, export, w.resign(t, forged), "without its terms", "without its terms")

	// Other arguments under the same digest: both verifiers hash them.
	forged = rc
	forged.Arguments = json.RawMessage(strings.Replace(string(rc.Arguments), "25000", "24000", 1))
	failsWith(t, export, w.resign(t, forged), "the receipt's arguments hash to", "do not hash to its requested digest")

	// A copy re-signed without the arguments is not the receipt the chain
	// recorded.
	forged = rc
	forged.Arguments = nil
	failsWith(t, export, w.resign(t, forged), "the chain records another receipt", "the chain records another receipt")

	// Unsigned edits fail on the signature, as before.
	parts := strings.Split(compact, ".")
	payload, _ := json.Marshal(forged)
	unsigned := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
	failsWith(t, export, unsigned, "signature", "signature")
}

// A digest-only tool's receipt (receipt_arguments: digest) cannot show the
// terms on arguments: both verifiers pass it and say so rather than pass
// them over in silence.
func TestMandateReceiptOfADigestOnlyTool(t *testing.T) {
	src := string(registry.DemoYAML())
	old := "  - name: refund_order\n"
	if !strings.Contains(src, old) {
		t.Fatal("demo registry changed; update the test")
	}
	reg, err := registry.Parse([]byte(strings.Replace(src, old, old+"    receipt_arguments: digest\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorldWith(t, "sqlite", reg)
	compact, rc, m := mandateReceipt(t, w)
	if len(rc.Arguments) != 0 {
		t.Fatalf("a digest-only receipt carries arguments %s", rc.Arguments)
	}
	export := w.export(t)
	r := verify(t, export, compact)
	if err := r.Err(); err != nil {
		t.Fatalf("%v\n%+v", err, r.Checks)
	}
	found := false
	for _, c := range r.Checks {
		found = found || (c.OK && c.Element == "terms of mandate "+m.ID &&
			strings.Contains(c.Detail, "not checkable from the receipt: the terms on arguments"))
	}
	if !found {
		t.Errorf("countersign verify does not say the terms on arguments went unchecked")
	}
	if out, err := runNode(t, export, compact); err != nil || !strings.Contains(out, "not checkable from the receipt: the terms on arguments") {
		t.Errorf("node: %v; it does not say the terms on arguments went unchecked:\n%s", err, out)
	}
}

// When the stored mandate is loosened behind the grantors' backs, the
// server confirms what the loosened terms allow, and its own signed
// receipts then fail verification: the write exceeds the approved per-call
// cap, the budget or the use count.
func TestMandateReceiptOutsideApprovedTerms(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			w := newWorld(t, kind)
			first, _, m := mandateReceipt(t, w) // use 1: 25000 of 100000, cap 50000, 3 uses
			loosen(t, w, m.ID, func(t *models.MandateTerms) {
				t.Money.PerCallCap, t.Money.Budget, t.MaxUses = 90_000, 1_000_000, 10
			})
			overCap := mandateRefund(t, w, m.ID, "ord_2003", 70_000)    // use 2: 95000 spent
			overBudget := mandateRefund(t, w, m.ID, "ord_2004", 10_000) // use 3: 105000 spent
			overUses := mandateRefund(t, w, m.ID, "ord_2005", 1_000)    // use 4
			export := w.export(t)
			if r := verify(t, export, first); r.Err() != nil {
				t.Fatalf("use 1, within every approved term: %v\n%+v", r.Err(), r.Checks)
			}
			failsWith(t, export, overCap, models.MandateOverCap, models.MandateOverCap)
			failsWith(t, export, overBudget, "spent 105000 CNY of a budget of 100000", "spent 105000 CNY of a budget of 100000")
			failsWith(t, export, overUses, "use 4 of a mandate for 3", "use 4 of a mandate for 3")
		})
	}
}

// A token the chain shows issued after the mandate's revocation fails,
// whatever the server's row says now.
func TestMandateReceiptAfterRevocation(t *testing.T) {
	w := newWorld(t, "sqlite")
	_, _, m := mandateReceipt(t, w)
	w.clock.Advance(time.Second)
	if err := w.st.RevokeMandate(w.ctx, w.tenant.ID, m.ID, w.reviewer.ID, w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := w.st.Gorm().Exec("UPDATE mandates SET status = ?, revoked_at = NULL WHERE id = ?",
		string(models.MandateActive), m.ID).Error; err != nil {
		t.Fatal(err)
	}
	after := mandateRefund(t, w, m.ID, "ord_2003", 1_000)
	failsWith(t, w.export(t), after, "after the mandate was revoked", "after the mandate was revoked")
}

// batchMandate grants a mandate over the low tier of delete_logs for the
// logs log_0001…log_0005 and two uses, and returns it.
func batchMandate(t *testing.T, w *world) models.Mandate {
	t.Helper()
	w.clock.Advance(time.Minute)
	terms := models.MandateTerms{Tool: "delete_logs", Tiers: []string{"low"}, ResourcePattern: `log_000[1-5]`,
		MaxUses: 2, ExpiresAt: w.clock.Now().Add(time.Hour), Reason: "old debug traces"}
	mp, _, err := w.svc.RequestMandate(w.ctx, w.agent, writes.MandateInput{Terms: terms})
	if err != nil {
		t.Fatal(err)
	}
	mp, err = w.svc.Confirm(w.ctx, writes.ConfirmInput{Reviewer: w.reviewer, ProposalID: mp.ID, DigestSeen: mp.ArgsDigest,
		EffectSeen: mp.EffectDigest, Evidence: auth.ApprovalEvidence(w.reviewer, nil)})
	if err != nil || mp.MandateID == "" {
		t.Fatalf("grant: %v", err)
	}
	m, err := w.svc.Mandate(w.ctx, w.tenant.ID, mp.MandateID)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// batchDelete has the mandate confirm and execute the deletion of ids and
// returns the receipt and its claims.
func batchDelete(t *testing.T, w *world, mandateID string, ids ...string) (string, models.SignedReceipt) {
	t.Helper()
	w.clock.Advance(time.Second)
	args, _ := json.Marshal(map[string]any{"log_ids": ids, "reason": "rotate"})
	p, _, err := w.svc.Propose(w.ctx, w.agent, writes.ProposeInput{Tool: "delete_logs", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if p.MandateID != mandateID || p.Token == nil {
		t.Fatalf("the deletion of %v was not confirmed by mandate %s: status %s, note %q", ids, mandateID, p.Status, p.MandateNote)
	}
	e, err := w.svc.Execute(w.ctx, w.agent, p.ID, p.Token.Compact)
	if err != nil || e.Status != models.StatusSucceeded {
		t.Fatalf("execute: %v %+v", err, e)
	}
	compact, rc, err := w.svc.Receipt(w.ctx, w.tenant.ID, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	return compact, rc
}

// A batch's receipt lists its targets, held to the resource set digest, so
// both verifiers check every target against the mandate's: a mandate
// loosened in the database to cover other logs shows in the server's own
// receipts, and a re-signed receipt cannot list other targets than those
// approved.
func TestMandateReceiptChecksABatchsTargets(t *testing.T) {
	w := newWorld(t, "sqlite")
	m := batchMandate(t, w)
	compact, rc := batchDelete(t, w, m.ID, "log_0003", "log_0001")
	if strings.Join(rc.ResourceSet, ",") != "log_0001,log_0003" || rc.ResourceSetDigest == "" {
		t.Fatalf("receipt targets %v, digest %q", rc.ResourceSet, rc.ResourceSetDigest)
	}
	export := w.export(t)
	r := verify(t, export, compact)
	if err := r.Err(); err != nil {
		t.Fatalf("%v\n%+v", err, r.Checks)
	}
	for _, c := range r.Checks {
		if c.Element == "terms of mandate "+m.ID && strings.Contains(c.Detail, "not checkable") {
			t.Errorf("the targets went unchecked: %s", c.Detail)
		}
	}
	if out, err := runNode(t, export, compact); err != nil || strings.Contains(out, "not checkable") {
		t.Fatalf("node: %v\n%s", err, out)
	}

	// The stored mandate is made to cover every log.
	m2, err := w.svc.Mandate(w.ctx, w.tenant.ID, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	loose := m2.Terms
	loose.ResourcePattern = `log_[0-9]{4}`
	raw, _ := json.Marshal(loose)
	if err := w.st.Gorm().Exec("UPDATE mandates SET terms = ? WHERE id = ?", string(raw), m.ID).Error; err != nil {
		t.Fatal(err)
	}
	outside, _ := batchDelete(t, w, m.ID, "log_0002", "log_0150")
	export = w.export(t)
	failsWith(t, export, outside, models.MandateResourceOut, models.MandateResourceOut)

	// A re-signed receipt listing other targets under the same digest.
	forged := rc
	forged.ResourceSet = []string{"log_0001", "log_0004"}
	failsWith(t, export, w.resign(t, forged), "the batch's targets hash to", "do not hash to its resource set digest")

	// …and under a digest of their own, still within the mandate: the
	// chain recorded the proposed targets and the receipt it signed.
	forged.ResourceSet = []string{"log_0001", "log_0004"}
	if forged.ResourceSetDigest, err = models.DigestValue(forged.ResourceSet); err != nil {
		t.Fatal(err)
	}
	failsWith(t, export, w.resign(t, forged), "records other arguments, request key, tool, policy or targets",
		"records another request key, tool, policy or targets")
}
