package writes_test

import (
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// services returns the services concurrent requests are spread over: one
// on SQLite (one process owns the file), two instances over one database
// on PostgreSQL.
func (e *env) services(limits models.Limits) []*writes.Service {
	e.t.Helper()
	n := 1
	if e.dbKind == "postgres" {
		n = 2
	}
	var out []*writes.Service
	for range n {
		in := e.limitedInstance(time.Hour, limits)
		e.listen(in)
		out = append(out, in.svc)
	}
	return out
}

// proposeMany proposes n refunds at once, spread over svcs, and returns how
// many were created and the rate_limited errors.
func (e *env) proposeMany(svcs []*writes.Service, n int) (created int, limited []*models.Error) {
	e.t.Helper()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		gate = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-gate
			_, ok, err := svcs[i%len(svcs)].Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
				Arguments: refundArgs("ord_1001", 100)})
			mu.Lock()
			defer mu.Unlock()
			var me *models.Error
			switch {
			case err == nil && ok:
				created++
			case models.IsCode(err, models.ERateLimited) && asError(err, &me):
				limited = append(limited, me)
			default:
				e.t.Errorf("propose: created=%v err=%v", ok, err)
			}
		})
	}
	close(gate)
	wg.Wait()
	return created, limited
}

// TestOpenProposalsLimitHoldsUnderRace: 100 proposals at once against a
// limit of 10 open ones create exactly 10, on SQLite and across two
// instances over one PostgreSQL; the refusals say when the first open one
// expires. A decision frees exactly one place.
func TestOpenProposalsLimitHoldsUnderRace(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		svcs := e.services(models.Limits{OpenProposals: 10})
		created, limited := e.proposeMany(svcs, 100)
		if created != 10 || len(limited) != 90 {
			t.Fatalf("created %d, refused %d; want 10 and 90", created, len(limited))
		}
		ttl := registryTTL(t, e)
		for _, l := range limited {
			if l.Details["limit"] != "open_proposals" || l.Details["retry_after"] != models.RetrySeconds(ttl) {
				t.Fatalf("refusal details %v, want open_proposals and retry after %v", l.Details, ttl)
			}
		}
		page, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{AgentID: e.agent.ID,
			Statuses: []models.Status{models.StatusAwaitingConfirmation}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 10 {
			t.Fatalf("%d proposals await confirmation, want 10", len(page.Items))
		}
		e.confirm(page.Items[0])
		if created, _ := e.proposeMany(svcs, 20); created != 1 {
			t.Fatalf("after one decision %d more were created, want 1", created)
		}
		// Expired proposals are not open.
		e.clock.Advance(ttl)
		if created, _ := e.proposeMany(svcs, 20); created != 10 {
			t.Fatalf("after every proposal expired %d were created, want 10", created)
		}
	})
}

// registryTTL is the confirmation window of the refunds proposeMany makes.
func registryTTL(t *testing.T, e *env) time.Duration {
	t.Helper()
	p := e.propose("ord_1002", 100)
	if _, err := e.svc.Cancel(e.ctx, e.agent, p.ID); err != nil {
		t.Fatal(err)
	}
	return p.ExpiresAt.Sub(p.CreatedAt)
}

// TestProposalRateLimit: 7 proposals a minute. 50 at once (over two
// instances on PostgreSQL) create exactly 7 besides the one already made,
// whose retries cost nothing; the refusals ask for the 9 s until the next
// one is free; 8.572 s later exactly one more passes.
func TestProposalRateLimit(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		svcs := e.services(models.Limits{ProposalsPerMinute: 7})
		in := writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1003", 100), RequestKey: "refund-1003"}
		for i := range 5 {
			if _, created, err := svcs[0].Propose(e.ctx, e.agent, in); err != nil || created != (i == 0) {
				t.Fatalf("propose %d with one request key: created=%v err=%v", i, created, err)
			}
		}
		created, limited := e.proposeMany(svcs, 50)
		if created != 6 || len(limited) != 44 {
			t.Fatalf("created %d, refused %d; want 6 and 44", created, len(limited))
		}
		for _, l := range limited {
			// Every 60/7 s one more: the next at 8/7 min - 1 min = 8.571 s.
			if l.Details["limit"] != "proposals_per_minute" || l.Details["retry_after"] != 9 {
				t.Fatalf("refusal details %v, want proposals_per_minute and retry after 9", l.Details)
			}
		}
		e.clock.Advance(8571 * time.Millisecond)
		if created, _ := e.proposeMany(svcs, 5); created != 0 {
			t.Fatalf("1 ms early, %d were created", created)
		}
		e.clock.Advance(time.Millisecond)
		if created, _ := e.proposeMany(svcs, 5); created != 1 {
			t.Fatalf("%d were created when one was free", created)
		}
	})
}

