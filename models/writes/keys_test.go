package writes_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// confirmAs approves p as reviewer (with a step-up for webauthn tiers).
func (e *env) confirmAs(reviewer models.User, p *models.Proposal) *models.Proposal {
	e.t.Helper()
	in := writes.ConfirmInput{Reviewer: reviewer, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(reviewer, nil)}
	if p.Tier.Confirmation == models.ConfirmWebAuthn {
		in.Evidence = steppedUp(in.Reviewer, p.ID, p.ArgsDigest, nil, json.RawMessage(`{"test":"assertion"}`))
	}
	out, err := e.svc.Confirm(e.ctx, in)
	if err != nil {
		e.t.Fatalf("confirm: %v", err)
	}
	return out
}

// TestTenantsShareARequestKey: two tenants use the same request key for
// different refunds at one business system that de-duplicates on the
// Idempotency-Key alone. Each write happens once, for its own order, and
// each tenant's receipt names its own outcome.
func TestTenantsShareARequestKey(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		biz.AddResource("ord_1002", "Order …1002", 19900)
		other, err := e.store.CreateTenant(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		bob, err := e.store.CreateUser(e.ctx, other.ID, "bob", models.RoleReviewer, "x")
		if err != nil {
			t.Fatal(err)
		}
		acmeBot, err := e.store.CreateAgent(e.ctx, other.ID, "acme-bot", "", "sha256:acme")
		if err != nil {
			t.Fatal(err)
		}

		const key = "refund-42"
		pa, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1001", 1000), RequestKey: key})
		if err != nil {
			t.Fatal(err)
		}
		pb, _, err := e.svc.Propose(e.ctx, acmeBot, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1002", 300), RequestKey: key})
		if err != nil {
			t.Fatal(err)
		}
		pa, pb = e.confirmAs(e.alice, pa), e.confirmAs(bob, pb)
		ea, err := e.svc.Execute(e.ctx, e.agent, pa.ID, pa.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		eb, err := e.svc.Execute(e.ctx, acmeBot, pb.ID, pb.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if ea.Status != models.StatusSucceeded || eb.Status != models.StatusSucceeded {
			t.Fatalf("statuses %s and %s", ea.Status, eb.Status)
		}
		if got := biz.TotalWrites(); got != 2 {
			t.Fatalf("business system applied %d writes, want 2", got)
		}
		if a, b := biz.Balance("ord_1001"), biz.Balance("ord_1002"); a != 19900-1000 || b != 19900-300 {
			t.Fatalf("balances %d and %d, want each refund applied to its own order", a, b)
		}
		ra, rb := ea.Receipt(), eb.Receipt()
		if ra.RequestKey != key || rb.RequestKey != key {
			t.Errorf("receipts keep the agent's request key: %q %q", ra.RequestKey, rb.RequestKey)
		}
		if ra.DownstreamKey == rb.DownstreamKey || ra.ProviderRef == rb.ProviderRef {
			t.Fatalf("receipts share a downstream key or provider ref: %+v %+v", ra, rb)
		}
		if ra.DownstreamKey != e.downstreamKey(pa) || biz.Writes(ra.DownstreamKey) != 1 || biz.Writes(rb.DownstreamKey) != 1 {
			t.Fatalf("the business system did not record each write under its receipt's downstream key")
		}
		if biz.Writes(key) != 0 {
			t.Fatal("the raw request key reached the business system")
		}
		// The stored record carries the same key as the receipt.
		got, err := e.svc.Get(e.ctx, other.ID, pb.ID)
		if err != nil || got.Execution.DownstreamKey != rb.DownstreamKey {
			t.Fatalf("stored execution: %+v %v", got.Execution, err)
		}
	})
}

func TestDownstreamKey(t *testing.T) {
	t.Parallel()
	base := models.DownstreamKey("ins_1", "ten_1", "agt_1", "refund-42")
	if base != models.DownstreamKey("ins_1", "ten_1", "agt_1", "refund-42") {
		t.Fatal("not stable")
	}
	for _, other := range []string{
		models.DownstreamKey("ins_2", "ten_1", "agt_1", "refund-42"),
		models.DownstreamKey("ins_1", "ten_2", "agt_1", "refund-42"),
		models.DownstreamKey("ins_1", "ten_1", "agt_2", "refund-42"),
		models.DownstreamKey("ins_1", "ten_1", "agt_1", "refund-43"),
		// Shifting characters between parts must not give the same key.
		models.DownstreamKey("ins_1t", "en_1", "agt_1", "refund-42"),
	} {
		if other == base {
			t.Fatalf("collision: %s", other)
		}
	}
	if !strings.HasPrefix(base, models.DownstreamKeyPrefix) || len(base) != len(models.DownstreamKeyPrefix)+64 {
		t.Fatalf("key %q", base)
	}
	for _, c := range base {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			t.Fatalf("key %q has %q, which a header or path segment may not carry unchanged", base, c)
		}
	}
}

// TestRequestKeysArePerAgent: request keys are idempotent per agent. Another
// agent of the tenant with the same key makes its own proposal and its own
// write; the same agent repeating the write gets its proposal back; the same
// agent with other arguments gets idempotency_key_reuse.
func TestRequestKeysArePerAgent(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		sibling, err := e.store.CreateAgent(e.ctx, e.tenant, "sibling", "", "sha256:sibling")
		if err != nil {
			t.Fatal(err)
		}
		const key = "refund-7"
		in := writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1005", 100), RequestKey: key}
		pa, created, err := e.svc.Propose(e.ctx, e.agent, in)
		if err != nil || !created {
			t.Fatalf("first agent: %v %v", created, err)
		}
		// The sibling's same key, for the same write and for another one.
		same, created, err := e.svc.Propose(e.ctx, sibling, in)
		if err != nil || !created || same.ID == pa.ID {
			t.Fatalf("second agent, same key and write: created=%v err=%v; want a proposal of its own", created, err)
		}
		pb, created, err := e.svc.Propose(e.ctx, sibling, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1006", 100), RequestKey: "refund-8"})
		if err != nil || !created {
			t.Fatalf("second agent: %v %v", created, err)
		}
		pc, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1006", 100), RequestKey: "refund-8"})
		if err != nil || !created || pc.ID == pb.ID {
			t.Fatalf("first agent, the sibling's key: created=%v err=%v", created, err)
		}
		again, created, err := e.svc.Propose(e.ctx, e.agent, in)
		if err != nil || created || again.ID != pa.ID {
			t.Fatalf("same agent, same write: created=%v err=%v", created, err)
		}
		_, _, err = e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1005", 101), RequestKey: key})
		wantCode(t, err, models.EIdempotencyKeyReuse)
		if msg := err.Error(); !strings.Contains(msg, "this agent") || !strings.Contains(msg, pa.ID) {
			t.Errorf("message %q should say the agent used the key itself, for which proposal", msg)
		}

		pa, pb = e.confirm(pa), e.confirm(pb)
		ea, err := e.svc.Execute(e.ctx, e.agent, pa.ID, pa.Token.Compact)
		if err != nil || ea.Status != models.StatusSucceeded {
			t.Fatalf("execute a: %+v %v", ea, err)
		}
		eb, err := e.svc.Execute(e.ctx, sibling, pb.ID, pb.Token.Compact)
		if err != nil || eb.Status != models.StatusSucceeded {
			t.Fatalf("execute b: %+v %v", eb, err)
		}
		if ea.DownstreamKey == eb.DownstreamKey {
			t.Fatal("two agents' executions share a downstream key")
		}
		if a, b := e.order("ord_1005").RefundedMinor, e.order("ord_1006").RefundedMinor; a != 100 || b != 100 {
			t.Fatalf("refunded %d and %d, want both writes", a, b)
		}
		for _, k := range []string{ea.DownstreamKey, eb.DownstreamKey} {
			if n, err := e.ledger.ExecutionsFor(e.ctx, e.tenant, k); err != nil || n != 1 {
				t.Fatalf("ledger writes under %s = %d (%v), want 1", k, n, err)
			}
		}
	})
}

