package writes_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// lowRefunds are mandate terms over the demo refund tool's low tier: at
// most cap CNY per call, budget in all, uses writes, for an hour.
func lowRefunds(e *env, cap, budget, uses int64) models.MandateTerms {
	return models.MandateTerms{Tool: "refund_order", Tiers: []string{"low"}, ResourcePattern: `ord_1[0-9]{3}`,
		Money:   &models.MandateMoney{Field: "amount_minor", Currency: "CNY", PerCallCap: cap, Budget: budget},
		MaxUses: uses, ExpiresAt: e.clock.Now().Add(time.Hour), Reason: "damaged-goods refunds during the sale"}
}

// grant asks for a mandate as the demo agent and has it granted by
// approvers (with a security key when the tier needs one).
func (e *env) grant(terms models.MandateTerms, approvers ...models.User) models.Mandate {
	e.t.Helper()
	p, created, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: terms})
	if err != nil || !created {
		e.t.Fatalf("request mandate: %v %v", created, err)
	}
	if p.Kind != models.KindMandate || p.Status != models.StatusAwaitingConfirmation {
		e.t.Fatalf("mandate proposal: kind %q status %s", p.Kind, p.Status)
	}
	for _, u := range approvers {
		in := writes.ConfirmInput{Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(u, nil)}
		if p.Tier.Confirmation == models.ConfirmWebAuthn {
			in.Evidence = steppedUp(in.Reviewer, p.ID, p.ArgsDigest, nil, json.RawMessage(`{"test":"assertion"}`))
		}
		if p, err = e.svc.Confirm(e.ctx, in); err != nil {
			e.t.Fatalf("grant: %v", err)
		}
	}
	if p.Status != models.StatusConfirmed || p.MandateID == "" || p.Token != nil {
		e.t.Fatalf("granted mandate proposal: status %s mandate %q token %v", p.Status, p.MandateID, p.Token)
	}
	m, err := e.svc.Mandate(e.ctx, e.tenant, p.MandateID)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) mandate(id string) models.Mandate {
	e.t.Helper()
	m, err := e.svc.Mandate(e.ctx, e.tenant, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// A mandate is granted under the rules of the strictest tier it covers:
// covering the refund tool's quorum tier takes two approvers with a
// security key each; the digest approved is that of the canonical terms.
func TestMandateGrantFollowsStrictestTier(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		terms := lowRefunds(e, 500000, 0, 5)
		terms.Tiers = nil // default: every tier, strictest first
		p, _, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: terms})
		if err != nil {
			t.Fatal(err)
		}
		if p.Tier.Name != "quorum" || p.Tier.Quorum != 2 || p.Tier.Confirmation != models.ConfirmWebAuthn {
			t.Fatalf("grant tier %+v, want quorum of 2 with a security key", p.Tier)
		}
		var got models.MandateTerms
		if err := json.Unmarshal(p.Arguments, &got); err != nil || !slices.Equal(got.Tiers, []string{"quorum", "high", "low"}) {
			t.Fatalf("terms %s: %v", p.Arguments, err)
		}
		if d, _ := models.Digest(p.Arguments); d != p.ArgsDigest {
			t.Fatalf("digest %s of %s, stored %s", d, p.Arguments, p.ArgsDigest)
		}
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantCode(t, err, models.EStepUpRequired)
		bob := e.user("bob", models.RoleReviewer)
		key := []string{"pwd", "webauthn"}
		ev := json.RawMessage(`{"test":"assertion"}`)
		one, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: steppedUp(e.alice, p.ID, p.ArgsDigest, key, ev)})
		if err != nil || one.Status != models.StatusAwaitingConfirmation || one.MandateID != "" {
			t.Fatalf("after one of two approvals: %v %v", one.Status, err)
		}
		two, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: bob, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: steppedUp(bob, p.ID, p.ArgsDigest, key, ev)})
		if err != nil || two.Status != models.StatusConfirmed {
			t.Fatalf("after two approvals: %v", err)
		}
		m := e.mandate(two.MandateID)
		if !slices.Equal(m.Grantors, []string{e.alice.ID, bob.ID}) || m.TermsDigest != p.ArgsDigest || !m.Live(e.clock.Now()) {
			t.Fatalf("mandate %+v", m)
		}
	})
}

