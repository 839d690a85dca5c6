package events

import (
	"context"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// lookback is how long after an event's id was taken its transaction may
// still commit and be seen by a stream that already moved past it. Event
// ids are taken in the transaction, which commits a moment later; on
// PostgreSQL two transactions may commit in the other order than their
// ids. A stream therefore reads this far back each time and skips what it
// sent already.
const lookback = 10 * time.Second

// StreamPoll is how often a stream reads the outbox when the service has
// no change notifications (Config.Changes).
const StreamPoll = 500 * time.Millisecond

// Stream follows the events of one agent's proposals, in id order, each
// once. Event ids are ULIDs minted from the wall clock (models.NewID), so
// the stream computes id bounds from the wall clock too, not from the
// service's (possibly injected) clock.
type Stream struct {
	st      *store.Store
	changes Changes // nil: poll
	tenant  string
	agent   string
	floor   string // never read at or below this id (the resume point)
	cursor  string // the highest id sent
	sent    map[string]struct{}
	// pruned: the resume point is no longer in the outbox, which was
	// pruned past it; events after it may be missing.
	pruned bool
}

// OpenStream starts a stream of the agent's events. With lastEventID (the
// SSE Last-Event-ID of a reconnecting client) it resumes right after that
// event, from the outbox; without, it starts with the events that happen
// from now on. EInvalidRequest when lastEventID names no event of the
// agent, unless the outbox was pruned past it (then Pruned).
func (s *Service) OpenStream(ctx context.Context, agent models.Agent, lastEventID string) (*Stream, error) {
	// From now on: past the current millisecond's lowest id and past every
	// event already committed (ids of the same millisecond as the opening
	// sort above that lowest id).
	floor := store.EventIDAt(time.Now())
	latest, err := s.st.LatestAgentEventID(ctx, agent.TenantID, agent.ID)
	if err != nil {
		return nil, err
	}
	floor = max(floor, latest)
	pruned := false
	if lastEventID != "" {
		if _, err := s.st.AgentEvent(ctx, agent.TenantID, agent.ID, lastEventID); err != nil {
			if !models.IsCode(err, models.ENotFound) {
				return nil, err
			}
			if pruned, err = s.prunedPast(ctx, lastEventID); err != nil {
				return nil, err
			}
			if !pruned {
				return nil, models.Errorf(models.EInvalidRequest, "Last-Event-ID names no event of this agent")
			}
		}
		floor = lastEventID
	}
	return &Stream{st: s.st, changes: s.changes, tenant: agent.TenantID, agent: agent.ID, floor: floor, cursor: floor,
		sent: map[string]struct{}{}, pruned: pruned}, nil
}

// prunedPast reports whether id, an event id not in the outbox, may have
// been pruned from it: it is well formed and at or below the id pruning
// reached. Which events were pruned is not kept, so such an id is taken
// for one of them even when it never was an event of the agent's: the
// stream that resumes after it holds the agent's own events only.
func (s *Service) prunedPast(ctx context.Context, id string) (bool, error) {
	rest, ok := strings.CutPrefix(id, "evt_")
	if !ok {
		return false, nil
	}
	if _, err := ulid.ParseStrict(strings.ToUpper(rest)); err != nil {
		return false, nil
	}
	through, err := s.st.PrunedThrough(ctx)
	return err == nil && id <= through, err
}

// Pruned reports whether the stream resumes after an event that was pruned
// from the outbox: events that followed it may have been pruned too, and
// the client should read the state it needs (its proposals) afresh.
func (st *Stream) Pruned() bool { return st.pruned }

// Changed returns a channel that is ready when the stream may have events
// that Next has not returned: closed at the next change of one of the
// tenant's proposals (every event belongs to a proposal, and the change
// that recorded it is announced once it committed), or, without change
// notifications, after StreamPoll. Take it before calling Next, so that a
// change committing after Next's read is not missed.
func (st *Stream) Changed() <-chan struct{} {
	if st.changes == nil {
		ch := make(chan struct{})
		time.AfterFunc(StreamPoll, func() { close(ch) })
		return ch
	}
	return st.changes.WaitAny(st.tenant)
}

// Next returns the events committed since the last call that the stream
// has not returned yet, oldest first.
func (st *Stream) Next(ctx context.Context) ([]models.Event, error) {
	back := store.EventIDAt(time.Now().Add(-lookback))
	from := min(st.cursor, back)
	from = max(from, st.floor)
	var out []models.Event
	for {
		page, err := st.st.EventsAfter(ctx, st.tenant, st.agent, from, 200)
		if err != nil {
			return out, err
		}
		for _, ev := range page {
			if _, ok := st.sent[ev.ID]; ok {
				continue
			}
			st.sent[ev.ID] = struct{}{}
			st.cursor = max(st.cursor, ev.ID)
			out = append(out, ev)
		}
		if len(page) < 200 {
			break
		}
		from = page[len(page)-1].ID
	}
	for id := range st.sent {
		if id < back {
			delete(st.sent, id)
		}
	}
	return out, nil
}
