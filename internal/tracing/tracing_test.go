package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/countersign/countersign/internal/tracing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestOffByDefault(t *testing.T) {
	for name, getenv := range map[string]func(string) string{
		"nothing set": env(nil),
		"disabled":    env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}),
	} {
		tp, stop, err := tracing.Setup(context.Background(), tracing.Config{Getenv: getenv})
		if err != nil {
			t.Fatal(err)
		}
		if _, sdk := tp.(*sdktrace.TracerProvider); sdk {
			t.Errorf("%s: tracing is on", name)
		}
		if err := stop(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// TestExportsToTheEndpoint: with an endpoint, spans reach an OTLP/HTTP
// receiver when the provider is stopped.
func TestExportsToTheEndpoint(t *testing.T) {
	var mu sync.Mutex
	var got []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer rcv.Close()
	for name, cfg := range map[string]tracing.Config{
		"flag":        {Endpoint: rcv.URL},
		"environment": {Getenv: env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL})},
	} {
		tp, stop, err := tracing.Setup(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, span := tracing.Tracer(tp).Start(context.Background(), "countersign.test")
		span.End()
		if err := stop(context.Background()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != "POST /v1/traces application/x-protobuf" {
			t.Errorf("%s: the receiver got %q", name, got)
		}
		got = nil
		mu.Unlock()
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&buf, nil)))
	tp := sdktrace.NewTracerProvider()
	ctx, span := tracing.Tracer(tp).Start(tracing.WithRequestID(context.Background(), "req_1"), "x")
	log.InfoContext(ctx, "hello")
	log.InfoContext(ctx, "explicit", "request_id", "req_given")
	log.Info("no context")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], "trace_id="+span.SpanContext().TraceID().String()) || !strings.Contains(lines[0], "request_id=req_1") {
		t.Errorf("line with context: %s", lines[0])
	}
	if strings.Count(lines[1], "request_id=") != 1 || !strings.Contains(lines[1], "request_id=req_given") {
		t.Errorf("a request id given explicitly was duplicated or replaced: %s", lines[1])
	}
	if strings.Contains(lines[2], "trace_id") || strings.Contains(lines[2], "request_id") {
		t.Errorf("line without context: %s", lines[2])
	}
}
