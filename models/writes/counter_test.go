package writes_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

func (e *env) counter(by models.User, p *models.Proposal, args json.RawMessage, reason string) (*models.Proposal, error) {
	return e.svc.Counter(e.ctx, writes.CounterInput{Reviewer: by, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
		Arguments: args, Reason: reason})
}

// An edit that raises the amount past the click tier's bound is a new
// version in the security-key tier: it cannot be confirmed with a click,
// and the original ends superseded without a token.
func TestCounterRaisesTierToSecurityKey(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		orig := e.propose("ord_2001", 10000)
		if orig.Tier.Confirmation != models.ConfirmClick {
			t.Fatalf("original tier %+v, want a click tier", orig.Tier)
		}
		e.clock.Advance(5e9)
		rev, err := e.counter(bob, orig, refundArgs("ord_2001", 30000), "the customer returned three items, not one")
		if err != nil {
			t.Fatal(err)
		}
		if rev.Tier.Name != "high" || rev.Tier.Confirmation != models.ConfirmWebAuthn {
			t.Fatalf("edited tier %+v, want high with a security key", rev.Tier)
		}
		if rev.ID == orig.ID || rev.ArgsDigest == orig.ArgsDigest || rev.AgentID != orig.AgentID {
			t.Fatalf("revised %s %s agent %s", rev.ID, rev.ArgsDigest, rev.AgentID)
		}
		if rev.RequestKey != orig.RequestKey+":v2" {
			t.Fatalf("request key %q, want %q", rev.RequestKey, orig.RequestKey+":v2")
		}
		if !rev.ExpiresAt.Equal(e.clock.Now().Add(rev.Tier.TTL)) {
			t.Fatalf("expiry %s, want the new tier's TTL from the edit", rev.ExpiresAt)
		}
		s := rev.Supersedes
		if s == nil || s.OriginalID != orig.ID || s.EditorID != bob.ID || s.EditorName != "bob" || s.Version != 2 ||
			s.Reason != "the customer returned three items, not one" {
			t.Fatalf("supersedes %+v", s)
		}
		if len(s.Changes) != 1 || s.Changes[0].Pointer != "/amount_minor" ||
			string(s.Changes[0].Before) != "10000" || string(s.Changes[0].After) != "30000" {
			t.Fatalf("changes %+v", s.Changes)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, orig.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != models.StatusSuperseded || got.SupersededBy == nil || got.SupersededBy.RevisedID != rev.ID || got.Token != nil {
			t.Fatalf("original: %s %+v token %v", got.Status, got.SupersededBy, got.Token)
		}
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: rev.ID, DigestSeen: rev.ArgsDigest, EffectSeen: rev.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EStepUpRequired)
		// The superseded original can be neither approved nor edited again.
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: orig.ID, DigestSeen: orig.ArgsDigest, EffectSeen: orig.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EInvalidState)
		_, err = e.counter(e.alice, orig, refundArgs("ord_2001", 500), "smaller")
		wantCode(t, err, models.EInvalidState)
		if out := e.confirm(rev); out.Token == nil {
			t.Fatal("no token")
		}
		wantEvents(t, e.eventTypes(t, orig.ID), "proposal.created", "proposal.awaiting_confirmation", "proposal.superseded")
		// The audit chain names the edit on the original and the editor as
		// the new version's creator.
		entries, err := e.store.ProposalAudit(e.ctx, e.tenant, orig.ID)
		if err != nil {
			t.Fatal(err)
		}
		if k := entries[len(entries)-1].Kind; k != models.AuditProposalSuperseded {
			t.Fatalf("last audit entry of the original %q", k)
		}
		entries, err = e.store.ProposalAudit(e.ctx, e.tenant, rev.ID)
		if err != nil {
			t.Fatal(err)
		}
		body, err := entries[0].Decode()
		if err != nil || entries[0].Kind != models.AuditProposalCreated || body.Actor != bob.ID {
			t.Fatalf("first audit entry of the edit %+v (%v)", entries[0], err)
		}
		wantEvents(t, e.eventTypes(t, rev.ID), "proposal.created", "proposal.awaiting_confirmation", "proposal.decision", "proposal.confirmed")
	})
}

