package writes_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// chainAfter checks the tenant's audit entries after the head before: one
// chain, no fork, no gap, every hash right. It returns how many entries of
// each kind there are.
func (e *env) chainAfter(t *testing.T, before store.AuditHead) map[string]int {
	t.Helper()
	entries, err := e.store.AuditEntries(e.ctx, e.tenant, before.Seq, 1000)
	if err != nil {
		t.Fatal(err)
	}
	prev, count := before.Hash, map[string]int{}
	for i, en := range entries {
		b, err := en.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if en.Seq != before.Seq+int64(i)+1 || b.Prev != prev || models.AuditHash([]byte(en.Body)) != en.Hash {
			t.Fatalf("entry %d breaks the chain (seq %d, prev %s, want %s)", i, en.Seq, b.Prev, prev)
		}
		prev = en.Hash
		count[en.Kind]++
	}
	return count
}

// TestAuditChainUnderConcurrentProtocol: 100 goroutines propose, cancel and
// confirm through 3 service instances (each with its own store and
// connection pool, as 3 servers would be) over one database. Every state
// change appears exactly once in the tenant's chain, with no fork and no
// gap.
func TestAuditChainUnderConcurrentProtocol(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		services := []*writes.Service{e.svc}
		for i := 0; i < 2; i++ {
			st, err := store.Open(e.dbURL, store.Options{Clock: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			tokens := token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
			adapters := map[string]models.Adapter{}
			for name := range e.adapter {
				adapters[name] = demoledger.New(st)
			}
			svc, err := writes.New(e.ctx, writes.Config{Store: st, Registry: registry.Demo(), Tokens: tokens,
				Adapters: adapters, Clock: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			services = append(services, svc)
		}
		before, err := e.store.Head(e.ctx, e.tenant)
		if err != nil {
			t.Fatal(err)
		}
		const workers = 100
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for i := 0; i < workers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				svc := services[i%len(services)]
				p, _, err := svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
					Arguments: refundArgs(fmt.Sprintf("ord_10%02d", 1+i%20), 1), RequestKey: fmt.Sprintf("conc-%d", i)})
				if err != nil {
					errs <- err
					return
				}
				if i%2 == 0 {
					_, err = svc.Cancel(e.ctx, e.agent, p.ID)
				} else {
					_, err = svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
				}
				errs <- err
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		count := e.chainAfter(t, before)
		// created + cancelled for half, created + approved + token.issued
		// for the other half.
		total := 0
		for _, n := range count {
			total += n
		}
		if want := workers/2*2 + workers/2*3; total != want {
			t.Fatalf("%d entries, want %d", total, want)
		}
		for kind, want := range map[string]int{models.AuditProposalCreated: 100, models.AuditProposalCancelled: 50,
			models.AuditDecisionApproved: 50, models.AuditTokenIssued: 50} {
			if count[kind] != want {
				t.Errorf("%d %s entries, want %d", count[kind], kind, want)
			}
		}
	})
}