// Terms that do not hold together are refused before anything is stored,
// and an agent asks for itself only.
func TestMandateTermsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	for name, mod := range map[string]func(*models.MandateTerms){
		"no bound":        func(m *models.MandateTerms) { m.Money.Budget, m.MaxUses = 0, 0 },
		"not money":       func(m *models.MandateTerms) { m.Money.Field = "order_id" },
		"past expiry":     func(m *models.MandateTerms) { m.ExpiresAt = e.clock.Now() },
		"unknown tier":    func(m *models.MandateTerms) { m.Tiers = []string{"huge"} },
		"bad pattern":     func(m *models.MandateTerms) { m.ResourcePattern = "(" },
		"pattern and set": func(m *models.MandateTerms) { m.Resources = []string{"ord_1001"} },
		"unknown enum":    func(m *models.MandateTerms) { m.Enums = map[string][]string{"colour": {"red"}} },
		"no reason":       func(m *models.MandateTerms) { m.Reason = " " },
		"currency":        func(m *models.MandateTerms) { m.Money.Currency = "XYZ" },
	} {
		terms := lowRefunds(e, 1000, 5000, 0)
		mod(&terms)
		_, _, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: terms})
		if models.ErrorCode(err) != models.EInvalidRequest {
			t.Errorf("%s: %v, want invalid_request", name, err)
		}
	}
	// An unknown currency is named by its pointer, in the server's words
	// rather than the formatter's.
	terms := lowRefunds(e, 1000, 5000, 0)
	terms.Money.Currency = "XYZ"
	_, _, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: terms})
	var me *models.Error
	if !errors.As(err, &me) || len(me.Fields) != 1 || me.Fields[0].Pointer != "/money/currency" ||
		strings.Contains(me.Fields[0].Message, "registry") {
		t.Errorf("unknown currency: %+v", err)
	}
	terms = lowRefunds(e, 1000, 5000, 0)
	terms.Agents = []string{e.agent.ID, "agt_other"}
	_, _, err = e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: terms})
	wantCode(t, err, models.EForbidden)
}

// Writes that fit are confirmed without a person, with a token naming the
// mandate (amr ["mandate"], approvers its grantors) and a receipt naming
// it; those that do not fit wait for a person with the reason.
func TestMandateConfirmsFittingWrites(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		m := e.grant(lowRefunds(e, 5000, 10000, 3), e.alice)
		p := e.propose("ord_1001", 4000)
		if p.Status != models.StatusConfirmed || p.MandateID != m.ID || p.Token == nil || len(p.Decisions) != 0 {
			t.Fatalf("fitting write: status %s mandate %q token %v", p.Status, p.MandateID, p.Token)
		}
		c, err := e.tokens.Verify(e.ctx, p.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		if c.MandateID != m.ID || !slices.Equal(c.AMR, []string{"mandate"}) || !slices.Equal(c.Approvers, []string{e.alice.ID}) {
			t.Fatalf("claims mandate %q amr %v approvers %v", c.MandateID, c.AMR, c.Approvers)
		}
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Status != models.StatusSucceeded || ex.Receipt().MandateID != m.ID || got.Execution.Receipt().MandateID != m.ID ||
			!slices.Equal(got.Execution.Receipt().MandateGrantors, []string{e.alice.ID}) {
			t.Fatalf("receipt %+v", got.Execution.Receipt())
		}

		cases := []struct {
			order  string
			amount int64
			note   string
		}{
			{"ord_1002", 6000, models.MandateOverCap},
			{"ord_2001", 100, models.MandateResourceOut},
			{"ord_2002", 25000, models.MandateTierAbove},
			{"ord_1004", 4000, ""},
			{"ord_1005", 4000, models.MandateBudgetOut},
			{"ord_1006", 2000, ""},
			{"ord_1007", 1, models.MandateBudgetOut},
		}
		for _, c := range cases {
			p := e.propose(c.order, c.amount)
			if c.note == "" {
				if p.Status != models.StatusConfirmed || p.MandateID != m.ID {
					t.Fatalf("%s %d: status %s note %q", c.order, c.amount, p.Status, p.MandateNote)
				}
				continue
			}
			if p.Status != models.StatusAwaitingConfirmation || p.MandateNote != c.note || p.MandateID != "" {
				t.Fatalf("%s %d: status %s note %q, want awaiting with %q", c.order, c.amount, p.Status, p.MandateNote, c.note)
			}
			// A person still decides it, as always.
			if c.amount <= 20000 {
				e.confirm(p)
			}
		}
		if m := e.mandate(m.ID); m.Spent != 10000 || m.Uses != 3 {
			t.Fatalf("spent %d uses %d, want 10000 and 3", m.Spent, m.Uses)
		}
	})
}

