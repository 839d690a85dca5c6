package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models/events"
)

// Event stream timing. A stream reads the outbox when one of its tenant's
// proposals changed (events.Stream.Changed), but not again sooner than
// streamGap after its last read: a tenant whose proposals change
// hundreds of times a second costs each of its streams a few reads a
// second, not one per change. After streamHeartbeat without a message a
// comment line keeps proxies from closing the stream, and the outbox is
// read then too, in case a change's announcement was lost.
const (
	streamGap       = 100 * time.Millisecond
	streamHeartbeat = 15 * time.Second
)

// The message that opens a stream resuming after an event the outbox no
// longer holds (events.Stream.Pruned).
const (
	prunedEvent = "stream.pruned"
	prunedCode  = "events_pruned"
)

// Events handles GET /api/v1/events: a text/event-stream of the agent's
// own proposals' events as they happen. Each message has the event id as
// its id, the event type as its event name and the event (as webhooks
// carry it) as its data. A client reconnecting with Last-Event-ID (header,
// or the last_event_id query parameter) resumes right after that event;
// when the outbox was pruned past it, the stream starts with a
// stream.pruned message (no id) saying that events may be missing.
func (h *Handlers) Events(c echo.Context) error {
	agent, err := agentFrom(c)
	if err != nil {
		return err
	}
	last := c.Request().Header.Get("Last-Event-ID")
	if last == "" {
		last = c.QueryParam("last_event_id")
	}
	ctx := c.Request().Context()
	stream, err := h.events.OpenStream(ctx, agent, last)
	if err != nil {
		return err
	}
	// The server's write timeout would cut a long stream; this response
	// has no deadline of its own.
	rc := http.NewResponseController(c.Response().Writer)
	_ = rc.SetWriteDeadline(time.Time{})
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/event-stream")
	w.Header().Set(echo.HeaderCacheControl, "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil {
		return nil
	}
	if stream.Pruned() {
		// No id: a client that reconnects before the next event resumes
		// from the same point, and is told again.
		data, _ := json.Marshal(map[string]string{"code": prunedCode, "last_event_id": last,
			"message": "events after this one were pruned from the outbox (older than its retention); read your proposals afresh, then follow the stream"})
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", prunedEvent, data); err != nil {
			return nil
		}
	}
	w.Flush()
	beat := time.NewTimer(streamHeartbeat)
	defer beat.Stop()
	for {
		changed := stream.Changed()
		read := time.Now()
		evs, err := stream.Next(ctx)
		if err != nil {
			return nil // the client reconnects with its Last-Event-ID
		}
		for _, ev := range evs {
			data, err := json.Marshal(events.Data(ev))
			if err != nil {
				return nil
			}
			if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, data); err != nil {
				return nil
			}
		}
		if len(evs) > 0 {
			w.Flush()
			beat.Reset(streamHeartbeat)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			if gap := streamGap - time.Since(read); gap > 0 {
				t := time.NewTimer(gap)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return nil
			}
			w.Flush()
			beat.Reset(streamHeartbeat)
		}
	}
}
