package audit_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// groupWorld is the audit world with a refund tier between 150.00 and
// 200.00 that needs one approver of the group finance, with alice in it.
func groupWorld(t *testing.T) *world {
	t.Helper()
	src := string(registry.DemoYAML())
	low := "      - tier: low\n"
	if !strings.Contains(src, low) {
		t.Fatal("demo registry changed; update the test")
	}
	grouped := "      - tier: grouped\n        when: amount_minor > 15000\n        confirmation: click\n" +
		"        require: [{group: finance, count: 1}]\n        ttl: 300s\n"
	reg, err := registry.Parse([]byte(strings.Replace(src, low, grouped+low, 1)))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorldWith(t, "sqlite", reg)
	actor := store.GroupActor{TenantID: w.tenant.ID}
	if _, err := w.st.CreateGroup(w.ctx, actor, "finance", w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.st.SetGroupMember(w.ctx, actor, "finance", w.reviewer.Name, true, w.clock.Now()); err != nil {
		t.Fatal(err)
	}
	return w
}

// approveAndExecute has reviewer approve a grouped refund of order and
// executes it; before runs between the proposal and the approval.
func approveAndExecute(t *testing.T, w *world, order string, reviewer models.User, before func(p *models.Proposal)) string {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": 18000, "currency": "CNY", "reason": "lost"})
	p, _, err := w.svc.Propose(w.ctx, w.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil || p.Tier.Name != "grouped" {
		t.Fatalf("propose: %v (tier %s)", err, p.Tier.Name)
	}
	if before != nil {
		before(p)
	}
	c, err := w.svc.Confirm(w.ctx, writes.ConfirmInput{Reviewer: reviewer, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
		EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(reviewer, nil)})
	if err != nil || c.Status != models.StatusConfirmed {
		t.Fatalf("confirm: %v (%v)", err, c)
	}
	e, err := w.svc.Execute(w.ctx, w.agent, c.ID, c.Token.Compact)
	if err != nil || e.ReceiptJWS == "" {
		t.Fatalf("execute: %v", err)
	}
	return e.ReceiptJWS
}

// verifiesGroups checks that both verifiers pass receipt against export,
// and that countersign verify reports the check of element's groups.
func verifiesGroups(t *testing.T, export []byte, receipt, element string) {
	t.Helper()
	r := verify(t, export, receipt)
	if err := r.Err(); err != nil {
		t.Fatalf("%v\n%+v", err, r.Checks)
	}
	found := false
	for _, c := range r.Checks {
		found = found || (c.OK && strings.HasPrefix(c.Element, element) && strings.Contains(c.Detail, "finance 1 of 1"))
	}
	if !found {
		t.Errorf("%s went unchecked: %+v", element, r.Checks)
	}
	if out, err := runNode(t, export, receipt); err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
}

// Both verifiers check a tier's approver groups from the chain: a receipt
// whose approver counted toward finance verifies, and one confirmed after
// the requirement was deleted from the database behind the registry's back
// fails, naming the token that was issued without it.
func TestReceiptsShowTheApproverGroups(t *testing.T) {
	w := groupWorld(t)
	good := approveAndExecute(t, w, "ord_1011", w.reviewer, nil)
	export := w.export(t)
	verifiesGroups(t, export, good, "approver groups")

	// The requirement is deleted from the stored proposal, so the
	// administrator, in no group, confirms it alone.
	loosened := approveAndExecute(t, w, "ord_1012", w.admin, func(p *models.Proposal) {
		if err := w.st.Gorm().Exec("DELETE FROM proposal_factors WHERE proposal_id = ?", p.ID).Error; err != nil {
			t.Fatal(err)
		}
	})
	export = w.export(t)
	failsWith(t, export, loosened, "without the approver groups the proposal's tier required",
		"without the approver groups the proposal's tier required")

	// The administrator is written into finance in the database, past
	// the audited way: the server counts them, the chain does not.
	if err := w.st.Gorm().Exec(`INSERT INTO reviewer_group_members (group_id, user_id, tenant_id, added_by, added_at)
		SELECT id, ?, tenant_id, '', 0 FROM reviewer_groups WHERE tenant_id = ? AND name = 'finance'`, w.admin.ID, w.tenant.ID).Error; err != nil {
		t.Fatal(err)
	}
	smuggled := approveAndExecute(t, w, "ord_1013", w.admin, nil)
	export = w.export(t)
	failsWith(t, export, smuggled, "which the chain shows them outside of", "which the chain shows them outside of")
}

// grantAndUse asks for a mandate covering the grouped tier, has grantor
// grant it (before runs first), and executes a write it confirms.
func grantAndUse(t *testing.T, w *world, order string, grantor models.User, before func(p *models.Proposal)) string {
	t.Helper()
	w.clock.Advance(time.Minute)
	terms := models.MandateTerms{Tool: "refund_order", Tiers: []string{"grouped"}, Resources: []string{order},
		Money:   &models.MandateMoney{Field: "amount_minor", Currency: "CNY", PerCallCap: 20000, Budget: 100000},
		MaxUses: 3, ExpiresAt: w.clock.Now().Add(time.Hour), Reason: "refunds during the sale"}
	mp, _, err := w.svc.RequestMandate(w.ctx, w.agent, writes.MandateInput{Terms: terms})
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(mp)
	}
	mp, err = w.svc.Confirm(w.ctx, writes.ConfirmInput{Reviewer: grantor, ProposalID: mp.ID, DigestSeen: mp.ArgsDigest,
		EffectSeen: mp.EffectDigest, Evidence: auth.ApprovalEvidence(grantor, nil)})
	if err != nil || mp.MandateID == "" {
		t.Fatalf("grant: %v", err)
	}
	args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": 16000, "currency": "CNY", "reason": "lost"})
	p, _, err := w.svc.Propose(w.ctx, w.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil || p.MandateID != mp.MandateID || p.Token == nil {
		t.Fatalf("the write was not confirmed by the mandate %s: %v (%s, %q)", mp.MandateID, err, p.Status, p.MandateID)
	}
	e, err := w.svc.Execute(w.ctx, w.agent, p.ID, p.Token.Compact)
	if err != nil || e.ReceiptJWS == "" {
		t.Fatalf("execute: %v", err)
	}
	return e.ReceiptJWS
}

// A mandate granted under a tier with approver groups is checked the same
// way, its grantors in place of the approvers.
func TestMandateReceiptsShowTheGrantorGroups(t *testing.T) {
	w := groupWorld(t)
	good := grantAndUse(t, w, "ord_1014", w.reviewer, nil)
	export := w.export(t)
	verifiesGroups(t, export, good, "grantor groups of mandate")

	loosened := grantAndUse(t, w, "ord_1015", w.admin, func(p *models.Proposal) {
		if err := w.st.Gorm().Exec("DELETE FROM proposal_factors WHERE proposal_id = ?", p.ID).Error; err != nil {
			t.Fatal(err)
		}
	})
	export = w.export(t)
	failsWith(t, export, loosened, "the mandate was granted without the approver groups", "the mandate was granted without the approver groups")
}
