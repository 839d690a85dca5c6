package writes_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// The reference business system describes a refund when it is proposed;
// the description and its digest are stored, an approval naming that
// digest is recorded with it, and the signed receipt carries it.
func TestEffectPreviewIsStoredApprovedAndReceipted(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string) {
		e, _ := httpEnv(t, kind, 2*time.Second)
		p := e.propose("ord_1001", 5000)
		if p.Effect == nil || len(p.Effect.Changes) != 1 || string(p.Effect.Changes[0].Before) != "19900" ||
			string(p.Effect.Changes[0].After) != "14900" {
			t.Fatalf("effect = %+v", p.Effect)
		}
		want, err := models.DescriptionDigest(*p.Effect)
		if err != nil || p.EffectDigest != want {
			t.Fatalf("effect digest %s, the description digests to %s (%v)", p.EffectDigest, want, err)
		}
		stored, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || stored.EffectDigest != p.EffectDigest || stored.Effect == nil ||
			stored.Effect.Facts[0].Value != "Order …1001 · Yunqi Rd 88, Hangzhou" {
			t.Fatalf("stored effect %+v %s (%v)", stored.Effect, stored.EffectDigest, err)
		}
		c, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Decisions) != 1 || c.Decisions[0].EffectSeen != p.EffectDigest {
			t.Fatalf("decision %+v does not record the effect shown", c.Decisions)
		}
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, c.Token.Compact)
		if err != nil || ex.Status != models.StatusSucceeded {
			t.Fatalf("execute: %v", err)
		}
		_, rc, err := e.svc.Receipt(e.ctx, e.tenant, ex.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rc.EffectDigest != p.EffectDigest || len(rc.Approvers) != 1 || rc.Approvers[0].EffectSeen != p.EffectDigest {
			t.Fatalf("receipt effect %q approvers %+v, want %s", rc.EffectDigest, rc.Approvers, p.EffectDigest)
		}
	})
}

// When the business system describes the write differently between the
// reviewer's view and the approval — here the order's label changed, which
// the business system does not version — the approval is
// refused with effect_changed and nothing is recorded; so is an approval
// naming an effect digest that is not the stored one.
func TestApprovalRefusedWhenTheDescribedStateChanged(t *testing.T) {
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.propose("ord_1001", 5000)

		_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			EffectSeen: "sha256:" + strings.Repeat("0", 64), Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EEffectChanged)

		biz.Relabel("ord_1001", "Order …1001 · Ada Lovelace, new address")
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EEffectChanged)
		if _, stale := writes.StaleEffect(err); stale {
			t.Fatal("a description that moved is reported as a stale page")
		}
		// Naming no digest does not skip the preview: refused all the same.
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EEffectChanged)
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || len(got.Decisions) != 0 || got.Status != models.StatusAwaitingConfirmation {
			t.Fatalf("a refused approval left %d decisions, status %s (%v)", len(got.Decisions), got.Status, err)
		}
		// A new proposal is described as things stand now and can be approved.
		q := e.propose("ord_1001", 4000)
		if q.EffectDigest == p.EffectDigest {
			t.Fatal("the new proposal has the stale effect digest")
		}
		if _, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: q.ID, DigestSeen: q.ArgsDigest,
			EffectSeen: q.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)}); err != nil {
			t.Fatal(err)
		}
	})
}

// withoutDescribe is an adapter offering only the required calls.
type withoutDescribe struct{ models.Adapter }

// An adapter without describe keeps working: no effect preview, no effect
// digest, approvals and receipts as before.
func TestAdapterWithoutDescribe(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		e = newEnv(t, e.dbKind, func(e *env) *registry.Registry {
			e.adapter["refund_order"] = withoutDescribe{e.ledger}
			return registry.Demo()
		})
		p := e.propose("ord_1001", 1000)
		if p.Effect != nil || p.EffectDigest != "" {
			t.Fatalf("effect %+v %q from an adapter without describe", p.Effect, p.EffectDigest)
		}
		c := e.confirm(p)
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, c.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		_, rc, err := e.svc.Receipt(e.ctx, e.tenant, ex.ID)
		if err != nil || rc.EffectDigest != "" {
			t.Fatalf("receipt effect %q (%v)", rc.EffectDigest, err)
		}
	})
}

