package writes_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

func TestProposeConfirmExecute(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1001", 19900)
		if got, want := p.Status, models.StatusAwaitingConfirmation; got != want {
			t.Fatalf("status = %s, want %s", got, want)
		}
		if got, want := p.Tier.Confirmation, models.ConfirmClick; got != want {
			t.Errorf("confirmation = %s, want %s", got, want)
		}
		if got, want := p.ExpiresAt, start.Add(300*time.Second); !got.Equal(want) {
			t.Errorf("expires_at = %s, want %s", got, want)
		}
		wantDigest, _ := models.Digest([]byte(`{"reason":"damaged on arrival","currency":"CNY","amount_minor":19900,"order_id":"ord_1001"}`))
		if p.ArgsDigest != wantDigest {
			t.Errorf("digest = %s, want %s", p.ArgsDigest, wantDigest)
		}
		var amount models.PreviewField
		for _, f := range p.Preview {
			if f.Name == "amount_minor" {
				amount = f
			}
		}
		if got, want := amount.Display, "¥199.00"; got != want {
			t.Errorf("amount display = %q, want %q", got, want)
		}
		if got, want := string(amount.Value), "19900"; got != want {
			t.Errorf("amount value = %s, want %s", got, want)
		}
		if !strings.HasPrefix(p.RequestKey, "refund_order:"+e.tenant+":ord_1001:"+p.ID) {
			t.Errorf("derived request key = %q", p.RequestKey)
		}

		c := e.confirm(p)
		claims, err := e.tokens.Verify(e.ctx, c.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if claims.Subject != e.agent.ID || claims.Tenant != e.tenant || claims.ArgsDigest != p.ArgsDigest ||
			claims.Resource != "ord_1001" || claims.ProposalID != p.ID || claims.RequestKey != p.RequestKey ||
			claims.Operation != "refund_order" || claims.Policy != p.PolicyVersion ||
			len(claims.Approvers) != 1 || claims.Approvers[0] != e.alice.ID {
			t.Fatalf("claims do not bind the write: %+v", claims)
		}

		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, c.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ex.Status, models.StatusSucceeded; got != want {
			t.Fatalf("execution status = %s, want %s", got, want)
		}
		r := ex.Receipt()
		if r.RequestKey != p.RequestKey || r.ArgsDigest != p.ArgsDigest || r.ProviderRef == "" || r.CompletedAt == nil || r.Operation != "refund_order" {
			t.Errorf("receipt incomplete: %+v", r)
		}
		if got, want := e.order("ord_1001").RefundedMinor, int64(19900); got != want {
			t.Errorf("refunded = %d, want %d", got, want)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != models.StatusSucceeded || got.Execution == nil || got.Execution.ID != ex.ID {
			t.Errorf("proposal after execution: status %s, execution %+v", got.Status, got.Execution)
		}
	})
}

func TestHundredRedeemersOneWrite(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1003", 19900))
		const n = 100
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			success  int
			consumed int
			other    []error
			execIDs  = map[string]bool{}
		)
		startGun := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-startGun
				ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && ex.Status == models.StatusSucceeded:
					success++
					execIDs[ex.ID] = true
				case models.IsCode(err, models.EAlreadyConsumed):
					consumed++
					var me *models.Error
					if ok := asErr(err, &me); ok {
						execIDs[me.Details["execution_id"].(string)] = true
					}
				default:
					other = append(other, err)
				}
			}()
		}
		close(startGun)
		wg.Wait()
		if success != 1 || consumed != n-1 || len(other) != 0 {
			t.Fatalf("succeeded=%d already_consumed=%d other=%v; want 1, %d, none", success, consumed, other, n-1)
		}
		if len(execIDs) != 1 {
			t.Errorf("already_consumed named %d executions, want the one", len(execIDs))
		}
		if got, want := e.order("ord_1003").RefundedMinor, int64(19900); got != want {
			t.Errorf("refunded = %d, want %d (exactly once)", got, want)
		}
		// Each applied write moves the order's version on by one.
		if got, want := e.order("ord_1003").Version, int64(2); got != want {
			t.Errorf("order version = %d, want %d (one write)", got, want)
		}
	})
}