// TestConcurrentWaitsLimit: an agent may hold 3 long-polls. Of 20 at once
// (over two instances on PostgreSQL) exactly 3 wait and 17 are refused at
// once; the 3 wake on the decision and give their places back.
func TestConcurrentWaitsLimit(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		svcs := e.services(models.Limits{ConcurrentWaits: 3})
		p := e.propose("ord_1001", 100)
		type result struct {
			p   *models.Proposal
			err error
		}
		results := make(chan result, 20)
		for i := range 20 {
			go func() {
				got, err := svcs[i%len(svcs)].AgentWait(e.ctx, e.agent, p, writes.MaxWait)
				results <- result{got, err}
			}()
		}
		for range 17 {
			r := <-results
			var me *models.Error
			if !asError(r.err, &me) || me.Code != models.ERateLimited {
				t.Fatalf("a long-poll returned %+v, %v before the decision; want rate_limited", r.p, r.err)
			}
			if me.Details["limit"] != "concurrent_waits" || me.Details["retry_after"] != 60 {
				t.Fatalf("refusal details %v", me.Details)
			}
		}
		select {
		case r := <-results:
			t.Fatalf("an 18th long-poll returned before the decision: %+v, %v", r.p, r.err)
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := svcs[0].Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			select {
			case r := <-results:
				if r.err != nil || r.p.Status != models.StatusConfirmed {
					t.Fatalf("a held long-poll returned %+v, %v", r.p, r.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the held long-polls did not wake")
			}
		}
		// Their places are free again: three more may wait at once. Once
		// the store holds all three, a decision wakes them (cancelling
		// instead could interrupt one still reading the proposal).
		q := e.propose("ord_1002", 100)
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for i := range 3 {
			wg.Go(func() {
				_, err := svcs[i%len(svcs)].AgentWait(e.ctx, e.agent, q, writes.MaxWait)
				errs <- err
			})
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var held int
			if err := e.store.DB().QueryRowContext(e.ctx, "SELECT COUNT(*) FROM agent_waits WHERE agent_id = $1", e.agent.ID).Scan(&held); err != nil {
				t.Fatal(err)
			}
			if held == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d long-polls held, want 3", held)
			}
		}
		if _, err := svcs[0].Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: q.ID, DigestSeen: q.ArgsDigest, EffectSeen: q.EffectDigest,
			Evidence: auth.ApprovalEvidence(e.alice, nil)}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("a long-poll after the others returned: %v", err)
			}
		}
	})
}

// TestLimitOverrides: the agent's override beats its tenant's, which beats
// the server's default; 0 means no limit; removing an override inherits
// again.
func TestLimitOverrides(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		svc := e.services(models.Limits{ProposalsPerMinute: 60, OpenProposals: 5, ConcurrentWaits: 2})[0]
		n := func(v int) *int { return &v }
		check := func(want models.Limits) {
			t.Helper()
			got, err := svc.AgentLimits(e.ctx, e.agent)
			if err != nil || got != want {
				t.Fatalf("limits = %+v, %v; want %+v", got, err, want)
			}
		}
		check(models.Limits{ProposalsPerMinute: 60, OpenProposals: 5, ConcurrentWaits: 2})
		if err := e.store.SetLimitOverride(e.ctx, e.tenant, "", models.LimitOverride{OpenProposals: n(2), ConcurrentWaits: n(0)}, start); err != nil {
			t.Fatal(err)
		}
		check(models.Limits{ProposalsPerMinute: 60, OpenProposals: 2, ConcurrentWaits: 0})
		if err := e.store.SetLimitOverride(e.ctx, e.tenant, e.agent.ID, models.LimitOverride{OpenProposals: n(1)}, start); err != nil {
			t.Fatal(err)
		}
		check(models.Limits{ProposalsPerMinute: 60, OpenProposals: 1, ConcurrentWaits: 0})
		if created, _ := e.proposeMany([]*writes.Service{svc}, 3); created != 1 {
			t.Fatalf("%d created under the agent's limit of 1", created)
		}
		if err := e.store.SetLimitOverride(e.ctx, e.tenant, e.agent.ID, models.LimitOverride{}, start); err != nil {
			t.Fatal(err)
		}
		check(models.Limits{ProposalsPerMinute: 60, OpenProposals: 2, ConcurrentWaits: 0})
		// Another tenant's override does not apply, and an agent of another
		// tenant cannot be given one through this tenant.
		other, err := e.store.CreateTenant(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.SetLimitOverride(e.ctx, other.ID, "", models.LimitOverride{OpenProposals: n(9)}, start); err != nil {
			t.Fatal(err)
		}
		check(models.Limits{ProposalsPerMinute: 60, OpenProposals: 2, ConcurrentWaits: 0})
		err = e.store.SetLimitOverride(e.ctx, other.ID, e.agent.ID, models.LimitOverride{OpenProposals: n(9)}, start)
		wantCode(t, err, models.ENotFound)
		err = e.store.SetLimitOverride(e.ctx, e.tenant, "", models.LimitOverride{OpenProposals: n(-1)}, start)
		wantCode(t, err, models.EInvalidRequest)
	})
}