// A reviewer's edit is described anew: its version carries the effect of
// the edited arguments.
func TestCounterVersionIsDescribedAnew(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1003", 5000)
		bob := e.user("bob", models.RoleReviewer)
		args, _ := json.Marshal(map[string]any{"order_id": "ord_1003", "amount_minor": 3000, "currency": "CNY", "reason": "damaged on arrival"})
		v2, err := e.svc.Counter(e.ctx, writes.CounterInput{Reviewer: bob, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			Arguments: args, Reason: "only part was damaged"})
		if err != nil {
			t.Fatal(err)
		}
		if v2.Effect == nil || v2.EffectDigest == "" || v2.EffectDigest == p.EffectDigest ||
			string(v2.Effect.Changes[1].After) != "16900" {
			t.Fatalf("edited version effect %+v %s (original %s)", v2.Effect, v2.EffectDigest, p.EffectDigest)
		}
	})
}

// An approval of a write with an effect preview must name the effect digest
// its reviewer was shown: one naming none (a page from before the preview,
// a hand-made request) is refused with effect_changed, saying so in its
// details, and records nothing: no decision, no audit entry, the status
// unchanged. Naming the stored digest approves, and the decision keeps it.
func TestApprovalNamingNoEffectIsRefused(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1001", 5000)
		if p.EffectDigest == "" {
			t.Fatal("the demo refund has no effect preview")
		}
		head, err := e.store.Head(e.ctx, e.tenant)
		if err != nil {
			t.Fatal(err)
		}
		for name, seen := range map[string]string{"none": "", "another": "sha256:" + strings.Repeat("0", 64)} {
			_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
				EffectSeen: seen, Evidence: auth.ApprovalEvidence(e.alice, nil)})
			wantCode(t, err, models.EEffectChanged)
			var me *models.Error
			if !errors.As(err, &me) || me.Details["effect_seen"] != seen || me.Details["effect_digest"] != p.EffectDigest {
				t.Fatalf("%s: details %+v", name, me)
			}
			if got, stale := writes.StaleEffect(err); !stale || got != seen {
				t.Fatalf("%s: StaleEffect = %q, %v", name, got, stale)
			}
			if name == "none" && !strings.Contains(me.Message, "names none") {
				t.Fatalf("%s: message %q does not say no effect was named", name, me.Message)
			}
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || len(got.Decisions) != 0 || got.Status != models.StatusAwaitingConfirmation || got.Token != nil {
			t.Fatalf("a refused approval left %d decisions, status %s (%v)", len(got.Decisions), got.Status, err)
		}
		entries, err := e.store.AuditEntries(e.ctx, e.tenant, head.Seq, 1000)
		if err != nil || len(entries) != 0 {
			t.Fatalf("a refused approval wrote %d audit entries (%v)", len(entries), err)
		}
		c := e.confirm(p)
		if len(c.Decisions) != 1 || c.Decisions[0].EffectSeen != p.EffectDigest {
			t.Fatalf("decisions %+v", c.Decisions)
		}
	})
}

