package writes_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/demoledger"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// statementLog records the SQL of every statement a store runs while on.
type statementLog struct {
	mu   sync.Mutex
	on   bool
	sqls []string
}

func (l *statementLog) record(q string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.sqls = append(l.sqls, q)
	}
}

func (l *statementLog) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on, l.sqls = true, nil
}

func (l *statementLog) stop() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	return l.sqls
}

// countedService is a service over the env's database whose store (and the
// demo ledger's writes, which share its handle) report every statement.
func (e *env) countedService(log *statementLog) *writes.Service {
	e.t.Helper()
	st, err := store.Open(e.dbURL, store.Options{Clock: e.clock, OnStatement: log.record})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	ledger := demoledger.New(st)
	adapters := map[string]models.Adapter{}
	reg := registry.Demo()
	for _, tool := range reg.Tools() {
		adapters[tool.Name] = ledger
	}
	tokens := token.New(st, token.Config{Issuer: "countersign-test", Audience: "countersign-execute", Clock: e.clock})
	svc, err := writes.New(e.ctx, writes.Config{Store: st, Registry: reg, Tokens: tokens,
		Adapters: adapters, Clock: e.clock, PollInterval: 20 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

// The statements one execute runs, the business system's write included,
// are counted (not timed): the execute's cost is mostly per statement, so a
// change that adds statements to the hot path must show up here and be
// argued for. A transaction's BEGIN and COMMIT count as statements. Redeeming
// reads the proposal with its token and its decisions; then one
// transaction, because the demo ledger keeps its data in this database,
// consumes the token (its UPDATE), makes the write under a savepoint (the
// refund's guarded UPDATE and the key's record), then writes what follows,
// each once: the execution's INSERT, settled; the proposal's UPDATE from
// confirmed to succeeded; its two events (executing, succeeded) in one
// INSERT (which, on PostgreSQL, also announces the change to the other
// instances); the two audit entries in one statement. (31 statements with BEGIN and COMMIT
// before the execute path was folded; 19 on SQLite and 21 on PostgreSQL in
// three transactions, before the write joined the consuming transaction;
// 16 and 17 while each audit entry had its own statement, 15 and 16 while
// the execution and the proposal were written twice, as executing and then
// settled, 12 and 13 while the decisions were read apart; 11 and 12 while
// PostgreSQL announced the change in a statement after the commit.)
func TestExecuteStatementCount(t *testing.T) {
	limits := map[string]int{"sqlite": 11, "postgres": 11}
	eachDB(t, func(t *testing.T, e *env) {
		log := &statementLog{}
		svc := e.countedService(log)
		p := e.confirm(e.propose("ord_1004", 1000))
		log.start()
		ex, err := svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		sqls := log.stop()
		if err != nil || ex.Status != models.StatusSucceeded {
			t.Fatalf("execute: %+v %v", ex, err)
		}
		t.Logf("%d statements", len(sqls))
		for i, q := range sqls {
			t.Logf("%2d %s", i+1, q)
		}
		if n, limit := len(sqls), limits[e.dbKind]; n == 0 || n > limit {
			t.Errorf("one execute ran %d statements, at most %d expected", n, limit)
		}
	})
}

// The statements one create (Propose) runs, counted as for execute: the
// agent's limit overrides, the business system's validation and its
// description of the effect (one read of the order: the demo ledger
// answers both from it, models.ValidateDescribeAdapter), the proposal's
// INSERT (which also tells whether the tenant has a live mandate for the
// tool: the demo tenant has none, so the mandates are not read), its two
// events in one INSERT (announcing the change, on PostgreSQL) and its audit
// entry, in one transaction whose BEGIN and COMMIT count. (9 and 10 while
// validation and description were two reads and the mandates were read
// after every create; 7 and 8 while PostgreSQL announced the change in a
// statement of its own.)
func TestProposeStatementCount(t *testing.T) {
	limits := map[string]int{"sqlite": 7, "postgres": 7}
	eachDB(t, func(t *testing.T, e *env) {
		log := &statementLog{}
		svc := e.countedService(log)
		log.start()
		_, created, err := svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1005", 1000)})
		sqls := log.stop()
		if err != nil || !created {
			t.Fatalf("propose: %v", err)
		}
		t.Logf("%d statements", len(sqls))
		for i, q := range sqls {
			t.Logf("%2d %s", i+1, q)
		}
		if n, limit := len(sqls), limits[e.dbKind]; n == 0 || n > limit {
			t.Errorf("one create ran %d statements, at most %d expected", n, limit)
		}
	})
}

// A create reads the tenant's mandates only when its INSERT found a live
// one for its tool: then a mandate may confirm it (and does, when it
// fits); with none live for the tool — none granted, one for another tool,
// one revoked — nothing more is read and the proposal awaits a person.
func TestProposeReadsMandatesOnlyWhenOneIsLive(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		log := &statementLog{}
		svc := e.countedService(log)
		propose := func(tool string, args []byte) (*models.Proposal, bool) {
			t.Helper()
			log.start()
			p, created, err := svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: tool, Arguments: args})
			sqls := log.stop()
			if err != nil || !created {
				t.Fatalf("propose %s: %v", tool, err)
			}
			read := false
			for _, q := range sqls {
				read = read || strings.Contains(q, "SELECT mandates.*")
			}
			return p, read
		}
		email := []byte(`{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Message","send_at":null}`)
		if p, read := propose("refund_order", refundArgs("ord_1001", 500)); read || p.Status != models.StatusAwaitingConfirmation {
			t.Fatalf("without mandates: read %v, status %s", read, p.Status)
		}
		m := e.grant(lowRefunds(e, 1000, 10000, 0), e.alice)
		if p, read := propose("refund_order", refundArgs("ord_1001", 500)); !read || p.Status != models.StatusConfirmed || p.MandateID != m.ID {
			t.Fatalf("under a live mandate: read %v, status %s, mandate %q", read, p.Status, p.MandateID)
		}
		if p, read := propose("refund_order", refundArgs("ord_1001", 5000)); !read || p.Status != models.StatusAwaitingConfirmation || p.MandateNote == "" {
			t.Fatalf("over the mandate's cap: read %v, status %s, note %q", read, p.Status, p.MandateNote)
		}
		if p, read := propose("send_customer_email", email); read || p.Status != models.StatusAwaitingConfirmation {
			t.Fatalf("another tool: read %v, status %s", read, p.Status)
		}
		if _, err := e.svc.RevokeMandate(e.ctx, e.admin, m.ID); err != nil {
			t.Fatal(err)
		}
		if p, read := propose("refund_order", refundArgs("ord_1002", 500)); read || p.Status != models.StatusAwaitingConfirmation {
			t.Fatalf("after the revocation: read %v, status %s", read, p.Status)
		}
	})
}