func TestTwoTokensThatCannotBothFit(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		a := e.confirm(e.propose("ord_1004", 15000))
		b := e.confirm(e.propose("ord_1004", 15000))
		var (
			wg   sync.WaitGroup
			errs = make([]error, 2)
		)
		for i, p := range []*models.Proposal{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			}()
		}
		wg.Wait()
		ok, changed := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case models.IsCode(err, models.EStateChanged):
				changed++
			default:
				t.Errorf("unexpected error %v", err)
			}
		}
		if ok != 1 || changed != 1 {
			t.Fatalf("succeeded=%d state_changed=%d, want 1 and 1", ok, changed)
		}
		if got, want := e.order("ord_1004").RefundedMinor, int64(15000); got != want {
			t.Errorf("refunded = %d, want %d", got, want)
		}
		for _, p := range []*models.Proposal{a, b} {
			got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
			if got.Status != models.StatusSucceeded && got.Status != models.StatusFailedTerminal {
				t.Errorf("proposal %s ended %s", p.ID, got.Status)
			}
		}
		// The loser's token stays consumed: presenting it again never writes.
		for _, p := range []*models.Proposal{a, b} {
			_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			wantCode(t, err, models.EAlreadyConsumed)
		}
	})
}

func TestTokenExpiresAtExactlyExp(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1005", 1000))
		claims, _ := e.tokens.Verify(e.ctx, p.Token.Compact)
		exp := time.Unix(claims.Expiry, 0).UTC()
		if !exp.Equal(p.Token.ExpiresAt) {
			t.Fatalf("claim exp %s != stored %s", exp, p.Token.ExpiresAt)
		}
		e.clock.Set(exp)
		_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ETokenExpired)
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusExpired || got.Token.Status != models.TokenExpired {
			t.Errorf("after expiry: proposal %s, token %s", got.Status, got.Token.Status)
		}
		// Moving the clock back does not revive it.
		e.clock.Set(exp.Add(-time.Second))
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ETokenExpired)
		if got := e.order("ord_1005").RefundedMinor; got != 0 {
			t.Errorf("an expired token refunded %d", got)
		}

		// One millisecond before exp it is still valid.
		e.clock.Set(start.Add(time.Hour))
		q := e.confirm(e.propose("ord_1006", 1000))
		e.clock.Set(q.Token.ExpiresAt.Add(-time.Millisecond))
		if _, err := e.svc.Execute(e.ctx, e.agent, q.ID, q.Token.Compact); err != nil {
			t.Fatalf("just before exp: %v", err)
		}
	})
}

func TestProposalExpiresAtExactlyExpiresAt(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1007", 1000)
		e.clock.Set(p.ExpiresAt)
		_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EProposalExpired)
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusExpired {
			t.Errorf("status = %s, want expired", got.Status)
		}
		// The sweeper finds the ones nobody reads.
		q := e.propose("ord_1008", 1000)
		e.clock.Set(q.ExpiresAt.Add(time.Millisecond))
		n, err := e.svc.Sweep(e.ctx)
		if err != nil || n != 1 {
			t.Fatalf("sweep = %d, %v; want 1", n, err)
		}
	})
}

func TestRequestKeyIdempotency(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		in := writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1009", 500), RequestKey: "chat-42:refund"}
		p, created, err := e.svc.Propose(e.ctx, e.agent, in)
		if err != nil || !created {
			t.Fatalf("first: %v %v", created, err)
		}
		// Same meaning, other spelling: same digest, same proposal.
		in.Arguments = json.RawMessage(`{"currency":" cny ","reason":"damaged on arrival","order_id":"ord_1009","amount_minor":500}`)
		again, created, err := e.svc.Propose(e.ctx, e.agent, in)
		if err != nil || created || again.ID != p.ID {
			t.Fatalf("retry: created=%v id=%v err=%v; want the same proposal", created, again, err)
		}
		in.Arguments = refundArgs("ord_1009", 501)
		_, _, err = e.svc.Propose(e.ctx, e.agent, in)
		wantCode(t, err, models.EIdempotencyKeyReuse)
		if p.RequestKey != "chat-42:refund" {
			t.Errorf("request key = %q", p.RequestKey)
		}
	})
}