// A proposal without an effect preview is approved naming none: a write
// whose adapter does not describe it, and a mandate request (its terms are
// all there is).
func TestApprovalWithoutAPreviewNamesNoEffect(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		e = newEnv(t, e.dbKind, func(e *env) *registry.Registry {
			e.adapter["refund_order"] = withoutDescribe{e.ledger}
			return registry.Demo()
		})
		p := e.propose("ord_1001", 1000)
		if p.EffectDigest != "" {
			t.Fatalf("effect digest %q from an adapter without describe", p.EffectDigest)
		}
		c, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			Evidence: auth.ApprovalEvidence(e.alice, nil)})
		if err != nil || c.Status != models.StatusConfirmed || c.Decisions[0].EffectSeen != "" {
			t.Fatalf("approve without a preview: %v", err)
		}

		mp := e.grantable(lowRefunds(e, 1000, 10000, 0))
		if mp.Kind != models.KindMandate || mp.EffectDigest != "" {
			t.Fatalf("mandate proposal kind %q effect digest %q", mp.Kind, mp.EffectDigest)
		}
		in := writes.ConfirmInput{Reviewer: e.alice, ProposalID: mp.ID, DigestSeen: mp.ArgsDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)}
		if mp.Tier.Confirmation == models.ConfirmWebAuthn {
			in.Evidence = steppedUp(in.Reviewer, mp.ID, mp.ArgsDigest, nil, json.RawMessage(`{"test":"assertion"}`))
		}
		g, err := e.svc.Confirm(e.ctx, in)
		if err != nil || g.MandateID == "" {
			t.Fatalf("grant without a preview: %v", err)
		}
	})
}

// validateThenDescribe is the demo ledger without its one-read answer:
// propose asks it Validate and then Describe.
type validateThenDescribe struct{ *demoledger.Ledger }

// ValidateDescribe hides the ledger's, so that the type is no
// models.ValidateDescribeAdapter.
func (a validateThenDescribe) ValidateDescribe() {}

// overDescribed is the demo ledger answering validation and description
// at once with a description out of bounds.
type overDescribed struct{ *demoledger.Ledger }

func (a overDescribed) ValidateDescribe(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, *models.Description, error) {
	vr, d, err := a.Ledger.ValidateDescribe(ctx, req)
	if d != nil {
		d.Facts = append(d.Facts, models.Fact{Label: strings.Repeat("x", models.MaxDescribeLabel+1), Value: "v"})
	}
	return vr, d, err
}

// An adapter that validates and describes in one call (the demo ledger)
// gives a proposal the effect Validate and then Describe give, and its
// description is checked as Describe's is: out of bounds, the proposal is
// refused as unavailable and nothing is stored.
func TestValidateAndDescribeInOneCall(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		one := e.propose("ord_1001", 1000)
		if _, ok := e.adapter["refund_order"].(models.ValidateDescribeAdapter); !ok {
			t.Fatal("the demo ledger no longer validates and describes in one call")
		}
		two := newEnv(t, e.dbKind, func(e *env) *registry.Registry {
			e.adapter["refund_order"] = validateThenDescribe{e.ledger}
			return registry.Demo()
		})
		if _, ok := two.adapter["refund_order"].(models.ValidateDescribeAdapter); ok {
			t.Fatal("the two-call adapter answers in one call")
		}
		p := two.propose("ord_1001", 1000)
		if one.Effect == nil || one.EffectDigest != p.EffectDigest || one.StateVersion != p.StateVersion ||
			one.ResourceLabel != p.ResourceLabel || !reflect.DeepEqual(one.Preview, p.Preview) {
			t.Fatalf("one call: %+v %s %s %q; two calls: %+v %s %s %q", one.Effect, one.EffectDigest, one.StateVersion, one.ResourceLabel,
				p.Effect, p.EffectDigest, p.StateVersion, p.ResourceLabel)
		}
		// A refused write is not described, in one call as in two.
		_, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1001", 99999999)})
		wantCode(t, err, models.EBusinessRule)

		bad := newEnv(t, e.dbKind, func(e *env) *registry.Registry {
			e.adapter["refund_order"] = overDescribed{e.ledger}
			return registry.Demo()
		})
		_, _, err = bad.svc.Propose(bad.ctx, bad.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1001", 1000)})
		wantCode(t, err, models.EUnavailable)
		page, err := bad.svc.List(bad.ctx, bad.tenant, writes.ListQuery{})
		if err != nil || len(page.Items) != 0 {
			t.Fatalf("an out-of-bounds description stored %d proposals (%v)", len(page.Items), err)
		}
	})
}
