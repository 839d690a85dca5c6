package web

import (
	"fmt"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/tracing"
	"github.com/countersign/countersign/web/detach"
)

// serverSpan starts a server span for every request, continuing the
// caller's trace when it sent a traceparent, and puts it (and the request
// id) in the request's context: protocol spans become its children and every
// log line about the request carries its trace id. A nil tracer only adds
// the request id.
func serverSpan(tracer trace.Tracer) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			rid := c.Response().Header().Get(echo.HeaderXRequestID)
			ctx := tracing.WithRequestID(req.Context(), rid)
			if tracer == nil {
				c.SetRequest(req.WithContext(ctx))
				return next(c)
			}
			ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(req.Header))
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			ctx, span := tracer.Start(ctx, fmt.Sprintf("HTTP %s %s", req.Method, route),
				trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(
					attribute.String("http.request.method", req.Method),
					attribute.String("http.route", route),
					attribute.String("countersign.request_id", rid),
				))
			c.SetRequest(req.WithContext(ctx))
			err := next(c)
			end := func(status int, _ int64) {
				span.SetAttributes(attribute.Int("http.response.status_code", status))
				if status >= 500 {
					span.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", status))
				}
				span.End()
			}
			// A detached request (a parked long-poll) ends when its answer
			// is written.
			if dr := detach.FromContext(ctx); dr != nil && dr.Detached() {
				dr.OnFinish(end)
			} else {
				end(c.Response().Status, 0)
			}
			return err
		}
	}
}
