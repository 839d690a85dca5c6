package events_test

import (
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
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