func TestConfirmChecks(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1010", 1000)
		_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: "sha256:00", Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EArgsMismatch)

		disabled := e.alice
		disabled.Disabled = true
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: disabled, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(disabled, nil)})
		wantCode(t, err, models.EForbidden)

		// Another channel refunds part of the order: the preview is stale.
		if err := e.ledger.BumpOrder(e.ctx, e.tenant, "ord_1010"); err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EStateChanged)

		// A double submit records one decision.
		q := e.propose("ord_1011", 1000)
		in := writes.ConfirmInput{Reviewer: e.alice, ProposalID: q.ID, DigestSeen: q.ArgsDigest, EffectSeen: q.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)}
		if _, err := e.svc.Confirm(e.ctx, in); err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Confirm(e.ctx, in)
		wantCode(t, err, models.EInvalidState)
		got, _ := e.svc.Get(e.ctx, e.tenant, q.ID)
		if len(got.Decisions) != 1 {
			t.Errorf("decisions = %d, want 1", len(got.Decisions))
		}

		// High-risk tiers need the step-up.
		h := e.propose("ord_2001", 50000)
		if h.Tier.Confirmation != models.ConfirmWebAuthn || h.Tier.Quorum != 1 {
			t.Fatalf("tier for 50000 = %+v", h.Tier)
		}
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: h.ID, DigestSeen: h.ArgsDigest, EffectSeen: h.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EStepUpRequired)
	})
}

func TestConcurrentDoubleSubmitOneDecision(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1012", 1000)
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if c := models.ErrorCode(err); c != models.EInvalidState && c != models.EAlreadyDecided {
				t.Errorf("unexpected %v", err)
			}
		}
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if ok != 1 || len(got.Decisions) != 1 || got.Token == nil {
			t.Fatalf("ok=%d decisions=%d token=%v; want one of each", ok, len(got.Decisions), got.Token)
		}
	})
}

func TestQuorumOfDistinctApprovers(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		bob := e.user("bob", models.RoleReviewer)
		p := e.propose("ord_2002", 300000)
		if p.Tier.Quorum != 2 || p.Tier.Confirmation != models.ConfirmWebAuthn {
			t.Fatalf("tier for 300000 = %+v", p.Tier)
		}
		stepUp := func(u models.User) error {
			_, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
				Evidence: steppedUp(u, p.ID, p.ArgsDigest, []string{"pwd", "webauthn"}, json.RawMessage(`{"k":1}`))})
			return err
		}
		if err := stepUp(e.alice); err != nil {
			t.Fatal(err)
		}
		wantCode(t, stepUp(e.alice), models.EAlreadyDecided)
		got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusAwaitingConfirmation || got.Token != nil {
			t.Fatalf("after one approver: %s", got.Status)
		}
		if err := stepUp(bob); err != nil {
			t.Fatal(err)
		}
		got, _ = e.svc.Get(e.ctx, e.tenant, p.ID)
		if got.Status != models.StatusConfirmed {
			t.Fatalf("after two approvers: %s", got.Status)
		}
		c, _ := e.tokens.Verify(e.ctx, got.Token.Compact)
		if len(c.Approvers) != 2 || !contains(c.AMR, "webauthn") {
			t.Errorf("token approvers %v amr %v", c.Approvers, c.AMR)
		}
		// Redeeming reads the proposal, its token and both decisions in
		// one statement: the same decisions, in the same order, as a read
		// of the proposal; none beside no token. (decide refuses: nothing
		// is consumed.)
		redeeming := func(jti string) store.Redeeming {
			t.Helper()
			var r store.Redeeming
			stop := errors.New("read only")
			_, consumed, err := e.store.Redeem(e.ctx, e.tenant, p.ID, jti, func(got store.Redeeming) (store.Consume, error) {
				r = got
				return store.Consume{}, stop
			})
			if !errors.Is(err, stop) || consumed {
				t.Fatalf("redeem with a refusing decide: consumed %v, %v", consumed, err)
			}
			return r
		}
		r := redeeming(got.Token.JTI)
		if r.Token == nil || r.Token.JTI != got.Token.JTI || r.Token.Status != models.TokenIssued {
			t.Fatalf("redemption: token %+v", r.Token)
		}
		if len(r.Proposal.Decisions) != 2 || !reflect.DeepEqual(r.Proposal.Decisions, got.Decisions) {
			t.Errorf("redemption's decisions\n %+v\nproposal's\n %+v", r.Proposal.Decisions, got.Decisions)
		}
		if r := redeeming("jti_none"); r.Token != nil || r.Proposal.Decisions != nil {
			t.Errorf("redemption of an unknown jti: token %+v, decisions %v", r.Token, r.Proposal.Decisions)
		}
	})
}

