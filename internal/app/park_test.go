package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/tracing"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// parkEnv is one served application with the demo seeded, for long-polls
// sent over raw TCP connections: a parked long-poll is answered on the
// connection the server took over, and the client side holds no goroutine
// while it waits.
type parkEnv struct {
	t          *testing.T
	db         string
	s          *served
	agent      models.Agent
	key        string
	reviewer   models.User
	logs       *syncWriter
	statements atomic.Int64
	// streamReads counts the event streams' outbox reads (streamRead).
	streamReads atomic.Int64
}

func newParkEnv(t *testing.T, db string, limits models.Limits) *parkEnv {
	t.Helper()
	e := &parkEnv{t: t, db: db, logs: &syncWriter{}}
	e.s = serveApp(t, db, func(c *app.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
		c.Limits = limits
		c.OnStatement = func(q string) {
			e.statements.Add(1)
			if streamRead.MatchString(q) {
				e.streamReads.Add(1)
			}
		}
	})
	ctx := context.Background()
	creds, err := e.s.app.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.key = creds.AgentKey
	if e.agent, err = e.s.app.Protocol.AuthenticateAgent(ctx, creds.AgentKey); err != nil {
		t.Fatal(err)
	}
	tenant, err := e.s.app.Store.TenantByName(ctx, creds.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	if e.reviewer, _, err = e.s.app.Store.UserCredentials(ctx, tenant.ID, creds.Reviewer); err != nil {
		t.Fatal(err)
	}
	return e
}

var orders atomic.Int64

func (e *parkEnv) propose() *models.Proposal {
	e.t.Helper()
	args, _ := json.Marshal(map[string]any{"order_id": fmt.Sprintf("ord_%d", 1001+orders.Add(1)%8),
		"amount_minor": 100, "currency": "CNY", "reason": "damaged"})
	p, _, err := e.s.app.Protocol.Propose(context.Background(), e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func confirmWith(t *testing.T, svc *writes.Service, reviewer models.User, p *models.Proposal) {
	t.Helper()
	if _, err := svc.Confirm(context.Background(), writes.ConfirmInput{Reviewer: reviewer, ProposalID: p.ID,
		DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(reviewer, nil)}); err != nil {
		t.Fatal(err)
	}
}

func (e *parkEnv) confirm(p *models.Proposal) {
	e.t.Helper()
	confirmWith(e.t, e.s.app.Protocol, e.reviewer, p)
}

// pollPath is the long-poll of p's current revision for wait seconds.
func pollPath(p *models.Proposal, wait int) string {
	return fmt.Sprintf("/api/v1/proposals/%s?wait=%d", p.ID, wait)
}

// etagOf is p's ETag as the API sends it.
func etagOf(p *models.Proposal) string { return fmt.Sprintf(`W/"%s-%d"`, p.ID, p.Revision) }

// rawPoll is a request sent on a connection of its own, its answer not
// yet read.
type rawPoll struct {
	t    *testing.T
	conn net.Conn
	req  *http.Request
}

// send sends GET path with the agent's key and If-None-Match etag on a new
// connection to base.
func sendPoll(t *testing.T, base, key, path, etag string) *rawPoll {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	return &rawPoll{t: t, conn: conn, req: req}
}

func (e *parkEnv) send(path, etag string) *rawPoll {
	e.t.Helper()
	return sendPoll(e.t, e.s.base, e.key, path, etag)
}

// answer reads the answer, its body in full.
func (r *rawPoll) answer() (*http.Response, []byte) {
	r.t.Helper()
	_ = r.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(r.conn), r.req)
	if err != nil {
		r.t.Fatalf("reading the answer: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		r.t.Fatalf("reading the answer's body: %v", err)
	}
	return res, body
}

// closed reports whether the server closed the connection after the
// answer: the next read sees the end of the stream.
func (r *rawPoll) closed() bool {
	_ = r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := r.conn.Read(make([]byte, 1))
	return n == 0 && err == io.EOF
}

// recorded runs GET path against the server with a ResponseWriter that
// cannot be taken over: the long-poll holds its goroutine.
func (e *parkEnv) recorded(path, etag string) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("If-None-Match", etag)
	go func() {
		rec := httptest.NewRecorder()
		e.s.app.Server.ServeHTTP(rec, req)
		out <- rec
	}()
	return out
}

func (e *parkEnv) waiting(n int) {
	e.t.Helper()
	waitUntil(e.t, fmt.Sprintf("%d long-polls to wait", n), func() bool { return e.s.app.Protocol.Waiting() == n })
}

// accessLines are the access-log lines about path.
func (e *parkEnv) accessLines(path string) []map[string]any {
	var out []map[string]any
	for _, m := range e.logs.lines() {
		if m["msg"] == "http request" && m["path"] == path {
			out = append(out, m)
		}
	}
	return out
}

// sameHeaders compares a parked answer's headers with the blocking one's:
// equal but for the request id's value, the date and the framing, which
// net/http adds on the wire (the recorder sees neither) and a parked answer
// writes itself (http.ReadResponse turns Connection: close into
// Response.Close).
func sameHeaders(t *testing.T, parked, blocking http.Header) {
	t.Helper()
	skip := map[string]bool{"Date": true, "Content-Length": true, "Connection": true, "X-Request-Id": true}
	for k, v := range blocking {
		if !skip[k] && !slicesEqual(parked.Values(k), v) {
			t.Errorf("header %s: parked %q, blocking %q", k, parked.Values(k), v)
		}
	}
	for k, v := range parked {
		if _, ok := blocking[k]; !ok && !skip[k] {
			t.Errorf("header %s: parked %q, blocking has none", k, v)
		}
	}
	for _, k := range []string{"X-Request-Id", "Date"} {
		if parked.Get(k) == "" {
			t.Errorf("parked answer without %s", k)
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestParkedLongPollAnswers: a long-poll parked on a taken-over connection
// gets 200 with the new revision at the approval and 304 at its deadline,
// with the headers, status and body the blocking long-poll gets (which
// answers where the connection cannot be taken over), Connection: close and
// the connection closed after it, and one access-log line each, with the
// status sent.
func TestParkedLongPollAnswers(t *testing.T) {
	eachDB(t, func(t *testing.T, db string) {
		e := newParkEnv(t, db, models.Limits{})

		p := e.propose()
		path := pollPath(p, 10)
		parked := e.send(path, etagOf(p))
		blocking := e.recorded(path, etagOf(p))
		e.waiting(2)
		e.confirm(p)
		now, err := e.s.app.Protocol.Get(context.Background(), p.TenantID, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		res, body := parked.answer()
		rec := <-blocking
		if res.StatusCode != http.StatusOK || rec.Code != http.StatusOK {
			t.Fatalf("after the approval: parked %d %s, blocking %d %s", res.StatusCode, body, rec.Code, rec.Body)
		}
		var got struct {
			Status   string `json:"status"`
			Revision int64  `json:"revision"`
		}
		if err := json.Unmarshal(body, &got); err != nil || got.Status != string(models.StatusConfirmed) || got.Revision != now.Revision {
			t.Errorf("parked answer %.200s…, want the confirmed revision %d", body, now.Revision)
		}
		if !bytes.Equal(body, rec.Body.Bytes()) {
			t.Errorf("parked body\n%s\nblocking body\n%s", body, rec.Body)
		}
		sameHeaders(t, res.Header, rec.Header())
		if got, want := res.Header.Get("ETag"), etagOf(now); got != want {
			t.Errorf("ETag = %q, want %q", got, want)
		}
		if !res.Close || !parked.closed() {
			t.Error("the parked answer left the connection open")
		}

		q := e.propose()
		path = pollPath(q, 1)
		parked = e.send(path, etagOf(q))
		blocking = e.recorded(path, etagOf(q))
		e.waiting(2)
		res, body = parked.answer()
		rec = <-blocking
		if res.StatusCode != http.StatusNotModified || rec.Code != http.StatusNotModified || len(body) != 0 {
			t.Fatalf("at the deadline: parked %d %q, blocking %d", res.StatusCode, body, rec.Code)
		}
		sameHeaders(t, res.Header, rec.Header())
		if got, want := res.Header.Get("ETag"), etagOf(q); got != want {
			t.Errorf("ETag = %q, want %q", got, want)
		}
		if !res.Close || !parked.closed() {
			t.Error("the parked 304 left the connection open")
		}

		// One access-log line per request, the parked and the blocking
		// alike, with the status sent.
		for _, c := range []struct {
			p      *models.Proposal
			status float64
		}{{p, 200}, {q, 304}} {
			// The parked one's line follows its answer.
			var lines []map[string]any
			waitUntil(t, "two access-log lines (parked, blocking) for "+c.p.ID, func() bool {
				lines = e.accessLines("/api/v1/proposals/" + c.p.ID)
				return len(lines) >= 2
			})
			if len(lines) != 2 {
				t.Fatalf("%d access-log lines for %s, want 2 (parked, blocking): %v", len(lines), c.p.ID, lines)
			}
			for _, l := range lines {
				if l["status"] != c.status || l["route"] != "/api/v1/proposals/:id" || l["request_id"] == "" {
					t.Errorf("access-log line %v, want status %v", l, c.status)
				}
			}
		}
	})
}

// TestParkedLongPollsHoldNoGoroutineAndShareOneLoad: many long-polls parked
// on one proposal hold no goroutine of the server's, and the approval
// answers all of them with about the statements it costs to answer one.
func TestParkedLongPollsHoldNoGoroutineAndShareOneLoad(t *testing.T) {
	eachDB(t, func(t *testing.T, db string) {
		e := newParkEnv(t, db, models.Limits{})
		// dump holds the goroutines of the moment they were counted, when
		// there were too many, to tell which they were.
		var dump strings.Builder
		wake := func(n int) (statements int64, goroutines int) {
			p := e.propose()
			runtime.GC()
			before := runtime.NumGoroutine()
			polls := make([]*rawPoll, n)
			for i := range polls {
				polls[i] = e.send(pollPath(p, 30), etagOf(p))
			}
			e.waiting(n)
			// Let the handlers' goroutines end.
			waitUntil(t, "the server's goroutines to settle", func() bool {
				g := runtime.NumGoroutine()
				time.Sleep(50 * time.Millisecond)
				return runtime.NumGoroutine() == g
			})
			goroutines = runtime.NumGoroutine() - before
			if goroutines > 10 {
				_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
			}
			base := e.statements.Load()
			e.confirm(p)
			for i, r := range polls {
				res, body := r.answer()
				if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"confirmed"`) {
					t.Fatalf("waiter %d: %d %s", i, res.StatusCode, body)
				}
			}
			return e.statements.Load() - base, goroutines
		}
		one, _ := wake(1)
		many, goroutines := wake(50)
		if one == 0 {
			t.Fatal("an approval and one answer ran no statement")
		}
		// A change may reach the waiters in two notifications (its own
		// and the listener's), so allow a second load.
		if many > 2*one {
			t.Errorf("answering 50 parked long-polls of one proposal ran %d statements, one alone %d: each loads it", many, one)
		}
		// Blocking, each would hold two (its handler and net/http's
		// background read).
		if goroutines > 10 {
			t.Errorf("50 parked long-polls added %d goroutines; the process's goroutines when they were counted:\n%s", goroutines, dump.String())
		}
	})
}

// TestParkedLongPollGivesItsSlotBack: with a limit of one long-poll, the
// agent's slot is held while a long-poll is parked (a second is refused)
// and given back however the long-poll ends: answered at a change, at the
// deadline, after the client went away, and at shutdown.
func TestParkedLongPollGivesItsSlotBack(t *testing.T) {
	eachDB(t, func(t *testing.T, db string) {
		e := newParkEnv(t, db, models.Limits{ConcurrentWaits: 1})
		// held parks a long-poll on a new proposal and checks that the
		// slot is taken: a second long-poll is refused.
		held := func(wait int) (*models.Proposal, *rawPoll) {
			t.Helper()
			p := e.propose()
			r := e.send(pollPath(p, wait), etagOf(p))
			e.waiting(1)
			other := e.propose()
			res, body := e.send(pollPath(other, 30), etagOf(other)).answer()
			if res.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("a second long-poll while one is parked: %d %s, want 429", res.StatusCode, body)
			}
			return p, r
		}
		free := func(after string) {
			t.Helper()
			p := e.propose()
			r := e.send(pollPath(p, 30), etagOf(p))
			waitUntil(t, "a long-poll to be accepted "+after, func() bool { return e.s.app.Protocol.Waiting() == 1 })
			e.confirm(p)
			if res, body := r.answer(); res.StatusCode != http.StatusOK {
				t.Fatalf("long-poll %s: %d %s", after, res.StatusCode, body)
			}
		}

		p, r := held(30)
		e.confirm(p)
		if res, _ := r.answer(); res.StatusCode != http.StatusOK {
			t.Fatalf("answered at the change: %d", res.StatusCode)
		}
		free("after an answer at a change")

		_, r = held(1)
		if res, _ := r.answer(); res.StatusCode != http.StatusNotModified {
			t.Fatalf("answered at the deadline: %d", res.StatusCode)
		}
		free("after an answer at the deadline")

		// The client goes away: the server sees it leave, long before the
		// deadline, ends the long-poll and gives the slot back.
		// (Where connections are not watched, at the deadline.)
		deadline := 60
		if runtime.GOOS != "linux" {
			deadline = 1
		}
		gone, r := held(deadline)
		r.conn.Close()
		waitUntil(t, "the abandoned long-poll to end", func() bool { return e.s.app.Protocol.Waiting() == 0 })
		if runtime.GOOS == "linux" {
			// Nothing was answered: the access log says so (status 0).
			var lines []map[string]any
			waitUntil(t, "the abandoned long-poll's access-log line", func() bool {
				lines = e.accessLines("/api/v1/proposals/" + gone.ID)
				return len(lines) == 1
			})
			if lines[0]["status"] != float64(0) {
				t.Errorf("the abandoned long-poll was logged as %v", lines[0])
			}
		}
		free("after the client went away")

		// Shutdown answers the parked long-poll with the state it has and
		// gives the slot back.
		_, r = held(30)
		stopped := make(chan error, 1)
		go func() { stopped <- e.s.stop() }()
		res, _ := r.answer()
		if res.StatusCode != http.StatusNotModified || !res.Close {
			t.Errorf("a parked long-poll at shutdown: %d (Connection: close %v), want 304 and close", res.StatusCode, res.Close)
		}
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(e.db, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		slot, err := st.AcquireWait(context.Background(), e.agent.ID, 1, time.Now(), time.Minute)
		if err != nil {
			t.Fatalf("after shutdown the agent's long-poll slot is still held: %v", err)
		}
		if err := st.ReleaseWait(context.Background(), slot); err != nil {
			t.Fatal(err)
		}
	})
}

// TestParkedLongPollWakesAcrossInstances: a long-poll parked on one
// instance is answered when another instance over the same PostgreSQL
// database approves the proposal.
func TestParkedLongPollWakesAcrossInstances(t *testing.T) {
	eachDB(t, func(t *testing.T, db string) {
		if strings.HasPrefix(db, "sqlite") {
			t.Skip("instances share a database on PostgreSQL")
		}
		e := newParkEnv(t, db, models.Limits{})
		other := serveApp(t, db)
		p := e.propose()
		r := e.send(pollPath(p, 30), etagOf(p))
		e.waiting(1)
		confirmWith(t, other.app.Protocol, e.reviewer, p)
		// At the deadline it would be 304.
		res, body := r.answer()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"confirmed"`) {
			t.Fatalf("parked on one instance, approved on the other: %d %s", res.StatusCode, body)
		}
	})
}

// TestParkedLongPollSpanEndsWithItsAnswer: the server span of a parked
// long-poll ends when its answer is written, with the status sent, and its
// access-log line carries the span's trace.
func TestParkedLongPollSpanEndsWithItsAnswer(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := &parkEnv{t: t, logs: &syncWriter{}}
	e.s = serveApp(t, "sqlite://"+filepath.Join(t.TempDir(), "c.db"), func(c *app.Config) {
		c.Logger = slog.New(tracing.LogHandler(slog.NewJSONHandler(e.logs, nil)))
		c.TracerProvider = tp
	})
	creds, err := e.s.app.SeedDemo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.key = creds.AgentKey
	if e.agent, err = e.s.app.Protocol.AuthenticateAgent(context.Background(), creds.AgentKey); err != nil {
		t.Fatal(err)
	}

	p := e.propose()
	r := e.send(pollPath(p, 1), etagOf(p))
	e.waiting(1)
	serverSpans := func() []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range spans.GetSpans() {
			if s.Name == "HTTP GET /api/v1/proposals/:id" {
				out = append(out, s)
			}
		}
		return out
	}
	if got := serverSpans(); len(got) != 0 {
		t.Fatalf("the server span of a parked long-poll ended before its answer: %v", got)
	}
	if res, _ := r.answer(); res.StatusCode != http.StatusNotModified {
		t.Fatalf("status %d, want 304", res.StatusCode)
	}
	waitUntil(t, "the server span to end", func() bool { return len(serverSpans()) == 1 })
	span := serverSpans()[0]
	status := -1
	for _, a := range span.Attributes {
		if a.Key == "http.response.status_code" {
			status = int(a.Value.AsInt64())
		}
	}
	if status != http.StatusNotModified {
		t.Errorf("span's status code %d, want 304", status)
	}
	var lines []map[string]any
	waitUntil(t, "the access-log line", func() bool {
		lines = e.accessLines("/api/v1/proposals/" + p.ID)
		return len(lines) == 1
	})
	if got, want := lines[0]["trace_id"], span.SpanContext.TraceID().String(); got != want {
		t.Errorf("access-log line's trace_id = %v, want the server span's %s (%v)", got, want, lines[0])
	}
}

// TestLongPollWithABodyIsNotParked: a long-poll whose request has a body
// is held the blocking way (closing a connection with its body unread
// could reset it and lose the answer) and keeps its connection.
func TestLongPollWithABodyIsNotParked(t *testing.T) {
	e := newParkEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "c.db"), models.Limits{})
	p := e.propose()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, _ := http.NewRequest("GET", e.s.base+pollPath(p, 1), strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+e.key)
	req.Header.Set("If-None-Match", etagOf(p))
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	r := &rawPoll{t: t, conn: conn, req: req}
	res, _ := r.answer()
	if res.StatusCode != http.StatusNotModified || res.Close {
		t.Errorf("a long-poll with a body: %d, Connection: close %v; want 304 on a kept connection", res.StatusCode, res.Close)
	}
}
