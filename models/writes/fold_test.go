package writes_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
)

// The demo ledger keeps its data in countersign's database, so an execute
// makes its write in the transaction that consumes the token: these tests
// hold that the consumption, the write and its outcome stand or fall
// together.

// failAfterWrite makes the demo ledger's write and then fails as a
// database error inside the transaction would.
type failAfterWrite struct{ *demoledger.Ledger }

func (f failAfterWrite) ExecuteIn(tx *gorm.DB, req models.ExecuteRequest) (models.ExecuteResult, error) {
	if _, err := f.Ledger.ExecuteIn(tx, req); err != nil {
		return models.ExecuteResult{}, err
	}
	return models.ExecuteResult{}, fmt.Errorf("%w: the disk is full", models.ErrOutcomeUnknown)
}

// trail is what an execute leaves behind, to compare before and after.
type trail struct {
	refunded    int64
	auditHead   int64
	events      int
	proposal    models.Status
	token       models.TokenStatus
	ledgerTimes int
}

func (e *env) trail(p *models.Proposal) trail {
	e.t.Helper()
	head, err := e.store.Head(e.ctx, e.tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	evs, err := e.store.EventsAfter(e.ctx, e.tenant, e.agent.ID, "", 500)
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	tok, err := e.store.TokenByJTI(e.ctx, e.tenant, p.Token.JTI)
	if err != nil {
		e.t.Fatal(err)
	}
	n, err := e.ledger.ExecutionsFor(e.ctx, e.tenant, e.downstreamKey(p))
	if err != nil {
		e.t.Fatal(err)
	}
	return trail{refunded: e.order("ord_1001").RefundedMinor, auditHead: head.Seq, events: len(evs),
		proposal: got.Status, token: tok.Status, ledgerTimes: n}
}

// A failure inside the transaction after the business system wrote rolls
// all of it back: the write, the consumption, the execution, the events
// and the audit entries. The token stays issued, and presenting it again
// writes once.
func TestInDatabaseWriteFailureUndoesEverything(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1001", 700))
		before := e.trail(p)
		if before.token != models.TokenIssued || before.proposal != models.StatusConfirmed {
			t.Fatalf("before: %+v", before)
		}
		good := e.adapter["refund_order"]
		e.adapter["refund_order"] = failAfterWrite{e.ledger}
		e.svc = e.newService(registry.Demo())
		_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EUnavailable)
		if after := e.trail(p); after != before {
			t.Fatalf("after a failed in-database write:\n got %+v\nwant %+v", after, before)
		}

		e.adapter["refund_order"] = good
		e.svc = e.newService(registry.Demo())
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil || ex.Status != models.StatusSucceeded || ex.ReceiptJWS == "" {
			t.Fatalf("the same token again: %+v %v", ex, err)
		}
		_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EAlreadyConsumed)
		after := e.trail(p)
		if after.refunded != before.refunded+700 || after.ledgerTimes != 1 || after.token != models.TokenConsumed ||
			after.proposal != models.StatusSucceeded {
			t.Fatalf("after the retry: %+v (before %+v)", after, before)
		}
		// One consumption and one outcome in the chain, executing and
		// succeeded among the events.
		if got := after.auditHead - before.auditHead; got != 2 {
			t.Fatalf("audit entries added = %d, want 2", got)
		}
		if got := after.events - before.events; got != 2 {
			t.Fatalf("events added = %d, want 2", got)
		}
	})
}

// A write the business system refuses after it changed something (here:
// the key turns out to be recorded already, so the ledger answers from its
// record) leaves nothing of that change, while the consumption and the
// outcome commit: the ledger's savepoint inside the consuming transaction.
func TestInDatabaseRefusalLeavesNothingOfTheWrite(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1001", 500))
		before := e.order("ord_1001")
		// The business system holds an answer for this execution's key
		// (as when an earlier attempt's write arrived): the refund it
		// makes now is undone and the recorded answer stands.
		if err := e.store.Gorm().Exec(`INSERT INTO demo_ledger_executions (tenant_id, request_key, tool, status, provider_ref, result, created_at)
 VALUES (?, ?, 'refund_order', 'succeeded', 'dl_recorded', '{"recorded":true}', 0)`, e.tenant, e.downstreamKey(p)).Error; err != nil {
			t.Fatal(err)
		}
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil || ex.Status != models.StatusSucceeded || ex.ProviderRef != "dl_recorded" {
			t.Fatalf("execute: %+v %v", ex, err)
		}
		after := e.order("ord_1001")
		if after.RefundedMinor != before.RefundedMinor || after.Version != before.Version {
			t.Fatalf("order changed: %+v, was %+v", after, before)
		}
		if tr := e.trail(p); tr.token != models.TokenConsumed || tr.proposal != models.StatusSucceeded || tr.ledgerTimes != 1 {
			t.Fatalf("after: %+v", tr)
		}
	})
}

