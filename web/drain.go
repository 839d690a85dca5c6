package web

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
)

// Drain lets a server stop taking new work while the work it took finishes.
// Once Start is called, every new request is answered 503 unavailable (with
// Retry-After and Connection: close) before any handler runs, so an agent
// redeeming a token during a shutdown learns that nothing happened and may
// retry, instead of seeing its connection closed. Requests already running
// are counted and finish normally. The zero value is ready to use.
type Drain struct {
	closing  atomic.Bool
	inFlight atomic.Int64
}

// Start refuses every request from now on.
func (d *Drain) Start() { d.closing.Store(true) }

// Draining reports whether Start was called.
func (d *Drain) Draining() bool { return d.closing.Load() }

// InFlight is the number of requests being served that were accepted
// before Start.
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
		defer d.inFlight.Add(-1)
		if d.closing.Load() {
			h := c.Response().Header()
			h.Set(echo.HeaderConnection, "close")
			h.Set(echo.HeaderRetryAfter, "1")
			return models.Errorf(models.EUnavailable, "the server is shutting down and did not look at this request; retry it")
		}
		return next(c)
	}
}

// drainMiddleware is d's middleware, or a pass-through without d.
func drainMiddleware(d *Drain) echo.MiddlewareFunc {
	if d == nil {
		return func(next echo.HandlerFunc) echo.HandlerFunc { return next }
	}
	return d.middleware
}