func TestRequesterMayNotApprove(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		owned, err := e.store.CreateAgent(e.ctx, e.tenant, "alices-assistant", e.alice.ID, "sha256:owned")
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := e.svc.Propose(e.ctx, owned, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1013", 100)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.ESelfApproval)
		if _, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.admin, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.admin, nil)}); err != nil {
			t.Errorf("another reviewer: %v", err)
		}
	})
}

// In a quorum the requester never counts, even where the tier allows
// self-approval.
func TestRequesterNeverCountsTowardAQuorum(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		yaml := strings.Replace(string(registry.DemoYAML()), "        quorum: 2\n", "        quorum: 2\n        allow_self_approval: true\n", 1)
		reg, err := registry.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		e.svc = e.newService(reg)
		owned, err := e.store.CreateAgent(e.ctx, e.tenant, "alices-assistant", e.alice.ID, "sha256:owned")
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := e.svc.Propose(e.ctx, owned, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_2009", 300000)})
		if err != nil {
			t.Fatal(err)
		}
		if p.Tier.Quorum != 2 || !p.Tier.AllowSelfApproval {
			t.Fatalf("tier %+v", p.Tier)
		}
		in := writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
			Evidence: steppedUp(e.alice, p.ID, p.ArgsDigest, []string{"pwd", "webauthn"}, json.RawMessage(`{"test":"assertion"}`))}
		_, err = e.svc.Confirm(e.ctx, in)
		wantCode(t, err, models.ESelfApproval)
		_, err = e.svc.CheckApprove(e.ctx, e.alice, p.ID, p.ArgsDigest)
		wantCode(t, err, models.ESelfApproval)
		if _, err := e.svc.CheckApprove(e.ctx, e.admin, p.ID, p.ArgsDigest); err != nil {
			t.Errorf("another reviewer's check: %v", err)
		}
	})
}

func TestDeclineAndCancel(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1014", 100)
		_, err := e.svc.Decline(e.ctx, writes.DeclineInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, Reason: "  "})
		wantCode(t, err, models.EInvalidRequest)
		d, err := e.svc.Decline(e.ctx, writes.DeclineInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, Reason: "customer already refunded by phone"})
		if err != nil || d.Status != models.StatusDeclined {
			t.Fatalf("decline: %v %v", d, err)
		}
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.admin, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.admin, nil)})
		wantCode(t, err, models.EInvalidState)

		q := e.propose("ord_1015", 100)
		c, err := e.svc.Cancel(e.ctx, e.agent, q.ID)
		if err != nil || c.Status != models.StatusCancelled {
			t.Fatalf("cancel: %v %v", c, err)
		}
		// A second cancel (a retry after a lost answer) is done already.
		if c, err := e.svc.Cancel(e.ctx, e.agent, q.ID); err != nil || c.Status != models.StatusCancelled {
			t.Fatalf("cancel again: %v %v", c, err)
		}
		// Cancelling what is no longer waiting for another reason is not.
		_, err = e.svc.Cancel(e.ctx, e.agent, p.ID)
		wantCode(t, err, models.EInvalidState)
	})
}