// TestAMRSeparatesPasskeySignInFromStepUp: a reviewer who signed in with a
// passkey and approves by click yields a token whose amr does not claim a
// security-key confirmation; only an approval with step-up evidence does.
// A session naming "webauthn" without evidence cannot pass a webauthn tier.
func TestAMRSeparatesPasskeySignInFromStepUp(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		claimsOf := func(p *models.Proposal) models.Claims {
			c, err := e.tokens.Verify(e.ctx, p.Token.Compact)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		for _, signIn := range [][]string{{models.AMRPasskey}, {"webauthn"}} {
			p := e.propose("ord_1011", 100) // a click tier
			if p.Tier.Confirmation != models.ConfirmClick {
				t.Fatalf("tier %s", p.Tier.Confirmation)
			}
			out, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID,
				DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, signIn)})
			if err != nil {
				t.Fatal(err)
			}
			if amr := claimsOf(out).AMR; slices.Contains(amr, models.AMRStepUp) || !slices.Contains(amr, models.AMRPasskey) {
				t.Fatalf("sign-in %v, click approval: token amr %v", signIn, amr)
			}
			if _, err := e.svc.Cancel(e.ctx, e.agent, p.ID); err == nil {
				t.Fatal("a confirmed proposal was cancelled")
			}
			e.svc.Revoke(e.ctx, e.admin, p.ID)
		}
		big := e.propose("ord_2001", 30000) // a security-key tier
		if big.Tier.Confirmation != models.ConfirmWebAuthn {
			t.Fatalf("tier %s", big.Tier.Confirmation)
		}
		_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: big.ID,
			DigestSeen: big.ArgsDigest, EffectSeen: big.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, []string{"webauthn"})})
		wantCode(t, err, models.EStepUpRequired)
		out, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: big.ID,
			DigestSeen: big.ArgsDigest, EffectSeen: big.EffectDigest, Evidence: steppedUp(e.alice, big.ID, big.ArgsDigest, []string{models.AMRPasskey, models.AMRStepUp}, json.RawMessage(`{"test":"assertion"}`))})
		if err != nil {
			t.Fatal(err)
		}
		if amr := claimsOf(out).AMR; !slices.Contains(amr, models.AMRStepUp) || !slices.Contains(amr, models.AMRPasskey) {
			t.Fatalf("step-up approval: token amr %v", amr)
		}
	})
}
