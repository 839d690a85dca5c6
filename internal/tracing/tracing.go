// Package tracing sets up OpenTelemetry traces for countersign: an OTLP/HTTP
// exporter when an endpoint is configured (off otherwise), W3C trace context
// propagation, and a log handler that puts the trace and request ids of a
// context on every log line.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config selects where traces go.
type Config struct {
	// Endpoint is the OTLP/HTTP collector URL, e.g.
	// "http://otel-collector:4318". Empty: the standard OpenTelemetry
	// environment decides (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT; neither set means tracing is off).
	Endpoint string
	// Getenv reads the standard variables; os.Getenv in production.
	Getenv func(string) string
	// ServiceVersion goes into the service.version resource attribute.
	ServiceVersion string
}

// Setup returns the tracer provider to use and a function that flushes and
// stops it. Tracing is off (a no-op provider) unless an endpoint is given
// or set in the environment, and OTEL_SDK_DISABLED=true turns it off.
func Setup(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	off := func(context.Context) error { return nil }
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return noop.NewTracerProvider(), off, nil
	}
	// The endpoint as the OpenTelemetry specification has it: a traces
	// URL is used as is, a base URL gets /v1/traces. Other settings
	// (OTEL_EXPORTER_OTLP_HEADERS, certificates, timeout) the exporter reads
	// from the process environment itself.
	var endpoint string
	switch {
	case cfg.Endpoint != "":
		endpoint = tracesURL(cfg.Endpoint)
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		endpoint = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		endpoint = tracesURL(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	default:
		return noop.NewTracerProvider(), off, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, fmt.Errorf("OTLP endpoint %q: give an http or https URL, e.g. http://otel-collector:4318", endpoint)
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(5*time.Second)),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", "countersign"),
			attribute.String("service.version", cfg.ServiceVersion))),
	)
	return tp, tp.Shutdown, nil
}

// tracesURL is base with the OTLP/HTTP traces path, unless it has a path.
func tracesURL(base string) string {
	u, err := url.Parse(base)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return base
	}
	u.Path = "/v1/traces"
	return u.String()
}

// Tracer is countersign's tracer from tp; a no-op tracer when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer("github.com/countersign/countersign")
}

// requestIDKey is the context key of the request id.
type requestIDKey struct{}

// WithRequestID returns ctx carrying the request id (X-Request-Id).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// LogHandler wraps h so that every record logged with a context gets
// trace_id and span_id (when a span is recording there) and request_id
// (when the context carries one and the record does not already).
func LogHandler(h slog.Handler) slog.Handler { return &logHandler{next: h} }

type logHandler struct{ next slog.Handler }

func (l *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.next.Enabled(ctx, level)
}

func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
		}
		if id := RequestID(ctx); id != "" && !hasAttr(r, "request_id") {
			r.AddAttrs(slog.String("request_id", id))
		}
	}
	return l.next.Handle(ctx, r)
}

func (l *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{next: l.next.WithAttrs(attrs)}
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{next: l.next.WithGroup(name)}
}

func hasAttr(r slog.Record, key string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == key
		return !found
	})
	return found
}
