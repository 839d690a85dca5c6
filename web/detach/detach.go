// Package detach lets a handler take its connection over and answer it
// after the handler returned (a parked long-poll), and lets the middleware
// around that handler finish such a request only when its answer is
// written: the access log line with the status that was sent, the trace
// span, the count of requests in flight.
//
// The server puts a Request in every request's context; a handler that
// detaches calls Detach before it returns and Finish once it wrote its
// answer (or gave the connection up). Middleware that acts when a request
// is over checks Detached on its way out and, when it is, registers that
// work with OnFinish instead of doing it then. Neither may hold on to the
// echo.Context of the request: it is reused as soon as the handler returns.
package detach

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/tracing"
)

// Request is what the middleware and the handler of one request share
// about its detaching. Its methods are safe for concurrent use.
type Request struct {
	// ErrorResponse renders err as the server's error handler answers it
	// (the status, the body, Content-Type and Retry-After set on h) and
	// logs what that handler logs, for a handler that meets an error after
	// it detached and so cannot return it.
	ErrorResponse func(ctx context.Context, err error, h http.Header) (status int, body []byte)

	mu       sync.Mutex
	detached bool
	ctx      context.Context
	stop     func()
	finished bool
	status   int
	size     int64
	after    []func(status int, size int64)
}

type key struct{}

// NewContext returns ctx carrying r.
func NewContext(ctx context.Context, r *Request) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// FromContext returns the Request of ctx, or nil.
func FromContext(ctx context.Context) *Request {
	r, _ := ctx.Value(key{}).(*Request)
	return r
}

// Detach marks the request as answered after its handler returns. ctx is
// the context for what is done about the request from then on (see
// Values); stop, which must not block, makes the handler answer at once
// with what it has (a shutdown calls it through Stop).
func (r *Request) Detach(ctx context.Context, stop func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.detached, r.ctx, r.stop = true, ctx, stop
}

// Context is the context given to Detach, for log lines and spans about
// the request once it is detached; nil before.
func (r *Request) Context() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx
}

// Values returns a context that carries of ctx, a request's context, only
// what work about the request after its handler returned needs: the request
// id and the trace span. Holding on to the request's own context would keep
// the request's whole chain of contexts alive while it is detached, and end
// with the handler.
func Values(ctx context.Context) context.Context {
	out := tracing.WithRequestID(context.Background(), tracing.RequestID(ctx))
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() {
		out = trace.ContextWithSpan(out, span)
	}
	return out
}

// Detached reports whether the handler detached the request.
func (r *Request) Detached() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.detached
}

// Stop asks a detached request to be answered now; it does nothing for a
// request that is not detached or already finished.
func (r *Request) Stop() {
	r.mu.Lock()
	stop := r.stop
	if r.finished {
		stop = nil
	}
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// OnFinish has fn called once the detached request's answer is written,
// with its status and body size (status 0 when nothing could be sent), or
// at once when it was already. Middleware registers on its way out, so the
// innermost is called first, as when a handler returns.
func (r *Request) OnFinish(fn func(status int, size int64)) {
	r.mu.Lock()
	if !r.finished {
		r.after = append(r.after, fn)
		r.mu.Unlock()
		return
	}
	status, size := r.status, r.size
	r.mu.Unlock()
	fn(status, size)
}

// Finish records that the detached request's answer was written (status 0:
// the connection failed before a status was sent) and calls the functions
// registered with OnFinish. Only the first call counts.
func (r *Request) Finish(status int, size int64) {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	r.finished, r.status, r.size = true, status, size
	after := r.after
	r.after, r.stop = nil, nil
	r.mu.Unlock()
	for _, fn := range after {
		fn(status, size)
	}
}