func TestRevokeBeforeUse(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1016", 100))
		_, err := e.svc.Revoke(e.ctx, e.alice, p.ID)
		wantCode(t, err, models.EForbidden)
		r, err := e.svc.Revoke(e.ctx, e.admin, p.ID)
		if err != nil || r.Status != models.StatusRevoked || r.Token.Status != models.TokenRevoked {
			t.Fatalf("revoke: %v %v", r, err)
		}
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ERevoked)
		_, err = e.svc.Revoke(e.ctx, e.admin, p.ID)
		wantCode(t, err, models.EInvalidState)
		if got := e.order("ord_1016").RefundedMinor; got != 0 {
			t.Errorf("revoked token refunded %d", got)
		}
	})
}

func TestBadProposals(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		cases := []struct {
			name    string
			tool    string
			args    string
			code    models.Code
			pointer string
		}{
			{"unknown tool", "drop_database", `{}`, models.EUnknownTool, ""},
			{"not an object", "refund_order", `[1,2]`, models.EInvalidRequest, ""},
			{"extra field", "refund_order", `{"order_id":"ord_1001","amount_minor":1,"currency":"CNY","reason":"x","note":"hi"}`, models.ESchemaViolation, "/note"},
			{"wrong type", "refund_order", `{"order_id":"ord_1001","amount_minor":"199","currency":"CNY","reason":"x"}`, models.ESchemaViolation, "/amount_minor"},
			{"amount without currency", "refund_order", `{"order_id":"ord_1001","amount_minor":19900,"reason":"x"}`, models.EClarificationNeeded, "/currency"},
			{"over the balance", "refund_order", `{"order_id":"ord_1017","amount_minor":20000,"currency":"CNY","reason":"x"}`, models.EBusinessRule, ""},
			{"no such order", "refund_order", `{"order_id":"ord_9999","amount_minor":1,"currency":"CNY","reason":"x"}`, models.EBusinessRule, ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: c.tool, Arguments: json.RawMessage(c.args)})
				wantCode(t, err, c.code)
				var me *models.Error
				asErr(err, &me)
				if c.pointer != "" && (len(me.Fields) == 0 || me.Fields[0].Pointer != c.pointer) {
					t.Errorf("fields = %+v, want pointer %s", me.Fields, c.pointer)
				}
				if c.code == models.EBusinessRule {
					id, _ := me.Details["proposal_id"].(string)
					got, err := e.svc.Get(e.ctx, e.tenant, id)
					if err != nil || got.Status != models.StatusRejected {
						t.Errorf("rejected proposal not kept: %v %v", got, err)
					}
				}
			})
		}
		page, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{Statuses: []models.Status{models.StatusAwaitingConfirmation}})
		if err != nil || len(page.Items) != 0 {
			t.Errorf("bad input left %d awaiting proposals (%v)", len(page.Items), err)
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1018", 100))
		other, err := e.store.CreateTenant(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		mallory, err := e.store.CreateUser(e.ctx, other.ID, "mallory", models.RoleAdmin, "x")
		if err != nil {
			t.Fatal(err)
		}
		foreignAgent, err := e.store.CreateAgent(e.ctx, other.ID, "acme-bot", "", "sha256:acme")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Get(e.ctx, other.ID, p.ID)
		wantCode(t, err, models.ENotFound)
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: mallory, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(mallory, nil)})
		wantCode(t, err, models.ENotFound)
		_, err = e.svc.Revoke(e.ctx, mallory, p.ID)
		wantCode(t, err, models.ENotFound)
		_, err = e.svc.Cancel(e.ctx, foreignAgent, p.ID)
		wantCode(t, err, models.ENotFound)
		_, err = e.svc.Execute(e.ctx, foreignAgent, p.ID, p.Token.Compact)
		wantCode(t, err, models.ETenantMismatch)
		page, err := e.svc.List(e.ctx, other.ID, writes.ListQuery{})
		if err != nil || len(page.Items) != 0 {
			t.Errorf("other tenant lists %d proposals", len(page.Items))
		}
		// Another agent of the same tenant may not redeem it either.
		sibling, err := e.store.CreateAgent(e.ctx, e.tenant, "sibling", "", "sha256:sibling")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Execute(e.ctx, sibling, p.ID, p.Token.Compact)
		wantCode(t, err, models.ESubjectMismatch)
		if got := e.order("ord_1018").RefundedMinor; got != 0 {
			t.Errorf("refunded %d", got)
		}
	})
}