// The editor is the requester of their edit: they may not approve it, even
// alone in a click tier; another reviewer may.
func TestCounterEditorIsNotSoleApprover(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		orig := e.propose("ord_1001", 5000)
		rev, err := e.counter(bob, orig, refundArgs("ord_1001", 4000), "only the damaged part")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.CheckApprove(e.ctx, bob, rev.ID, rev.ArgsDigest)
		wantCode(t, err, models.ESelfApproval)
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: bob, ProposalID: rev.ID, DigestSeen: rev.ArgsDigest, EffectSeen: rev.EffectDigest, Evidence: auth.ApprovalEvidence(bob, nil)})
		wantCode(t, err, models.ESelfApproval)
		got, _ := e.svc.Get(e.ctx, e.tenant, rev.ID)
		if got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
			t.Fatalf("after the editor's refused approval: %s %d decisions", got.Status, len(got.Decisions))
		}
		out := e.confirm(rev)
		c, err := e.tokens.Verify(e.ctx, out.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Approvers) != 1 || c.Approvers[0] != e.alice.ID {
			t.Fatalf("approvers %v", c.Approvers)
		}
		// An edit of an edit: version 3, the editor of version 3 (alice)
		// barred from it, bob (who edited version 2) not.
		orig2 := e.propose("ord_1002", 5000)
		v2, err := e.counter(bob, orig2, refundArgs("ord_1002", 4000), "less")
		if err != nil {
			t.Fatal(err)
		}
		v3, err := e.counter(e.alice, v2, refundArgs("ord_1002", 3000), "even less")
		if err != nil {
			t.Fatal(err)
		}
		if v3.RequestKey != orig2.RequestKey+":v3" || v3.Supersedes.Version != 3 || v3.Supersedes.RootRequestKey != orig2.RequestKey {
			t.Fatalf("v3 key %q %+v", v3.RequestKey, v3.Supersedes)
		}
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: v3.ID, DigestSeen: v3.ArgsDigest, EffectSeen: v3.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.ESelfApproval)
		if _, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: bob, ProposalID: v3.ID, DigestSeen: v3.ArgsDigest, EffectSeen: v3.EffectDigest, Evidence: auth.ApprovalEvidence(bob, nil)}); err != nil {
			t.Fatal(err)
		}
	})
}

// The agent redeems the edited version: the refund is the edited amount,
// and the original, which never had a token, cannot be executed with the
// new version's token.
func TestCounterAgentRedeemsEditedVersion(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		orig := e.propose("ord_1003", 9000)
		rev, err := e.counter(bob, orig, refundArgs("ord_1003", 7000), "shipping is not refunded")
		if err != nil {
			t.Fatal(err)
		}
		out := e.confirm(rev)
		_, err = e.svc.Execute(e.ctx, e.agent, orig.ID, out.Token.Compact)
		wantCode(t, err, models.EArgsMismatch)
		ex, err := e.svc.Execute(e.ctx, e.agent, rev.ID, out.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Status != models.StatusSucceeded {
			t.Fatalf("execution %s", ex.Status)
		}
		if got := e.order("ord_1003").RefundedMinor; got != 7000 {
			t.Fatalf("refunded %d, want the edited 7000", got)
		}
		got, _ := e.svc.Get(e.ctx, e.tenant, orig.ID)
		if got.Status != models.StatusSuperseded || got.Token != nil || got.Execution != nil {
			t.Fatalf("original after the edited write: %s token %v execution %v", got.Status, got.Token, got.Execution)
		}
		// The agent repeating its original request finds the original,
		// superseded, with the link to the version that ran.
		again, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1003", 9000), RequestKey: orig.RequestKey})
		if err != nil || created || again.ID != orig.ID || again.SupersededBy == nil || again.SupersededBy.RevisedID != rev.ID {
			t.Fatalf("retry of the original request: %v created=%v %+v", err, created, again)
		}
	})
}