// A ledger built over another database is refused the consuming
// transaction: nothing is written in either database and the token stays
// issued.
func TestInDatabaseWriteRefusesAnotherDatabase(t *testing.T) {
	e := newEnv(t, "sqlite", nil)
	other, err := store.Open("sqlite://"+filepath.Join(t.TempDir(), "other.db"), store.Options{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	if _, err := other.Migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	p := e.confirm(e.propose("ord_1001", 300))
	before := e.trail(p)
	e.adapter["refund_order"] = demoledger.New(other)
	e.svc = e.newService(registry.Demo())
	_, err = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
	wantCode(t, err, models.EUnavailable)
	if after := e.trail(p); after != before {
		t.Fatalf("after: %+v, want %+v", after, before)
	}
	var n int64
	if err := other.Gorm().Table("demo_ledger_executions").Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("the other database's ledger recorded %d writes (%v)", n, err)
	}
}

// The checks that come before the write when the business system is
// outside the database — the proposal still confirmed, its downstream key
// unclaimed — come after it when the write joins the consuming
// transaction; failing, they roll the write back with the rest. Here the
// database is made to contradict the token behind the protocol's back (a
// proposal revoked while its token stays issued, an execution that already
// holds the key), then put right.
func TestInDatabaseWriteUndoneByTheChecksAfterIt(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		exec := func(q string, args ...any) {
			t.Helper()
			if err := e.store.Gorm().Exec(q, args...).Error; err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			name   string
			code   models.Code
			break_ func(p *models.Proposal) (undo func())
		}{
			{"proposal no longer confirmed", models.EInvalidState, func(p *models.Proposal) func() {
				exec("UPDATE proposals SET status = 'revoked' WHERE id = ?", p.ID)
				return func() { exec("UPDATE proposals SET status = 'confirmed' WHERE id = ?", p.ID) }
			}},
			{"downstream key claimed", models.EIdempotencyKeyReuse, func(p *models.Proposal) func() {
				// The other execution has a proposal and a token of its
				// own (both columns are unique).
				other := e.confirm(e.propose("ord_1002", 300))
				exec(`INSERT INTO executions (id, tenant_id, proposal_id, token_jti, request_key, operation, args_digest, status,
				  attempts, lease_until, created_at, updated_at, downstream_key)
				 VALUES ('exe_other', ?, ?, ?, 'rk_other', 'refund_order', 'sha256:other', 'succeeded', 1, 0, 0, 0, ?)`,
					e.tenant, other.ID, other.Token.JTI, e.downstreamKey(p))
				return func() { exec("DELETE FROM executions WHERE id = 'exe_other'") }
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				p := e.confirm(e.propose("ord_1001", 300))
				undo := c.break_(p)
				before := e.trail(p)
				_, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
				wantCode(t, err, c.code)
				if after := e.trail(p); after != before {
					t.Fatalf("after the refused execute:\n got %+v\nwant %+v", after, before)
				}
				undo()
				ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
				if err != nil || ex.Status != models.StatusSucceeded {
					t.Fatalf("the same token again: %+v %v", ex, err)
				}
				if after := e.trail(p); after.refunded != before.refunded+300 || after.ledgerTimes != 1 {
					t.Fatalf("after the retry: %+v (before %+v)", after, before)
				}
			})
		}
	})
}

// TestExecuteRacesRevocation: an execute and an administrator's revocation
// of its confirmation, started together, over and over: exactly one of them
// wins each time, whichever comes first. Either the write is made once and the revocation is
// refused, or the revocation stands and the execute answers ERevoked with
// nothing written. The redemption reads, checks and consumes in one
// transaction; on PostgreSQL the revocation can still commit between its
// read and the token's conditional UPDATE, which then decides. The audit
// chain stays whole, with one entry for each winner.
func TestExecuteRacesRevocation(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		head, err := e.store.Head(e.ctx, e.tenant)
		if err != nil {
			t.Fatal(err)
		}
		executed, revoked := 0, 0
		for i := range 24 {
			p := e.confirm(e.propose("ord_2001", 100))
			var (
				wg         sync.WaitGroup
				xerr, rerr error
				start      = make(chan struct{})
			)
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_, xerr = e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			}()
			go func() {
				defer wg.Done()
				<-start
				// The execute verifies the token first: the revocation
				// starts up to 2.75 ms later, so that each side wins.
				time.Sleep(time.Duration(i%12) * 250 * time.Microsecond)
				_, rerr = e.svc.Revoke(e.ctx, e.admin, p.ID)
			}()
			close(start)
			wg.Wait()
			switch {
			case xerr == nil && models.IsCode(rerr, models.EInvalidState):
				executed++
			case rerr == nil && models.IsCode(xerr, models.ERevoked):
				revoked++
			default:
				t.Fatalf("round %d: execute %v, revoke %v", i, xerr, rerr)
			}
		}
		t.Logf("%d executed, %d revoked", executed, revoked)
		if got := e.order("ord_2001").RefundedMinor; got != int64(100*executed) {
			t.Fatalf("refunded %d for %d executes", got, executed)
		}
		count := e.chainAfter(t, head)
		if count[models.AuditTokenConsumed] != executed || count[models.AuditExecutionOutcome] != executed ||
			count[models.AuditTokenRevoked] != revoked {
			t.Fatalf("audit entries %v for %d executed and %d revoked", count, executed, revoked)
		}
	})
}
