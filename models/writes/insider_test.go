package writes_test

import (
	"time"

	"encoding/json"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// tamper runs one statement straight against the database, as an insider
// with write access to it could, bypassing countersign.
func (e *env) tamper(q string, args ...any) {
	e.t.Helper()
	if err := e.store.Gorm().Exec(q, args...).Error; err != nil {
		e.t.Fatal(err)
	}
}

// An insider who edits a proposal's stored arguments, resource set or
// approvals in the database, leaving the digests that were confirmed as
// they are, gets nothing written: the arguments are what the business
// system executes and the reviewer reads, so execute and approve refuse a
// proposal whose arguments no longer hash to its digest, and execute one
// whose approvals are not those its token names. The token stays issued:
// once the rows are put back it writes, once.
func TestInsiderEditsWriteNothing(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		t.Run("arguments after the approval", func(t *testing.T) {
			p := e.confirm(e.propose("ord_1006", 1000))
			original := string(p.Arguments)
			e.tamper(`UPDATE proposals SET arguments = REPLACE(arguments, 'ord_1006', 'ord_1007') WHERE id = ?`, p.ID)
			_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			wantCode(t, err, models.EArgsMismatch)
			e.tamper(`UPDATE proposals SET arguments = REPLACE(arguments, '"amount_minor":1000', '"amount_minor":9000') WHERE id = ?`, p.ID)
			_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			wantCode(t, err, models.EArgsMismatch)
			if a, b := e.order("ord_1006").RefundedMinor, e.order("ord_1007").RefundedMinor; a != 0 || b != 0 {
				t.Fatalf("refunded %d and %d after the arguments were edited", a, b)
			}
			e.tamper(`UPDATE proposals SET arguments = ? WHERE id = ?`, original, p.ID)
			ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			if err != nil || ex.Status != models.StatusSucceeded || e.order("ord_1006").RefundedMinor != 1000 {
				t.Fatalf("restored: %+v %v, refunded %d", ex, err, e.order("ord_1006").RefundedMinor)
			}
		})
		t.Run("arguments before the approval", func(t *testing.T) {
			p := e.propose("ord_1008", 1000)
			e.tamper(`UPDATE proposals SET arguments = REPLACE(arguments, 'ord_1008', 'ord_1009') WHERE id = ?`, p.ID)
			_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
				EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
			wantCode(t, err, models.EArgsMismatch)
			_, err = e.svc.CheckApprove(e.ctx, e.alice, p.ID, p.ArgsDigest)
			wantCode(t, err, models.EArgsMismatch)
		})
		t.Run("approver after the approval", func(t *testing.T) {
			p := e.confirm(e.propose("ord_1010", 1000))
			mallory := e.user("mallory", models.RoleReviewer)
			e.tamper(`UPDATE decisions SET user_id = ? WHERE proposal_id = ?`, mallory.ID, p.ID)
			_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			wantCode(t, err, models.EArgsMismatch)
			if got := e.order("ord_1010").RefundedMinor; got != 0 {
				t.Fatalf("refunded %d after the approver was edited", got)
			}
			e.tamper(`UPDATE decisions SET user_id = ? WHERE proposal_id = ?`, e.alice.ID, p.ID)
			if _, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact); err != nil {
				t.Fatalf("restored: %v", err)
			}
		})
		t.Run("resource set after the approval", func(t *testing.T) {
			p, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "delete_logs",
				Arguments: json.RawMessage(`{"log_ids":["log_0004","log_0005"],"reason":"rotate"}`)})
			if err != nil {
				t.Fatal(err)
			}
			p = e.confirm(p)
			e.tamper(`UPDATE proposals SET resource_set = REPLACE(resource_set, 'log_0005', 'log_0006') WHERE id = ?`, p.ID)
			_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			wantCode(t, err, models.EArgsMismatch)
		})
	})
}

// A process consumed the token and died before sending; meanwhile an
// insider edits the stored arguments. The reconciler, which would send
// the confirmed write now, sends nothing: the execution stays unknown,
// saying why, and once the rows are put back the next pass sends the
// write the reviewer confirmed, once.
func TestReconcilerDoesNotSendEditedArguments(t *testing.T) {
	t.Parallel()
	eachKind(t, func(t *testing.T, kind string) {
		e, biz := httpEnv(t, kind, 2*time.Second)
		p := e.confirm(e.propose("ord_1001", 700))
		key := e.consumeUnsent(p)
		original := string(p.Arguments)
		e.tamper(`UPDATE proposals SET arguments = REPLACE(arguments, '700', '70000') WHERE id = ?`, p.ID)
		e.clock.Advance(11 * time.Second)
		if n, err := e.svc.Reconcile(e.ctx); err != nil || n != 1 {
			t.Fatalf("reconcile: %d %v", n, err)
		}
		if got := biz.ExecuteCalls(key); got != 0 {
			t.Fatalf("the reconciler sent edited arguments (%d calls)", got)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || got.Execution.Status != models.StatusUnknown || got.Execution.ErrorCode != string(models.EArgsMismatch) {
			t.Fatalf("after reconcile: %+v %v", got.Execution, err)
		}
		e.tamper(`UPDATE proposals SET arguments = ? WHERE id = ?`, original, p.ID)
		e.clock.Advance(time.Minute)
		if _, err := e.svc.Reconcile(e.ctx); err != nil {
			t.Fatal(err)
		}
		if calls, writes := biz.ExecuteCalls(key), biz.Writes(key); calls != 1 || writes != 1 {
			t.Fatalf("after the rows were restored: %d calls, %d writes; want 1 and 1", calls, writes)
		}
	})
}
