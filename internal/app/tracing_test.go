package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/tracing"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/adaptertest"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// recordingBiz is the reference business system, noting the traceparent
// of every request it accepted.
type recordingBiz struct {
	*adaptertest.Server
	mu     sync.Mutex
	parent map[string][]string // path → traceparent headers
}

func (b *recordingBiz) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.parent[r.URL.Path] = append(b.parent[r.URL.Path], r.Header.Get("traceparent"))
	b.mu.Unlock()
	b.Server.ServeHTTP(w, r)
}

func (b *recordingBiz) traceparents(prefix string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for p, v := range b.parent {
		if strings.HasPrefix(p, prefix) {
			out = append(out, v...)
		}
	}
	return out
}

// syncWriter is a buffer the server's logger may write while the test reads.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) lines() []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(w.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestTraces runs propose (continuing the agent's trace), confirm, execute
// through the HTTP adapter and a reconciliation with the SDK's in-memory
// exporter, and checks the spans, their proposal id, the traceparent the
// business system received (with the request signature still verifying:
// the reference server refuses unsigned requests) and the trace and
// request ids on the log lines.
func TestTraces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	secret := []byte("0123456789abcdef0123456789abcdef")
	biz := &recordingBiz{Server: adaptertest.New(secret), parent: map[string][]string{}}
	biz.AddResource("ord_1001", "Order …1001", 19900)
	bizSrv := httptest.NewServer(biz)
	t.Cleanup(bizSrv.Close)
	tools := filepath.Join(t.TempDir(), "tools.yaml")
	yaml := strings.Replace(string(registry.DemoYAML()), "adapter: {kind: demo_ledger}",
		"adapter: {kind: http, base_url: "+bizSrv.URL+", secret_env: BIZ_SECRET, timeout: 1s}", 1)
	if err := os.WriteFile(tools, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	logs := &syncWriter{}
	clock := models.NewFixedClock(time.Now().UTC().Truncate(time.Millisecond))
	a, err := app.Open(ctx, app.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "c.db"), ToolsFile: tools, PasswordHash: cheapPasswordHash,
		Getenv: func(k string) string {
			if k == "BIZ_SECRET" {
				return string(secret)
			}
			return ""
		},
		Clock: clock, TracerProvider: tp,
		Logger: slog.New(tracing.LogHandler(slog.NewJSONHandler(logs, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Server)
	t.Cleanup(func() { srv.Close(); a.Close() })
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tenant, _ := a.Store.TenantByName(ctx, creds.Tenant)
	alice, _, err := a.Store.UserCredentials(ctx, tenant.ID, creds.Reviewer)
	if err != nil {
		t.Fatal(err)
	}
	api := &agentClient{t: t, base: srv.URL, key: creds.AgentKey}

	// The agent proposes inside a trace of its own.
	const agentTrace, agentSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	propose := func(key string) string {
		res, b := api.do("POST", "/api/v1/proposals", `{"tool":"refund_order","request_key":"`+key+`",
			"arguments":{"order_id":"ord_1001","amount_minor":100,"currency":"CNY","reason":"damaged"}}`,
			map[string]string{"traceparent": "00-" + agentTrace + "-" + agentSpan + "-01"})
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("propose: %d %s", res.StatusCode, b)
		}
		var p struct{ ID string }
		json.Unmarshal(b, &p)
		return p.ID
	}
	confirm := func(id string) string {
		p, err := a.Protocol.Get(ctx, tenant.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		c, err := a.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: id, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(alice, nil)})
		if err != nil {
			t.Fatal(err)
		}
		return c.Token.Compact
	}
	id := propose("trace-1")
	out := api.execute(id, confirm(id))
	if out["status"] != "succeeded" {
		t.Fatalf("execute through the HTTP adapter: %v", out)
	}

	find := func(name, proposalID string) tracetest.SpanStub {
		t.Helper()
		for _, s := range spans.GetSpans() {
			if s.Name != name {
				continue
			}
			for _, kv := range s.Attributes {
				if kv.Key == writes.AttrProposalID && kv.Value.AsString() == proposalID {
					return s
				}
			}
		}
		t.Fatalf("no span %s with proposal id %s among %d spans", name, proposalID, len(spans.GetSpans()))
		return tracetest.SpanStub{}
	}
	byID := func(spanID string) tracetest.SpanStub {
		for _, s := range spans.GetSpans() {
			if s.SpanContext.SpanID().String() == spanID {
				return s
			}
		}
		return tracetest.SpanStub{}
	}

	prop := find("countersign.propose", id)
	if got := prop.SpanContext.TraceID().String(); got != agentTrace {
		t.Errorf("propose span in trace %s, want the agent's %s", got, agentTrace)
	}
	if server := byID(prop.Parent.SpanID().String()); server.Name != "HTTP POST /api/v1/proposals" || server.Parent.SpanID().String() != agentSpan {
		t.Errorf("propose span's parent is %q (parent %s), want the server span under the agent's span", server.Name, server.Parent.SpanID())
	}
	find("countersign.confirm", id)
	exec := find("countersign.execute", id)

	// The business system got the execute span's context, signed.
	tps := biz.traceparents("/execute")
	if len(tps) != 1 {
		t.Fatalf("the business system saw %d executes, want 1", len(tps))
	}
	parts := strings.Split(tps[0], "-")
	if len(parts) != 4 || parts[1] != exec.SpanContext.TraceID().String() || parts[2] != exec.SpanContext.SpanID().String() {
		t.Errorf("traceparent at the business system %q; want trace %s, parent span %s", tps[0],
			exec.SpanContext.TraceID(), exec.SpanContext.SpanID())
	}
	if vs := biz.traceparents("/validate"); len(vs) == 0 || vs[0] == "" {
		t.Errorf("validate calls carried no traceparent: %q", vs)
	}

	// The access log line of the execute request names its trace and
	// request, and the server span knows the same request id.
	var line map[string]any
	for _, l := range logs.lines() {
		if l["msg"] == "http request" && l["route"] == "/api/v1/executions" {
			line = l
		}
	}
	if line == nil {
		t.Fatal("no access log line for the execute request")
	}
	if line["trace_id"] != exec.SpanContext.TraceID().String() {
		t.Errorf("log line trace_id = %v, want %s", line["trace_id"], exec.SpanContext.TraceID())
	}
	server := byID(exec.Parent.SpanID().String())
	var rid string
	for _, kv := range server.Attributes {
		if kv.Key == "countersign.request_id" {
			rid = kv.Value.AsString()
		}
	}
	if rid == "" || line["request_id"] != rid {
		t.Errorf("log line request_id = %v, server span's = %q", line["request_id"], rid)
	}

	// An execution left uncertain is reconciled under a span of its own,
	// whose context reaches the business system's status lookup.
	id2 := propose("trace-2")
	tok := confirm(id2)
	biz.SetExecuteDelay(1500 * time.Millisecond)
	body, _ := json.Marshal(map[string]string{"proposal_id": id2, "token": tok})
	if res, b := api.do("POST", "/api/v1/executions", string(body), nil); res.StatusCode != http.StatusAccepted {
		t.Fatalf("slow execute: %d %s, want 202", res.StatusCode, b)
	}
	biz.SetExecuteDelay(0)
	clock.Advance(time.Minute)
	if _, err := a.Protocol.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	rec := find("countersign.reconcile", id2)
	found := false
	for _, tp := range biz.traceparents("/executions/") {
		found = found || strings.Contains(tp, rec.SpanContext.TraceID().String())
	}
	if !found {
		t.Errorf("the status lookup did not carry the reconcile span's trace %s", rec.SpanContext.TraceID())
	}
}
