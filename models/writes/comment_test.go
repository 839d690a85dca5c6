package writes_test

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// An approval may carry a comment; it is kept with the decision (the agent
// and the history read it) and bounded like a decline's reason.
func TestApprovalComment(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1004", 1000)
		_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil),
			Comment: strings.Repeat("x", writes.MaxReason+1)})
		wantCode(t, err, models.EInvalidRequest)
		if got, _ := e.svc.Get(e.ctx, e.tenant, p.ID); len(got.Decisions) != 0 {
			t.Fatalf("a refused comment recorded a decision: %v", got.Decisions)
		}
		out, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil),
			Comment: "  Checked with the carrier.  "})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Decisions) != 1 || out.Decisions[0].Reason != "Checked with the carrier." {
			t.Errorf("decisions = %+v, want the trimmed comment", out.Decisions)
		}
		if out.Effect == nil || len(out.Effect.Changes) != 2 || out.Effect.Changes[1].Label != "Refundable" {
			t.Errorf("effect preview of the refund: %+v", out.Effect)
		}
	})
}