// The use count bounds a mandate without a budget.
func TestMandateUseCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	terms := lowRefunds(e, 1000, 0, 2)
	m := e.grant(terms, e.alice)
	for i, want := range []models.Status{models.StatusConfirmed, models.StatusConfirmed, models.StatusAwaitingConfirmation} {
		p := e.propose(fmt.Sprintf("ord_10%02d", i+1), 900)
		if p.Status != want {
			t.Fatalf("write %d: %s, want %s", i, p.Status, want)
		}
		if i == 2 && p.MandateNote != models.MandateUsesOut {
			t.Fatalf("note %q", p.MandateNote)
		}
	}
	if m := e.mandate(m.ID); m.Uses != 2 || m.Spent != 1800 {
		t.Fatalf("uses %d spent %d", m.Uses, m.Spent)
	}
	// A mandate never grants another mandate: asking for one always
	// takes a person.
	again := e.grantable(lowRefunds(e, 1000, 0, 2))
	if again.Status != models.StatusAwaitingConfirmation || again.MandateID != "" {
		t.Fatalf("a mandate request under a live mandate: %s %q", again.Status, again.MandateID)
	}
}

// grantable asks for a mandate and returns the proposal as the agent gets it.
func (e *env) grantable(terms models.MandateTerms) *models.Proposal {
	e.t.Helper()
	p, _, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: terms})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// At the exact expiry instant (right-open) the database refuses the spend
// even when the caller read the mandate as live a moment before; a
// millisecond earlier it pays.
func TestMandateExpiryBoundary(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		m := e.grant(lowRefunds(e, 1000, 10000, 0), e.alice)
		end := m.Terms.ExpiresAt
		e.clock.Set(end.Add(-time.Millisecond))
		if p := e.propose("ord_1001", 100); p.Status != models.StatusConfirmed {
			t.Fatalf("just before expiry: %s (%s)", p.Status, p.MandateNote)
		}
		// Read as live, then the clock reaches the boundary before the
		// spend: the conditional update decides.
		p := e.outside()
		live, err := e.store.LiveMandates(e.ctx, e.tenant, "refund_order")
		if err != nil || len(live) != 1 {
			t.Fatal(live, err)
		}
		_, err = e.store.ConfirmByMandate(e.ctx, e.tenant, p.ID, m.ID, 100, end, e.issueNothing(t))
		var refused *store.MandateRefused
		if !asErr(err, &refused) || refused.Reason != models.MandateExpired {
			t.Fatalf("spend at expiry: %v", err)
		}
		e.clock.Set(end)
		if p := e.propose("ord_1002", 100); p.Status != models.StatusAwaitingConfirmation || p.MandateNote != models.MandateExpired {
			t.Fatalf("at expiry: %s (%q)", p.Status, p.MandateNote)
		}
		if m := e.mandate(m.ID); m.Spent != 100 || m.Uses != 1 {
			t.Fatalf("spent %d uses %d", m.Spent, m.Uses)
		}
	})
}

// outside proposes a write the mandates of lowRefunds do not cover (their
// resource pattern leaves ord_2001 out), for driving ConfirmByMandate
// directly: the store decides on status, expiry, budget and count alone.
func (e *env) outside() *models.Proposal {
	e.t.Helper()
	p := e.propose("ord_2001", 100)
	if p.Status != models.StatusAwaitingConfirmation || p.MandateNote != models.MandateResourceOut {
		e.t.Fatalf("status %s note %q", p.Status, p.MandateNote)
	}
	return p
}

