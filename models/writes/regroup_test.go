package writes_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// outage is the demo ledger as a business system that can be made
// unreachable: its reads fail while down is set.
type outage struct {
	*demoledger.Ledger
	down atomic.Bool
}

var errRefused = errors.New("dial tcp 10.0.0.7:443: connection refused")

func (o *outage) Validate(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, error) {
	if o.down.Load() {
		return models.ValidateResult{}, errRefused
	}
	return o.Ledger.Validate(ctx, req)
}

func (o *outage) Describe(ctx context.Context, req models.DescribeRequest) (models.Description, error) {
	if o.down.Load() {
		return models.Description{}, errRefused
	}
	return o.Ledger.Describe(ctx, req)
}

func (o *outage) ValidateDescribe(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, *models.Description, error) {
	if o.down.Load() {
		return models.ValidateResult{}, nil, errRefused
	}
	return o.Ledger.ValidateDescribe(ctx, req)
}

// chainKinds returns the kinds of the tenant's audit entries after seq,
// in order, with the proposal each is about.
func (e *env) chainKinds(t *testing.T, after int64) []string {
	t.Helper()
	entries, err := e.store.AuditEntries(e.ctx, e.tenant, after, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		out = append(out, en.Kind+" "+en.ProposalID)
	}
	return out
}

// An approval counts toward a group's factor while the group holds its
// reviewer, and a proposal is decided by the memberships as they stand:
// adding the approver who was missing from a group confirms the waiting
// proposal at once (one token, naming every approver, that executes), and
// removing one moves its progress back. Either change wakes the proposal's
// long-polls with a new revision and a proposal.approvals_changed event.
func TestGroupChangesDecideWaitingProposals(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			e, u := groupEnv(t, kind)
			// carol counts for finance; gus is in no group yet.
			p := e.propose("ord_2001", 30000)
			for _, name := range []string{"carol", "gus"} {
				if _, err := e.stepUpConfirm(u[name], p); err != nil {
					t.Fatal(err)
				}
			}
			before, err := e.svc.Get(e.ctx, e.tenant, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if before.Status != models.StatusAwaitingConfirmation || before.Progress[1].Met() {
				t.Fatalf("before: %s %+v", before.Status, before.Progress)
			}
			head, err := e.store.Head(e.ctx, e.tenant)
			if err != nil {
				t.Fatal(err)
			}
			woke := make(chan *models.Proposal, 1)
			go func() {
				q, err := e.svc.Wait(e.ctx, e.tenant, p.ID, before.Revision, 30*time.Second)
				if err != nil {
					t.Error(err)
				}
				woke <- q
			}()
			time.Sleep(50 * time.Millisecond) // let it park
			if out, err := e.svc.SetGroupMember(e.ctx, e.admin, "security", "gus", true); err != nil || out != (writes.GroupOutcome{Moved: 1, Confirmed: 1}) {
				t.Fatalf("outcome %+v, %v", out, err)
			}
			got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != models.StatusConfirmed || got.Token == nil || !got.Progress[0].Met() || !got.Progress[1].Met() {
				t.Fatalf("after gus joined security: %s token %v progress %+v", got.Status, got.Token, got.Progress)
			}
			select {
			case q := <-woke:
				if q == nil || q.Revision <= before.Revision {
					t.Fatalf("the long-poll answered %+v", q)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the long-poll did not wake")
			}
			c, err := e.tokens.Verify(e.ctx, got.Token.Compact)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(c.Approvers) != fmt.Sprint([]string{u["carol"].ID, u["gus"].ID}) {
				t.Fatalf("token approvers %v", c.Approvers)
			}
			want := fmt.Sprint([]string{models.AuditGroupChanged + " ", models.AuditTokenIssued + " " + p.ID})
			if got := fmt.Sprint(e.chainKinds(t, head.Seq)); got != want {
				t.Fatalf("chain after the change: %s, want %s", got, want)
			}
			if ev := e.eventTypes(t, p.ID); fmt.Sprint(ev[len(ev)-2:]) != fmt.Sprint([]models.EventType{models.EventApprovalsChanged,
				models.StatusEvent(models.StatusConfirmed)}) {
				t.Fatalf("events %v", ev)
			}
			if ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, got.Token.Compact); err != nil || ex.Status != models.StatusSucceeded {
				t.Fatalf("execute: %+v %v", ex, err)
			}
			if out, err := e.svc.SetGroupMember(e.ctx, e.admin, "security", "gus", true); err != nil || out != (writes.GroupOutcome{}) {
				t.Fatalf("adding a member twice: %+v, %v", out, err)
			}

			// Leaving: dave's approval stops counting for security, and the
			// waiting proposal says so at once.
			q := e.propose("ord_2002", 30000)
			if _, err := e.stepUpConfirm(u["dave"], q); err != nil {
				t.Fatal(err)
			}
			before, _ = e.svc.Get(e.ctx, e.tenant, q.ID)
			if !before.Progress[1].Met() {
				t.Fatalf("before: %+v", before.Progress)
			}
			go func() {
				r, err := e.svc.Wait(e.ctx, e.tenant, q.ID, before.Revision, 30*time.Second)
				if err != nil {
					t.Error(err)
				}
				woke <- r
			}()
			time.Sleep(50 * time.Millisecond)
			if out, err := e.svc.SetGroupMember(e.ctx, e.admin, "security", "dave", false); err != nil || out != (writes.GroupOutcome{Moved: 1}) {
				t.Fatalf("outcome %+v, %v", out, err)
			}
			select {
			case r := <-woke:
				if r == nil || r.Revision != before.Revision+1 || r.Status != models.StatusAwaitingConfirmation || r.Progress[1].Met() {
					t.Fatalf("the long-poll answered %+v", r)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the long-poll did not wake")
			}
			if ev := e.eventTypes(t, q.ID); ev[len(ev)-1] != string(models.EventApprovalsChanged) {
				t.Fatalf("events %v", ev)
			}
			// A proposal the member did not approve, or that needs no group,
			// does not move.
			other := e.propose("ord_2003", 30000)
			plain := e.propose("ord_1001", 1000)
			if out, err := e.svc.SetGroupMember(e.ctx, e.admin, "security", "dave", true); err != nil || out != (writes.GroupOutcome{Moved: 1}) {
				t.Fatalf("outcome %+v, %v", out, err)
			}
			for _, x := range []*models.Proposal{other, plain} {
				if got, _ := e.svc.Get(e.ctx, e.tenant, x.ID); got.Revision != x.Revision {
					t.Fatalf("%s moved: revision %d → %d", x.ID, x.Revision, got.Revision)
				}
			}
			// dave is back, and his approval of q counts again; q still
			// needs finance.
			if got, _ := e.svc.Get(e.ctx, e.tenant, q.ID); got.Status != models.StatusAwaitingConfirmation || !got.Progress[1].Met() {
				t.Fatalf("q after dave rejoined: %s %+v", got.Status, got.Progress)
			}
		})
	}
}

