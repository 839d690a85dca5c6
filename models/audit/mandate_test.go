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
	"github.com/countersign/countersign/models/internal/verified"
	"github.com/countersign/countersign/models/writes"
)

// mandateReceipt grants a standing mandate over the refund tool's
// security-key tier (so its grant takes alice's security key), has it
// confirm a refund that no person approves, executes it and returns the
// receipt, its claims and the mandate.
func mandateReceipt(t *testing.T, w *world) (string, models.SignedReceipt, models.Mandate) {
	t.Helper()
	w.clock.Advance(time.Minute)
	terms := models.MandateTerms{Tool: "refund_order", Tiers: []string{"high"}, ResourcePattern: `ord_2[0-9]{3}`,
		Money:   &models.MandateMoney{Field: "amount_minor", Currency: "CNY", PerCallCap: 50000, Budget: 100000},
		MaxUses: 3, ExpiresAt: w.clock.Now().Add(time.Hour), Reason: "damaged-goods refunds during the sale"}
	mp, _, err := w.svc.RequestMandate(w.ctx, w.agent, writes.MandateInput{Terms: terms})
	if err != nil {
		t.Fatal(err)
	}
	if mp.Tier.Confirmation != models.ConfirmWebAuthn {
		t.Fatalf("the grant's tier %s needs no security key", mp.Tier.Name)
	}
	mp, err = w.svc.Confirm(w.ctx, writes.ConfirmInput{Reviewer: w.reviewer, ProposalID: mp.ID, DigestSeen: mp.ArgsDigest, EffectSeen: mp.EffectDigest,
		Evidence: verified.StepUp(auth.ApprovalEvidence(w.reviewer, nil), mp.ID, mp.ArgsDigest, assertion(t, w, w.reviewer, mp))})
	if err != nil || mp.MandateID == "" {
		t.Fatalf("grant: %v", err)
	}
	m, err := w.svc.Mandate(w.ctx, w.tenant.ID, mp.MandateID)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"order_id": "ord_2002", "amount_minor": 25000, "currency": "CNY", "reason": "lost"})
	p, _, err := w.svc.Propose(w.ctx, w.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if p.MandateID != m.ID || p.Token == nil || len(p.Decisions) != 0 {
		t.Fatalf("the refund was not confirmed by the mandate: status %s note %q", p.Status, p.MandateNote)
	}
	e, err := w.svc.Execute(w.ctx, w.agent, p.ID, p.Token.Compact)
	if err != nil || e.Status != models.StatusSucceeded {
		t.Fatalf("execute: %v %+v", err, e)
	}
	compact, rc, err := w.svc.Receipt(w.ctx, w.tenant.ID, e.ID)
	if err != nil || compact != e.ReceiptJWS {
		t.Fatalf("receipt: %v", err)
	}
	return compact, rc, m
}

// A write confirmed by a standing mandate gets a receipt that names the
// mandate, its terms digest and its grantors with their security-key
// approvals of those terms; it verifies offline against the export.
func TestMandateReceiptNamesTheMandateAndVerifies(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			w := newWorld(t, kind)
			compact, rc, m := mandateReceipt(t, w)
			mr := rc.Mandate
			if mr == nil || mr.ID != m.ID || mr.TermsDigest != m.TermsDigest || mr.ProposalID != m.ProposalID ||
				len(mr.Grantors) != 1 || mr.Grantors[0].UserID != w.reviewer.ID || mr.Grantors[0].Name != "alice" ||
				mr.Grantors[0].Method != models.MethodSecurityKey || mr.Grantors[0].DigestSeen != m.TermsDigest ||
				mr.Grantors[0].EvidenceDigest == "" || mr.Grantors[0].DecisionID == "" {
				t.Fatalf("receipt mandate %+v, want %s granted by alice with a security key", mr, m.ID)
			}
			if len(rc.Approvers) != 0 || rc.ApprovedDigest != rc.RequestedDigest {
				t.Fatalf("approvers %v approved digest %s", rc.Approvers, rc.ApprovedDigest)
			}
			r := verify(t, w.export(t), compact)
			if err := r.Err(); err != nil {
				t.Fatalf("%v\n%+v", err, r.Checks)
			}
			found := false
			for _, c := range r.Checks {
				found = found || (c.OK && c.Element == "mandate "+m.ID && strings.Contains(c.Detail, "alice (security_key)"))
			}
			if !found {
				t.Fatalf("the report does not name the mandate's grant: %+v", r.Checks)
			}
		})
	}
}

// Changing the mandate id in a receipt breaks it: unsigned, the signature
// fails; re-signed with the server's own key (a leaked key), the chain
// names the token's real mandate.
func TestMandateReceiptTampering(t *testing.T) {
	w := newWorld(t, "sqlite")
	compact, rc, m := mandateReceipt(t, w)
	export := w.export(t)

	forged := rc
	other := *rc.Mandate
	other.ID = "mdt_01forgedmandate0000000000"
	forged.Mandate = &other
	payload, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(compact, ".")
	unsigned := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
	if err := verify(t, export, unsigned).Err(); err == nil || !strings.Contains(err.Error(), "receipt") {
		t.Fatalf("a receipt with another mandate id verified: %v", err)
	}

	resigned := w.resign(t, forged)
	err = verify(t, export, resigned).Err()
	if err == nil || !strings.Contains(err.Error(), "mandate") {
		t.Fatalf("a re-signed receipt naming another mandate verified: %v", err)
	}

	// A mandate receipt that drops the mandate claims a person approved:
	// there is none.
	forged = rc
	forged.Mandate = nil
	resigned = w.resign(t, forged)
	if err := verify(t, export, resigned).Err(); err == nil {
		t.Fatal("a mandate receipt without its mandate verified")
	}

	// The Node.js verifier agrees on the untouched and the re-signed one.
	node, script := nodeVerifier(t)
	dir := t.TempDir()
	ex := filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(ex, export, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(receipt string) (string, error) {
		f := filepath.Join(dir, "r.jws")
		if err := os.WriteFile(f, []byte(receipt), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(node, script, "--export", ex, "--receipt", f).CombinedOutput()
		return string(out), err
	}
	if out, err := run(compact); err != nil || !strings.Contains(out, "confirmed by mandate "+m.ID) || !strings.Contains(out, "alice (security_key)") {
		t.Fatalf("node, untouched: %v\n%s", err, out)
	}
	other.ID = "mdt_01forgedmandate0000000000"
	forged = rc
	forged.Mandate = &other
	resigned = w.resign(t, forged)
	if out, err := run(resigned); err == nil || !strings.Contains(out, "FAIL") {
		t.Fatalf("node, re-signed with another mandate: %v\n%s", err, out)
	}
}