// issueNothing fails the test if a token is built.
func (e *env) issueNothing(t *testing.T) store.IssueFunc {
	return func(*models.Proposal) (models.Token, error) {
		t.Error("a token was built")
		return models.Token{}, models.Errorf(models.EInternal, "no token")
	}
}

// Revoking a mandate stops it at once, also for a write that read it as
// live before the revocation; a token it issued before stays redeemable
// under the ordinary rules.
func TestMandateRevokedMidStream(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		m := e.grant(lowRefunds(e, 1000, 10000, 0), e.alice)
		before := e.propose("ord_1001", 500)
		if before.Status != models.StatusConfirmed {
			t.Fatalf("before revoke: %s", before.Status)
		}
		_, err := e.svc.RevokeMandate(e.ctx, e.alice, m.ID)
		wantCode(t, err, models.EForbidden)
		p := e.outside()
		got, err := e.svc.RevokeMandate(e.ctx, e.admin, m.ID)
		if err != nil || got.Status != models.MandateRevoked || got.RevokedBy != e.admin.ID {
			t.Fatalf("revoke: %+v %v", got, err)
		}
		_, err = e.svc.RevokeMandate(e.ctx, e.admin, m.ID)
		wantCode(t, err, models.EInvalidState)
		_, err = e.store.ConfirmByMandate(e.ctx, e.tenant, p.ID, m.ID, 100, e.clock.Now(), e.issueNothing(t))
		var refused *store.MandateRefused
		if !asErr(err, &refused) || refused.Reason != models.MandateRevokedReason {
			t.Fatalf("spend after revoke: %v", err)
		}
		if after := e.propose("ord_1002", 500); after.Status != models.StatusAwaitingConfirmation {
			t.Fatalf("after revoke: %s", after.Status)
		}
		if ex, err := e.svc.Execute(e.ctx, e.agent, before.ID, before.Token.Compact); err != nil || ex.Status != models.StatusSucceeded {
			t.Fatalf("token issued before the revocation: %v", err)
		}
		other := newEnv(t, e.dbKind, nil)
		_, err = other.svc.RevokeMandate(other.ctx, other.admin, m.ID)
		wantCode(t, err, models.ENotFound)
	})
}

// 100 proposals at once, spread over three service instances, against one
// budget: exactly as many are confirmed as the budget pays for, never
// one more, and spent is their exact sum.
func TestMandateBudgetUnderConcurrency(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		m := e.grant(lowRefunds(e, 1000, 10000, 0), e.alice)
		svcs := []*writes.Service{e.svc, secondInstance(t, e), secondInstance(t, e)}
		const n = 100
		amounts := make([]int64, n)
		for i := range amounts {
			amounts[i] = int64(200 + 37*(i%9)) // 200…496: the budget runs out unevenly
		}
		results := make([]*models.Proposal, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				order := fmt.Sprintf("ord_10%02d", i%20+1)
				results[i], _, errs[i] = svcs[i%3].Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs(order, amounts[i])})
			}()
		}
		wg.Wait()
		var sum, confirmed int64
		for i, p := range results {
			if errs[i] != nil {
				t.Fatalf("proposal %d: %v", i, errs[i])
			}
			got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case got.Status == models.StatusConfirmed && got.MandateID == m.ID && got.Token != nil:
				sum += amounts[i]
				confirmed++
			case got.Status == models.StatusAwaitingConfirmation && got.MandateNote == models.MandateBudgetOut:
			default:
				t.Fatalf("proposal %d: status %s mandate %q note %q", i, got.Status, got.MandateID, got.MandateNote)
			}
		}
		after := e.mandate(m.ID)
		if after.Spent != sum || after.Uses != confirmed || sum > 10000 {
			t.Fatalf("mandate spent %d uses %d; confirmed writes sum %d in %d", after.Spent, after.Uses, sum, confirmed)
		}
		// Spending stops only when no remaining write fits: the smallest
		// amount would overspend.
		if sum+200 <= 10000 {
			t.Fatalf("budget left %d unspent although a 200 write was refused", 10000-sum)
		}
	})
}