func TestWaitReturnsOnChange(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.propose("ord_1019", 100)
		done := make(chan *models.Proposal)
		go func() {
			got, err := e.svc.Wait(e.ctx, e.tenant, p.ID, p.Revision, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		time.Sleep(50 * time.Millisecond)
		e.confirm(p)
		select {
		case got := <-done:
			if got.Status != models.StatusConfirmed {
				t.Errorf("woke with %s", got.Status)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("long-poll did not wake on confirmation")
		}
		// Nothing changes: it returns the same revision when the wait ends.
		cur, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
		got, err := e.svc.Wait(e.ctx, e.tenant, p.ID, cur.Revision, 100*time.Millisecond)
		if err != nil || got.Revision != cur.Revision {
			t.Errorf("idle wait: %v %v", got, err)
		}
	})
}

func TestBatchResourceSet(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		a, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "delete_logs",
			Arguments: json.RawMessage(`{"log_ids":["log_0003","log_0001","log_0002"],"reason":"rotate"}`), RequestKey: "b1"})
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "delete_logs",
			Arguments: json.RawMessage(`{"log_ids":["log_0002","log_0003","log_0001"],"reason":"rotate"}`), RequestKey: "b2"})
		if err != nil {
			t.Fatal(err)
		}
		if a.ArgsDigest != b.ArgsDigest || a.ResourceSetDigest != b.ResourceSetDigest || a.ResourceCount != 3 {
			t.Fatalf("set not fixed: %s/%s %s/%s count %d", a.ArgsDigest, b.ArgsDigest, a.ResourceSetDigest, b.ResourceSetDigest, a.ResourceCount)
		}
		a = e.confirm(a)
		b = e.confirm(b)
		if _, err := e.svc.Execute(e.ctx, e.agent, a.ID, a.Token.Compact); err != nil {
			t.Fatal(err)
		}
		// The set changed (deleted): the second confirmation cannot run.
		_, err = e.svc.Execute(e.ctx, e.agent, b.ID, b.Token.Compact)
		wantCode(t, err, models.EStateChanged)
	})
}

func contains(ss []string, s string) bool {
	for _, v := range ss {
		if v == s {
			return true
		}
	}
	return false
}

func TestListKeysetPagination(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		var ids []string
		for i := range 7 {
			e.clock.Advance(time.Second * time.Duration(i%2)) // some share a creation time
			ids = append(ids, e.propose("ord_1001", int64(100+i)).ID)
		}
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			page, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{Limit: 3, Cursor: cursor, AgentID: e.agent.ID})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page.Items {
				got = append(got, p.ID)
			}
			if page.Next == "" {
				break
			}
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			cursor = page.Next
		}
		if len(got) != 7 {
			t.Fatalf("listed %d, want 7: %v", len(got), got)
		}
		for i := range got {
			if got[i] != ids[len(ids)-1-i] {
				t.Fatalf("order = %v, want newest first %v", got, ids)
			}
		}
		page, _ := e.svc.List(e.ctx, e.tenant, writes.ListQuery{Tool: "delete_logs"})
		if len(page.Items) != 0 {
			t.Errorf("tool filter let %d through", len(page.Items))
		}
		_, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{Statuses: []models.Status{"approved"}})
		wantCode(t, err, models.EInvalidRequest)
	})
}

func TestWaitSeesTheExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	p := e.propose("ord_1019", 100)
	done := make(chan *models.Proposal, 1)
	go func() {
		got, _ := e.svc.Wait(e.ctx, e.tenant, p.ID, p.Revision, 10*time.Second)
		done <- got
	}()
	time.Sleep(50 * time.Millisecond)
	e.clock.Set(p.ExpiresAt)
	select {
	case got := <-done:
		if got == nil || got.Status != models.StatusExpired {
			t.Fatalf("woke with %+v, want expired", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll did not notice the expiry")
	}
}
