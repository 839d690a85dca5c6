package web

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/web/detach"
)

// Drain lets a server stop taking new work while the work it took finishes.
// Once Start is called, every new request is answered 503 unavailable (with
// Retry-After and Connection: close) before any handler runs, so an agent
// redeeming a token during a shutdown learns that nothing happened and may
// retry, instead of seeing its connection closed. Requests already running
// are counted and finish normally. Detached requests (parked long-polls,
// whose connections net/http no longer tracks) count until their answer is
// written; End makes them answer at once. The zero value is ready to use.
type Drain struct {
	closing  atomic.Bool
	inFlight atomic.Int64

	mu       sync.Mutex
	ended    bool
	detached map[*detach.Request]struct{}
}

// Start refuses every request from now on.
func (d *Drain) Start() { d.closing.Store(true) }

// Draining reports whether Start was called.
func (d *Drain) Draining() bool { return d.closing.Load() }

// End asks every detached request, and any detached from now on, to be
// answered at once with what it has (a parked long-poll answers with the
// proposal's current state), as requests in flight are when their contexts
// end.
func (d *Drain) End() {
	d.mu.Lock()
	d.ended = true
	held := make([]*detach.Request, 0, len(d.detached))
	for r := range d.detached {
		held = append(held, r)
	}
	d.mu.Unlock()
	for _, r := range held {
		r.Stop()
	}
}

// InFlight is the number of requests being served that were accepted
// before Start, detached ones included.
func (d *Drain) InFlight() int64 { return d.inFlight.Load() }

// Wait returns once no accepted request is in flight, or when ctx ends.
func (d *Drain) Wait(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for d.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// middleware counts accepted requests and refuses new ones while draining.
func (d *Drain) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		// Count first, then look: a request that saw "not closing" is
		// already counted when Start returns, so Wait cannot miss it.
		d.inFlight.Add(1)
		if d.closing.Load() {
			defer d.inFlight.Add(-1)
			h := c.Response().Header()
			h.Set(echo.HeaderConnection, "close")
			h.Set(echo.HeaderRetryAfter, "1")
			return models.Errorf(models.EUnavailable, "the server is shutting down and did not look at this request; retry it")
		}
		detached := false
		defer func() {
			if !detached {
				d.inFlight.Add(-1)
			}
		}()
		err := next(c)
		if dr := detach.FromContext(c.Request().Context()); dr != nil && dr.Detached() {
			detached = true
			d.hold(dr)
		}
		return err
	}
}

// hold counts the detached request r until it is answered, and answers it
// at once when End was called.
func (d *Drain) hold(r *detach.Request) {
	d.mu.Lock()
	if d.detached == nil {
		d.detached = map[*detach.Request]struct{}{}
	}
	d.detached[r] = struct{}{}
	ended := d.ended
	d.mu.Unlock()
	r.OnFinish(func(int, int64) {
		d.mu.Lock()
		delete(d.detached, r)
		d.mu.Unlock()
		d.inFlight.Add(-1)
	})
	if ended {
		r.Stop()
	}
}

// drainMiddleware is d's middleware, or a pass-through without d.
func drainMiddleware(d *Drain) echo.MiddlewareFunc {
	if d == nil {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return d.middleware
}