// A mandate stands on its grantors: while one of them is disabled it
// confirms nothing — also for a write that read it as live just before —
// and it resumes when the account is enabled again.
func TestMandateStopsWhileAGrantorIsDisabled(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		m := e.grant(lowRefunds(e, 1000, 10000, 0), e.alice)
		p := e.outside()
		if _, err := e.store.AdminSetUserDisabled(e.ctx, e.admin, e.alice.ID, true, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		_, err := e.store.ConfirmByMandate(e.ctx, e.tenant, p.ID, m.ID, 100, e.clock.Now(), e.issueNothing(t))
		var refused *store.MandateRefused
		if !asErr(err, &refused) || refused.Reason != models.MandateGrantorOff {
			t.Fatalf("spend with a disabled grantor: %v", err)
		}
		if got := e.mandate(m.ID); got.Live(e.clock.Now()) || !got.GrantorDisabled {
			t.Fatalf("mandate with a disabled grantor: %+v", got)
		}
		if w := e.propose("ord_1001", 100); w.Status != models.StatusAwaitingConfirmation || w.MandateNote != models.MandateGrantorOff {
			t.Fatalf("write with a disabled grantor: %s %q", w.Status, w.MandateNote)
		}
		if _, err := e.store.AdminSetUserDisabled(e.ctx, e.admin, e.alice.ID, false, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		if w := e.propose("ord_1002", 100); w.Status != models.StatusConfirmed {
			t.Fatalf("write after the grantor was enabled: %s %q", w.Status, w.MandateNote)
		}
	})
}

// The grant follows the same people rules as a write: the owner of the
// asking agent may not grant it the mandate (the low tier does not allow
// self-approval), someone else may; and the mandate covers only the agents
// it names.
func TestMandateGrantPeopleRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	bob := e.user("bob", models.RoleReviewer)
	bot, err := e.store.CreateAgent(e.ctx, e.tenant, "bobs-bot", bob.ID, "sha256:bobs-bot")
	if err != nil {
		t.Fatal(err)
	}
	terms := lowRefunds(e, 1000, 10000, 0)
	p, _, err := e.svc.RequestMandate(e.ctx, bot, writes.MandateInput{Terms: terms})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: bob, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(bob, nil)})
	wantCode(t, err, models.ESelfApproval)
	_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: "sha256:other", Evidence: auth.ApprovalEvidence(e.alice, nil)})
	wantCode(t, err, models.EArgsMismatch)
	got, err := e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
	if err != nil || got.MandateID == "" {
		t.Fatalf("alice grants bob's bot: %v", err)
	}
	// The demo agent is not covered: its write waits, with no note.
	if w := e.propose("ord_1001", 100); w.Status != models.StatusAwaitingConfirmation || w.MandateNote != "" {
		t.Fatalf("write of an agent the mandate does not name: %s %q", w.Status, w.MandateNote)
	}
	w, _, err := e.svc.Propose(e.ctx, bot, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1002", 100)})
	if err != nil || w.Status != models.StatusConfirmed {
		t.Fatalf("write of the covered agent: %v %v", w, err)
	}
}

// A mandate is granted under the tool's rules of the day: once the
// registry's rules for the tool change (a new policy version), it covers
// nothing more, even while live.
func TestMandateEndsWithTheToolsRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	e.grant(lowRefunds(e, 1000, 10000, 0), e.alice)
	reg, err := registry.Parse([]byte(strings.Replace(string(registry.DemoYAML()),
		"policy_version: refund-2026-11.1", "policy_version: refund-2026-12.1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = e.newService(reg)
	if p := e.propose("ord_1001", 100); p.Status != models.StatusAwaitingConfirmation || p.MandateNote != models.MandatePolicyOther {
		t.Fatalf("write under new rules: %s %q", p.Status, p.MandateNote)
	}
}

// With several live mandates covering a proposal, its note comes from the
// one that came nearest to confirming it: a mandate for other orders says
// only that the order is not covered, while the one for this order says
// it is over its per-call cap, whichever was granted first.
func TestMandateNoteComesFromTheNearestMandate(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		elsewhere := lowRefunds(e, 5000, 0, 5)
		elsewhere.ResourcePattern = `ord_9[0-9]{3}`
		e.grant(elsewhere, e.alice)
		e.grant(lowRefunds(e, 300, 0, 5), e.alice)
		if p := e.propose("ord_1014", 301); p.Status != models.StatusAwaitingConfirmation || p.MandateNote != models.MandateOverCap {
			t.Fatalf("status %s, note %q; want awaiting, %q", p.Status, p.MandateNote, models.MandateOverCap)
		}
		if p := e.propose("ord_2001", 100); p.MandateNote != models.MandateResourceOut {
			t.Fatalf("an order neither covers: note %q", p.MandateNote)
		}
	})
}

