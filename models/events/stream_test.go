package events_test

import (
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/store"
)

func TestStreamFollowsAndResumes(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{})
		before := e.propose("ord_1001", 100)
		st, err := ev.OpenStream(e.ctx, e.agent, "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Next(e.ctx)
		if err != nil || len(got) != 0 {
			t.Fatalf("a new stream replayed %d old events (%v)", len(got), err)
		}
		p := e.propose("ord_1002", 100)
		if _, err := e.svc.Cancel(e.ctx, e.agent, p.ID); err != nil {
			t.Fatal(err)
		}
		got, _ = st.Next(e.ctx)
		if len(got) != 3 || got[0].Type != models.EventCreated || got[2].Type != "proposal.cancelled" {
			t.Fatalf("stream: %+v", got)
		}
		for _, g := range got {
			if g.ProposalID != p.ID {
				t.Errorf("event of %s, want %s (%s came before the stream)", g.ProposalID, p.ID, before.ID)
			}
		}
		if again, _ := st.Next(e.ctx); len(again) != 0 {
			t.Fatalf("sent twice: %+v", again)
		}
		resumed, err := ev.OpenStream(e.ctx, e.agent, got[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		rest, _ := resumed.Next(e.ctx)
		if len(rest) != 2 || rest[0].ID != got[1].ID || rest[1].ID != got[2].ID {
			t.Fatalf("resumed: %+v", rest)
		}
		other, err := e.store.CreateAgent(e.ctx, e.tenant, "other", "", "sha256:o")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ev.OpenStream(e.ctx, other, got[0].ID); !models.IsCode(err, models.EInvalidRequest) {
			t.Errorf("another agent resumed from this agent's event: %v", err)
		}
	})
}

func TestStreamResumesAfterAPrunedEvent(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{})
		first := e.propose("ord_1001", 100)
		firstEvents := e.outbox().events
		time.Sleep(2 * time.Millisecond)
		horizon := time.Now()
		time.Sleep(2 * time.Millisecond)
		second := e.propose("ord_1002", 100)
		if _, err := e.store.PruneOutbox(e.ctx, "", horizon, 100); err != nil {
			t.Fatal(err)
		}
		gone := firstEvents[0].ID
		st, err := ev.OpenStream(e.ctx, e.agent, gone)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Pruned() {
			t.Error("a stream resuming after a pruned event does not say so")
		}
		got, err := st.Next(e.ctx)
		if err != nil || len(got) != 2 || got[0].ProposalID != second.ID {
			t.Fatalf("resumed after %s (of %s): %+v (%v)", gone, first.ID, got, err)
		}
		// After an event still there: no gap.
		st, err = ev.OpenStream(e.ctx, e.agent, got[0].ID)
		if err != nil || st.Pruned() {
			t.Fatalf("resuming after a kept event: pruned %v (%v)", st != nil && st.Pruned(), err)
		}
		// Ids pruning never reached, and what is no event id at all, name
		// no event.
		for _, id := range []string{store.EventIDAt(time.Now().Add(time.Hour)), "evt_0", "0", gone + "x", "EVT" + gone[3:]} {
			if _, err := ev.OpenStream(e.ctx, e.agent, id); !models.IsCode(err, models.EInvalidRequest) {
				t.Errorf("Last-Event-ID %q: %v, want invalid_request", id, err)
			}
		}
	})
}

// A stream told of changes is ready only when one of its tenant's
// proposals changed; without change notifications it polls.
func TestStreamChangedFollowsTheProtocol(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		st, err := e.events(events.Config{Changes: e.svc}).OpenStream(e.ctx, e.agent, "")
		if err != nil {
			t.Fatal(err)
		}
		changed := st.Changed()
		select {
		case <-changed:
			t.Fatal("ready with nothing changed")
		case <-time.After(2 * events.StreamPoll):
		}
		p := e.propose("ord_1001", 100)
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("a proposal was created and the stream was not told")
		}
		got, err := st.Next(e.ctx)
		if err != nil || len(got) != 2 || got[0].Type != models.EventCreated || got[1].ProposalID != p.ID {
			t.Fatalf("after the change: %+v (%v)", got, err)
		}

		polling, err := e.events(events.Config{}).OpenStream(e.ctx, e.agent, "")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-polling.Changed():
		case <-time.After(10 * events.StreamPoll):
			t.Fatal("a stream without change notifications never polled")
		}
	})
}
