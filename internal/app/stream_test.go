package app_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
)

// streamRead matches the statement a stream reads the outbox with
// (store.EventsAfter), on either database.
var streamRead = regexp.MustCompile(`(?is)FROM\s+["` + "`" + `]?events["` + "`" + `]?\s+WHERE.*agent_id.*\bid\s*>`)

// TestEventStreamReadsOnlyWhenSomethingChanged: an idle event stream does
// not read the outbox on a timer; it reads when one of the tenant's
// proposals changes, and the change reaches the agent promptly, also when
// another instance over the same PostgreSQL database made it.
func TestEventStreamReadsOnlyWhenSomethingChanged(t *testing.T) {
	eachDB(t, func(t *testing.T, db string) {
		e := newParkEnv(t, db, models.Limits{})
		reads := &e.streamReads
		stream, code := openStreamAt(t, e.s.base, e.key, "")
		if code != http.StatusOK {
			t.Fatalf("open: %d", code)
		}
		deadline := time.Now().Add(10 * time.Second)
		for reads.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		opened := reads.Load()
		if opened == 0 {
			t.Fatal("the stream never read the outbox (is the statement pattern stale?)")
		}
		// A poll every 500 ms would have read three or four times.
		time.Sleep(2 * time.Second)
		if idle := reads.Load() - opened; idle != 0 {
			t.Fatalf("an idle stream read the outbox %d times in 2s", idle)
		}
		p := e.propose()
		if m := next(t, stream); m.Event != "proposal.created" || !strings.Contains(m.Data, p.ID) {
			t.Fatalf("after a proposal: %+v", m)
		}
		if m := next(t, stream); m.Event != "proposal.awaiting_confirmation" {
			t.Fatalf("then %+v", m)
		}
		if strings.HasPrefix(db, "sqlite") {
			return
		}
		other := serveApp(t, db)
		confirmWith(t, other.app.Protocol, e.reviewer, p)
		for m := next(t, stream); m.Event != "proposal.confirmed"; m = next(t, stream) {
			if !strings.Contains(m.Data, p.ID) || m.Event != "proposal.decision" {
				t.Fatalf("approved on another instance: %+v", m)
			}
		}
	})
}