// A tool whose risk rules read in the natural first-match order — the
// lenient tier for small amounts first, the strict catch-all last — must
// not let a mandate granted with one click confirm its strict writes: the
// tiers a mandate covers are the named one and those that ask for no more
// (a security key, approvers, groups), whatever the order of the rules.
// A mandate whose stored terms list a stricter tier after the one it was
// granted under (as terms could before tiers were compared) confirms none
// of those writes either.
func TestMandateCoversNoStricterTierThanItWasGrantedUnder(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		demoRisk := `    risk:
      - tier: quorum
        when: amount_minor > 200000
        confirmation: webauthn
        quorum: 2
        ttl: 600s
      - tier: high
        when: amount_minor > 20000
        confirmation: webauthn
        ttl: 120s
      - tier: low
        confirmation: click
        ttl: 300s`
		firstMatch := `    risk:
      - tier: low
        when: amount_minor <= 1000
        confirmation: click
        ttl: 300s
      - tier: quorum
        confirmation: webauthn
        quorum: 2
        ttl: 600s`
		doc := string(registry.DemoYAML())
		if !strings.Contains(doc, demoRisk) {
			t.Fatal("the demo registry's refund rules moved; update the test")
		}
		reg, err := registry.Parse([]byte(strings.Replace(doc, demoRisk, firstMatch, 1)))
		if err != nil {
			t.Fatal(err)
		}
		e.svc = e.newService(reg)

		terms := lowRefunds(e, 100000, 500000, 10)
		terms.Tiers = []string{"low"}
		p, _, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: terms})
		if err != nil {
			t.Fatal(err)
		}
		if p.Tier.Confirmation != models.ConfirmClick || !strings.Contains(string(p.Arguments), `"tiers":["low"]`) {
			t.Fatalf("a mandate for low: tier %+v, terms %s", p.Tier, p.Arguments)
		}
		m := e.grant(terms, e.alice)
		if got := e.propose("ord_1001", 5000); got.Status != models.StatusAwaitingConfirmation || got.MandateNote != models.MandateTierAbove {
			t.Fatalf("a quorum-tier refund under a one-click mandate: %s, note %q", got.Status, got.MandateNote)
		}
		if got := e.propose("ord_1002", 500); got.Status != models.StatusConfirmed || got.MandateID != m.ID {
			t.Fatalf("a low refund: %s, note %q", got.Status, got.MandateNote)
		}

		// Terms by default cover the tier that asks for the most, and the
		// grant takes its rules: a security key from two approvers.
		all := lowRefunds(e, 100000, 500000, 10)
		all.Tiers = nil
		q, _, err := e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: all, RequestKey: "mandate-all"})
		if err != nil {
			t.Fatal(err)
		}
		if q.Tier.Name != "quorum" || q.Tier.Confirmation != models.ConfirmWebAuthn || q.Tier.Approvers() != 2 {
			t.Fatalf("a mandate for every tier is granted under %+v", q.Tier)
		}

		// Stored terms listing the strict tier after the granted one.
		e.tamper(`UPDATE mandates SET terms = REPLACE(terms, '"tiers":["low"]', '"tiers":["low","quorum"]') WHERE id = ?`, m.ID)
		if got := e.mandate(m.ID); len(got.Terms.Tiers) != 2 {
			t.Fatalf("terms after the edit: %+v", got.Terms.Tiers)
		}
		if got := e.propose("ord_1003", 5000); got.Status != models.StatusAwaitingConfirmation || got.MandateNote != models.MandateTierAbove {
			t.Fatalf("a quorum-tier refund under terms listing quorum after low: %s, note %q", got.Status, got.MandateNote)
		}
	})
}