// TestAgentParkCallsBackOnce: a long-poll handed out by AgentPark holds
// the agent's slot until it ends, calls back exactly once (nil when
// stopped without a change, the new revision at a change), gives the slot
// back before it calls, and is not handed out at all for a proposal that
// changed since it was loaded.
func TestAgentParkCallsBackOnce(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		svc := e.services(models.Limits{ConcurrentWaits: 1})[0]
		held := func() int {
			var n int
			if err := e.store.DB().QueryRowContext(e.ctx, "SELECT COUNT(*) FROM agent_waits WHERE agent_id = $1", e.agent.ID).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		type result struct {
			p    *models.Proposal
			err  error
			held int
		}
		park := func(p *models.Proposal) (*writes.Parked, chan result) {
			pk, q, err := svc.AgentPark(e.ctx, e.agent, p, writes.MaxWait)
			if err != nil || pk == nil || q != nil {
				t.Fatalf("AgentPark on an unchanged proposal: %v, %+v, %v", pk, q, err)
			}
			if got := held(); got != 1 {
				t.Fatalf("%d slots held while parked, want 1", got)
			}
			if _, _, err := svc.AgentPark(e.ctx, e.agent, p, writes.MaxWait); !models.IsCode(err, models.ERateLimited) {
				t.Fatalf("a second long-poll over the limit of one: %v, want rate_limited", err)
			}
			out := make(chan result, 2)
			pk.Start(e.ctx, func(p *models.Proposal, err error) { out <- result{p, err, held()} })
			return pk, out
		}
		once := func(out chan result) result {
			t.Helper()
			r := <-out
			select {
			case again := <-out:
				t.Fatalf("called back twice: %+v, then %+v", r, again)
			case <-time.After(200 * time.Millisecond):
			}
			return r
		}

		p := e.propose("ord_1001", 100)
		pk, out := park(p)
		pk.Stop()
		pk.Stop()
		if r := once(out); r.p != nil || r.err != nil || r.held != 0 {
			t.Fatalf("stopped: %+v, %v with %d slots held; want nil, nil, 0", r.p, r.err, r.held)
		}

		pk, out = park(p)
		if _, err := svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
			Evidence: auth.ApprovalEvidence(e.alice, nil)}); err != nil {
			t.Fatal(err)
		}
		r := once(out)
		if r.err != nil || r.p == nil || r.p.Status != models.StatusConfirmed || r.held != 0 {
			t.Fatalf("at the decision: %+v, %v with %d slots held", r.p, r.err, r.held)
		}
		pk.Stop() // over already: no second call
		select {
		case again := <-out:
			t.Fatalf("Stop after the end called back again: %+v", again)
		case <-time.After(200 * time.Millisecond):
		}

		// p (as loaded before the decision) changed: no long-poll.
		pk, q, err := svc.AgentPark(e.ctx, e.agent, p, writes.MaxWait)
		if err != nil || pk != nil || q == nil || q.Status != models.StatusConfirmed {
			t.Fatalf("AgentPark on a proposal that changed: %v, %+v, %v; want the new revision", pk, q, err)
		}
		if got := held(); got != 0 {
			t.Errorf("%d slots held after a long-poll that did not begin", got)
		}
	})
}