// A change that completes a proposal is confirmed only if the business
// system still shows its target as previewed; one that cannot be asked now
// stays queued and the background pass confirms it later; a change made
// with the command line (no server in the process) is taken up by a
// server's background pass, exactly once however many servers run it.
func TestGroupChangesCheckTheTargetFirst(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			var biz *outage
			e, u := groupEnv(t, kind, func(e *env) {
				biz = &outage{Ledger: e.ledger}
				e.adapter["refund_order"] = biz
			})
			hank, ivy := e.user("hank", models.RoleReviewer), e.user("ivy", models.RoleReviewer)
			status := func(p *models.Proposal) models.Status {
				t.Helper()
				got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				return got.Status
			}
			approve := func(p *models.Proposal, names ...string) {
				t.Helper()
				for _, n := range names {
					r, ok := u[n]
					if !ok {
						r = map[string]models.User{"hank": hank, "ivy": ivy}[n]
					}
					if _, err := e.stepUpConfirm(r, p); err != nil {
						t.Fatal(err)
					}
				}
			}

			// The target changed after the approvals: not confirmed, and
			// taken off the queue.
			stale := e.propose("ord_2001", 30000)
			approve(stale, "carol", "gus")
			if err := e.ledger.BumpOrder(e.ctx, e.tenant, "ord_2001"); err != nil {
				t.Fatal(err)
			}
			if out, err := e.svc.SetGroupMember(e.ctx, e.admin, "security", "gus", true); err != nil || out != (writes.GroupOutcome{Moved: 1}) {
				t.Fatalf("outcome %+v, %v", out, err)
			}
			if st := status(stale); st != models.StatusAwaitingConfirmation {
				t.Fatalf("a stale preview was confirmed: %s", st)
			}
			if n, err := e.svc.Reconsider(e.ctx); err != nil || n != 0 {
				t.Fatalf("queue after a stale target: %d %v", n, err)
			}

			// The business system is down: queued, put off, confirmed by the
			// background pass once it answers.
			down := e.propose("ord_2002", 30000)
			approve(down, "carol", "hank")
			biz.down.Store(true)
			if out, err := e.svc.SetGroupMember(e.ctx, e.admin, "security", "hank", true); err != nil || out != (writes.GroupOutcome{Moved: 1, Pending: 1}) {
				t.Fatalf("outcome %+v, %v", out, err)
			}
			if st := status(down); st != models.StatusAwaitingConfirmation {
				t.Fatalf("confirmed without checking the target: %s", st)
			}
			if n, _ := e.svc.Reconsider(e.ctx); n != 0 {
				t.Fatalf("retried before its backoff: %d", n)
			}
			e.clock.Advance(2 * time.Second)
			if n, _ := e.svc.Reconsider(e.ctx); n != 1 {
				t.Fatalf("not retried after its backoff: %d", n)
			}
			if st := status(down); st != models.StatusAwaitingConfirmation {
				t.Fatalf("confirmed while the business system is down: %s", st)
			}
			biz.down.Store(false)
			e.clock.Advance(4 * time.Second)
			if n, err := e.svc.Reconsider(e.ctx); n != 1 || err != nil {
				t.Fatalf("reconsider: %d %v", n, err)
			}
			if st := status(down); st != models.StatusConfirmed {
				t.Fatalf("after the business system came back: %s", st)
			}

			// The command line: the store queues, and of three servers
			// taking the queue up at once exactly one confirms.
			cli := e.propose("ord_2003", 30000)
			approve(cli, "carol", "ivy")
			ch, err := e.store.SetGroupMember(e.ctx, store.GroupActor{TenantID: e.tenant}, "security", "ivy", true, e.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(ch.Changed) != 1 || len(ch.Queued) != 1 || ch.Queued[0].ProposalID != cli.ID {
				t.Fatalf("change %+v", ch)
			}
			head, _ := e.store.Head(e.ctx, e.tenant)
			svcs := []*writes.Service{e.svc, secondInstance(t, e), secondInstance(t, e)}
			var wg sync.WaitGroup
			for _, s := range svcs {
				wg.Go(func() {
					if _, err := s.Reconsider(e.ctx); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if st := status(cli); st != models.StatusConfirmed {
				t.Fatalf("after the background pass: %s", st)
			}
			if got := fmt.Sprint(e.chainKinds(t, head.Seq)); got != fmt.Sprint([]string{models.AuditTokenIssued + " " + cli.ID}) {
				t.Fatalf("chain: %s", got)
			}
		})
	}
}

// A reviewer's approval and an administrator's adding them to the group
// the approval needs, on two server instances at once: whichever goes
// first, the proposal ends confirmed, with one token.
func TestGroupChangeRacesTheApproval(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			e, u := groupEnv(t, kind)
			other := secondInstance(t, e)
			for i := range 8 {
				name := fmt.Sprintf("racer%d", i)
				r := e.user(name, models.RoleReviewer)
				p := e.propose(fmt.Sprintf("ord_20%02d", i+1), 30000)
				if _, err := e.stepUpConfirm(u["dave"], p); err != nil {
					t.Fatal(err)
				}
				head, _ := e.store.Head(e.ctx, e.tenant)
				var wg sync.WaitGroup
				wg.Go(func() {
					if _, err := e.stepUpConfirm(r, p); err != nil {
						t.Error(err)
					}
				})
				wg.Go(func() {
					if _, err := other.SetGroupMember(e.ctx, e.admin, "finance", name, true); err != nil {
						t.Error(err)
					}
				})
				wg.Wait()
				got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != models.StatusConfirmed || got.Token == nil {
					t.Fatalf("round %d: %s", i, got.Status)
				}
				tokens := 0
				for _, k := range e.chainKinds(t, head.Seq) {
					if k == models.AuditTokenIssued+" "+p.ID {
						tokens++
					}
				}
				if tokens != 1 {
					t.Fatalf("round %d: %d tokens issued", i, tokens)
				}
			}
		})
	}
}
