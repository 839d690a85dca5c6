package writes_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// TestGroupedExecutesWriteOnce: on SQLite, write transactions that queue
// behind the writer commit together (models/store/group.go). Thirty
// presentations of one token and one of each of ten other tokens, all
// queued at once behind a transaction of another process, still consume
// the replayed token once and write its email once, write every other
// email once, and leave the tenant's audit chain whole: each presentation
// keeps the guarantees of a transaction of its own.
func TestGroupedExecutesWriteOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	log := &statementLog{}
	svc := e.countedService(log)
	var confirmed []*models.Proposal
	for i := range 11 {
		p, _, err := svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "send_customer_email",
			Arguments: fmt.Appendf(nil, `{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Message %d","send_at":null}`, i)})
		if err != nil {
			t.Fatal(err)
		}
		confirmed = append(confirmed, e.confirm(p))
	}
	before, err := e.store.Head(e.ctx, e.tenant)
	if err != nil {
		t.Fatal(err)
	}

	// Another process holds SQLite's write lock, so that every execute
	// queues behind the writer.
	other, err := sql.Open("sqlite", store.SQLiteDSN(strings.TrimPrefix(e.dbURL, "sqlite://")))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	holder, err := other.Conn(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(e.ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	type result struct {
		ex  *models.Execution
		err error
	}
	replays := make([]result, 30)
	others := make([]result, 10)
	var wg sync.WaitGroup
	for i := range replays {
		wg.Go(func() {
			ex, err := svc.Execute(e.ctx, e.agent, confirmed[0].ID, confirmed[0].Token.Compact)
			replays[i] = result{ex, err}
		})
	}
	for i := range others {
		wg.Go(func() {
			p := confirmed[i+1]
			ex, err := svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
			others[i] = result{ex, err}
		})
	}
	// Time for all forty to read what they redeem and queue (the writer
	// itself waits up to its busy timeout, 5 s, for the lock).
	time.Sleep(time.Second)
	log.start()
	if _, err := holder.ExecContext(context.Background(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	begins := 0
	for _, q := range log.stop() {
		if strings.HasPrefix(q, "BEGIN") {
			begins++
		}
	}

	var execution string
	for i, r := range replays {
		switch {
		case r.err == nil:
			if execution != "" && r.ex.ID != execution {
				t.Fatalf("replay %d answered execution %s, another got %s", i, r.ex.ID, execution)
			}
			execution = r.ex.ID
		case models.ErrorCode(r.err) != models.EAlreadyConsumed:
			t.Fatalf("replay %d: %v", i, r.err)
		}
	}
	if execution == "" {
		t.Fatal("no presentation of the replayed token executed")
	}
	for i, r := range others {
		if r.err != nil || r.ex.Status != models.StatusSucceeded {
			t.Fatalf("execute %d: %+v %v", i, r.ex, r.err)
		}
	}
	var emails, executions int
	if err := e.store.DB().QueryRow("SELECT count(*) FROM demo_outbox").Scan(&emails); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DB().QueryRow("SELECT count(*) FROM executions").Scan(&executions); err != nil {
		t.Fatal(err)
	}
	if emails != 11 || executions != 11 {
		t.Fatalf("%d emails queued and %d executions recorded, want 11 of each", emails, executions)
	}
	// Grouped: far fewer transactions than the eleven that wrote.
	if begins >= 11 {
		t.Fatalf("%d transactions for 40 queued executes: they did not commit in groups", begins)
	}
	t.Logf("40 queued executes ran in %d transactions", begins)

	// An execute appends two entries (the token consumed, then the
	// outcome).
	count := e.chainAfter(t, before)
	total := 0
	for _, n := range count {
		total += n
	}
	if len(count) != 2 || count[models.AuditTokenConsumed] != 11 || total != 22 {
		t.Fatalf("audit entries for 11 executes: %v", count)
	}
}
