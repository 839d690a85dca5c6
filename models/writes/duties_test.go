package writes_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

func (e *env) stepUpConfirm(u models.User, p *models.Proposal) (*models.Proposal, error) {
	return e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
		Evidence: steppedUp(u, p.ID, p.ArgsDigest, []string{"pwd", "webauthn"}, json.RawMessage(`{"k":1}`))})
}

// Disabling a reviewer voids their approvals of proposals still awaiting
// confirmation: a quorum of two needs two approvals by enabled reviewers.
func TestDisablingVoidsPendingApprovals(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob, carol := e.user("bob", models.RoleReviewer), e.user("carol", models.RoleReviewer)
		p := e.propose("ord_2002", 300000)
		if p.Tier.Quorum != 2 {
			t.Fatalf("tier %+v", p.Tier)
		}
		if _, err := e.stepUpConfirm(e.alice, p); err != nil {
			t.Fatal(err)
		}
		before, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if _, err := e.store.AdminSetUserDisabled(e.ctx, e.admin, e.alice.ID, true, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if n := len(got.Approvals()); n != 0 {
			t.Fatalf("approvals after disabling alice = %d, want 0", n)
		}
		if len(got.Decisions) != 1 || got.Decisions[0].VoidedAt == nil {
			t.Fatalf("alice's decision should stay in the record, voided: %+v", got.Decisions)
		}
		if got.Revision <= before.Revision {
			t.Errorf("revision %d after voiding, was %d: waiters would not see the change", got.Revision, before.Revision)
		}
		// Bob's approval alone would have completed the quorum with alice's.
		if _, err := e.stepUpConfirm(bob, p); err != nil {
			t.Fatal(err)
		}
		got, _ = e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusAwaitingConfirmation {
			t.Fatalf("after bob: %s, want still awaiting (alice's approval was voided)", got.Status)
		}
		// Alice, disabled, cannot approve again even with a stale account.
		_, err := e.stepUpConfirm(e.alice, p)
		wantCode(t, err, models.EForbidden)
		out, err := e.stepUpConfirm(carol, p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.tokens.Verify(e.ctx, out.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(c.Approvers) != fmt.Sprint([]string{bob.ID, carol.ID}) {
			t.Errorf("token approvers %v, want bob and carol", c.Approvers)
		}
		// Re-enabling does not revive the voided approval.
		if _, err := e.store.AdminSetUserDisabled(e.ctx, e.admin, e.alice.ID, false, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		got, _ = e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Decisions[0].VoidedAt == nil {
			t.Error("re-enabling revived a voided approval")
		}
	})
}

// An approval racing the disabling of its reviewer is either refused or
// voided: it never counts once the disable has committed.
func TestDisableRacesApproval(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		const n = 8
		users := make([]models.User, n)
		props := make([]*models.Proposal, n)
		for i := range n {
			users[i] = e.user(fmt.Sprintf("r%d", i), models.RoleReviewer)
			props[i] = e.propose(fmt.Sprintf("ord_20%02d", i+1), 300000)
		}
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := e.stepUpConfirm(users[i], props[i])
				if err != nil && !models.IsCode(err, models.EForbidden) {
					t.Errorf("approve %d: %v", i, err)
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := e.store.AdminSetUserDisabled(e.ctx, e.admin, users[i].ID, true, e.clock.Now()); err != nil {
					t.Errorf("disable %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		for i := range n {
			got, err := e.svc.Get(e.ctx, e.tenant, props[i].ID)
			if err != nil {
				t.Fatal(err)
			}
			if k := len(got.Approvals()); k != 0 {
				t.Errorf("proposal %d: a disabled reviewer's approval counts (%d)", i, k)
			}
		}
	})
}

// A reviewer enrolled or password-reset by the administrator who created
// or owns the agent cannot approve its proposals; the store re-checks
// inside the deciding transaction, whatever the caller passes.
func TestSeparationOfDuties(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		admin2 := e.user("admin2", models.RoleAdmin)
		agent, err := e.store.AdminCreateAgent(e.ctx, e.admin, "admins-bot", "", "sha256:admins-bot")
		if err != nil {
			t.Fatal(err)
		}
		if agent.CreatedBy != e.admin.ID {
			t.Fatalf("agent.CreatedBy = %q", agent.CreatedBy)
		}
		dave, err := e.store.AdminCreateUser(e.ctx, e.admin, "dave", models.RoleReviewer, "x")
		if err != nil {
			t.Fatal(err)
		}
		erin, err := e.store.AdminCreateUser(e.ctx, admin2, "erin", models.RoleReviewer, "x")
		if err != nil {
			t.Fatal(err)
		}
		propose := func(order string) *models.Proposal {
			p, _, err := e.svc.Propose(e.ctx, agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs(order, 100)})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		approve := func(u models.User, p *models.Proposal) error {
			_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(u, nil)})
			return err
		}
		p := propose("ord_1014")
		wantCode(t, approve(dave, p), models.EDutyConflict)
		_, err = e.svc.CheckApprove(e.ctx, dave, p.ID, p.ArgsDigest)
		wantCode(t, err, models.EDutyConflict)
		// The administrator who created the agent saw its key.
		wantCode(t, approve(e.admin, p), models.EDutyConflict)
		// A stale account value does not get past the store.
		stale := dave
		stale.CreatedBy = ""
		wantCode(t, approve(stale, p), models.EDutyConflict)
		// alice was enrolled from the command line: no conflict until the
		// agent's administrator resets her password.
		reset, err := e.store.AdminSetPassword(e.ctx, e.admin, e.alice.ID, "y", e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if reset.PasswordResetBy != e.admin.ID || reset.PasswordResetAt == nil {
			t.Fatalf("reset not recorded: %+v", reset)
		}
		wantCode(t, approve(e.alice, p), models.EDutyConflict)
		wantCode(t, approve(reset, p), models.EDutyConflict)
		// erin, enrolled by another administrator, may.
		if err := approve(erin, p); err != nil {
			t.Fatalf("erin: %v", err)
		}
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusConfirmed || len(got.Decisions) != 1 {
			t.Fatalf("after erin: %s, %d decisions", got.Status, len(got.Decisions))
		}
		d := got.Decisions[0].Decider
		if d.EnrolledBy != "admin2" || !d.EnrolledAt.Equal(erin.CreatedAt) {
			t.Errorf("decider enrolment = %+v, want admin2 at %v", d, erin.CreatedAt)
		}
		// An owner counts like a creator: admin2 owns bot2, created by the CLI.
		bot2, err := e.store.CreateAgent(e.ctx, e.tenant, "bot2", admin2.ID, "sha256:bot2")
		if err != nil {
			t.Fatal(err)
		}
		p2, _, err := e.svc.Propose(e.ctx, bot2, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1015", 100)})
		if err != nil {
			t.Fatal(err)
		}
		wantCode(t, approve(erin, p2), models.EDutyConflict)
		if err := approve(dave, p2); err != nil {
			t.Fatalf("dave on admin2's agent: %v", err)
		}
	})
}