// Edits that cannot be made leave the original awaiting, untouched.
func TestCounterRefusals(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		orig := e.propose("ord_1004", 9000)
		_, err := e.counter(bob, orig, refundArgs("ord_1004", 9000), "same")
		wantCode(t, err, models.EInvalidRequest)
		_, err = e.counter(bob, orig, refundArgs("ord_1004", 8000), "  ")
		wantCode(t, err, models.EInvalidRequest)
		_, err = e.counter(bob, orig, json.RawMessage(`{"order_id":"ord_1004","amount_minor":"lots","currency":"CNY","reason":"x"}`), "typo")
		wantCode(t, err, models.ESchemaViolation)
		_, err = e.counter(bob, orig, refundArgs("ord_1004", 99999), "more than was paid")
		wantCode(t, err, models.EBusinessRule)
		stale := *orig
		stale.ArgsDigest = "sha256:" + "00"
		_, err = e.counter(bob, &stale, refundArgs("ord_1004", 8000), "stale")
		wantCode(t, err, models.EArgsMismatch)
		other := e.user("mallory", models.RoleReviewer)
		other.TenantID = "ten_other"
		_, err = e.counter(other, orig, refundArgs("ord_1004", 8000), "foreign")
		wantCode(t, err, models.ENotFound)
		e.clock.Set(orig.ExpiresAt)
		_, err = e.counter(bob, orig, refundArgs("ord_1004", 8000), "too late")
		wantCode(t, err, models.EProposalExpired)
		got, _ := e.svc.Get(e.ctx, e.tenant, orig.ID)
		if got.Status != models.StatusExpired || got.SupersededBy != nil {
			t.Fatalf("original %s %+v", got.Status, got.SupersededBy)
		}
	})
}

// An edit racing an approval of the same original: exactly one wins. When
// the approval wins the original is confirmed and no edit exists; when the
// edit wins the original is superseded and has no token. The edit runs on
// a second server instance over the same database.
func TestCounterRacesApproval(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		other := secondInstance(t, e)
		wins := map[string]int{}
		for i := range 6 {
			orig := e.propose("ord_1010", int64(100+i))
			var wg sync.WaitGroup
			var cerr, eerr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, cerr = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: orig.ID, DigestSeen: orig.ArgsDigest, EffectSeen: orig.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
			}()
			go func() {
				defer wg.Done()
				_, eerr = other.Counter(e.ctx, writes.CounterInput{Reviewer: bob, ProposalID: orig.ID, DigestSeen: orig.ArgsDigest,
					Arguments: refundArgs("ord_1010", 50), Reason: "less"})
			}()
			wg.Wait()
			if (cerr == nil) == (eerr == nil) {
				t.Fatalf("round %d: confirm %v, edit %v: exactly one must win", i, cerr, eerr)
			}
			got, err := e.svc.Get(e.ctx, e.tenant, orig.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cerr == nil {
				wins["confirm"]++
				wantCode(t, eerr, models.EInvalidState)
				if got.Status != models.StatusConfirmed || got.Token == nil || got.SupersededBy != nil {
					t.Fatalf("confirm won: %s %v %+v", got.Status, got.Token, got.SupersededBy)
				}
			} else {
				wins["edit"]++
				wantCode(t, cerr, models.EInvalidState)
				if got.Status != models.StatusSuperseded || got.Token != nil || got.SupersededBy == nil {
					t.Fatalf("edit won: %s %v", got.Status, got.Token)
				}
				// Clear the open edit so the next round's order stays refundable.
				if _, err := e.svc.Decline(e.ctx, writes.DeclineInput{Reviewer: e.alice, ProposalID: got.SupersededBy.RevisedID,
					DigestSeen: mustGet(t, e, got.SupersededBy.RevisedID).ArgsDigest, Reason: "cleanup"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Logf("wins: %v", wins)
	})
}

func mustGet(t *testing.T, e *env, id string) *models.Proposal {
	t.Helper()
	p, err := e.svc.Get(e.ctx, e.tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
