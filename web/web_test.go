package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/web"
)

// fakeProtocol implements the API handlers' small interface. Get answers
// with getFn, so a test can make the domain fail in any way it likes.
type fakeProtocol struct {
	getFn func(id string) (*models.Proposal, error)
}

func (f *fakeProtocol) AuthenticateAgent(_ context.Context, key string) (models.Agent, error) {
	if key != "key-a" {
		return models.Agent{}, models.Errorf(models.EUnauthenticated, "unknown agent key")
	}
	return models.Agent{ID: "agt_a", TenantID: "t1", Name: "agent A"}, nil
}

func (f *fakeProtocol) Propose(context.Context, models.Agent, writes.ProposeInput) (*models.Proposal, bool, error) {
	return nil, false, models.Errorf(models.EUnknownTool, "no such tool")
}

func (f *fakeProtocol) AgentGet(_ context.Context, _ models.Agent, id string) (*models.Proposal, error) {
	return f.get(id)
}

func (f *fakeProtocol) get(id string) (*models.Proposal, error) {
	if f.getFn == nil {
		return nil, models.Errorf(models.ENotFound, "no such proposal")
	}
	return f.getFn(id)
}

func (f *fakeProtocol) AgentWait(_ context.Context, _ models.Agent, p *models.Proposal, _ time.Duration) (*models.Proposal, error) {
	return f.get(p.ID)
}

func (f *fakeProtocol) AgentList(context.Context, models.Agent, writes.ListQuery) (writes.Page, error) {
	return writes.Page{}, nil
}

func (f *fakeProtocol) Cancel(context.Context, models.Agent, string) (*models.Proposal, error) {
	return nil, models.Errorf(models.ENotFound, "no such proposal")
}

func (f *fakeProtocol) Execute(context.Context, models.Agent, string, string) (*models.Execution, error) {
	return nil, models.Errorf(models.EUnknownToken, "no such token")
}

func (f *fakeProtocol) JWKS(context.Context) ([]byte, error) { return []byte(`{"keys":[]}`), nil }

func (f *fakeProtocol) Ready(context.Context) error { return nil }

// syncBuffer collects log output written from server goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newServer(t *testing.T, f *fakeProtocol) (*httptest.Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	e := web.NewServer(web.Config{
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, web.Deps{Protocol: f, Clock: models.NewFixedClock(time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC))})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, logs
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func get(t *testing.T, srv *httptest.Server, method, path string, header http.Header) result {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{status: res.StatusCode, header: res.Header, body: b}
}

var authed = http.Header{"Authorization": {"Bearer key-a"}}

// errorEnvelope decodes {"error": {...}} strictly: no other top-level keys.
type errorEnvelope struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Fields  []struct {
			Pointer string `json:"pointer"`
			Message string `json:"message"`
		} `json:"fields"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

func decodeEnvelope(t *testing.T, b []byte) errorEnvelope {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e errorEnvelope
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %s is not the error envelope: %v", b, err)
	}
	return e
}

// declaredCode is one constant of models/errors.go with the status its
// comment promises.
type declaredCode struct {
	name   string
	code   models.Code
	status int
}

var statusComment = regexp.MustCompile(`^\s*(\d{3})\b`)

// declaredCodes parses models/errors.go: every constant of type Code, with
// the HTTP status named at the start of its comment. Parsing the source keeps
// this test honest when a code is added: it fails until the code is mapped.
func declaredCodes(t *testing.T) []declaredCode {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "../models/errors.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []declaredCode
	for _, decl := range file.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for i, name := range vs.Names {
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("%s: value is not a string literal", name.Name)
				}
				value, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				if vs.Comment == nil {
					t.Fatalf("%s: no comment naming its HTTP status", name.Name)
				}
				m := statusComment.FindStringSubmatch(vs.Comment.Text())
				if m == nil {
					t.Fatalf("%s: comment %q does not start with an HTTP status", name.Name, vs.Comment.Text())
				}
				status, _ := strconv.Atoi(m[1])
				out = append(out, declaredCode{name: name.Name, code: models.Code(value), status: status})
			}
		}
	}
	if len(out) < 28 {
		t.Fatalf("found only %d codes in models/errors.go; the parser missed some", len(out))
	}
	return out
}

func TestStatusOfEveryCode(t *testing.T) {
	for _, c := range declaredCodes(t) {
		if got, want := web.StatusOf(c.code), c.status; got != want {
			t.Errorf("StatusOf(%s %q) = %d, want %d as models/errors.go says", c.name, c.code, got, want)
		}
	}
	if got, want := web.StatusOf("no_such_code"), http.StatusInternalServerError; got != want {
		t.Errorf("StatusOf(unknown) = %d, want %d", got, want)
	}
}

func TestErrorHandlerEveryCode(t *testing.T) {
	f := &fakeProtocol{}
	srv, _ := newServer(t, f)
	for _, c := range declaredCodes(t) {
		t.Run(string(c.code), func(t *testing.T) {
			f.getFn = func(string) (*models.Proposal, error) {
				// Wrapped, as stores and services do: the handler must
				// find the *models.Error in the chain.
				return nil, fmtWrap(&models.Error{Code: c.code, Message: "the message for " + string(c.code),
					Err: errors.New("secret cause")})
			}
			r := get(t, srv, "GET", "/api/v1/proposals/prop_1", authed)
			if got, want := r.status, c.status; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := r.header.Get("Content-Type"), "application/json"; got != want {
				t.Errorf("Content-Type = %q, want %q", got, want)
			}
			e := decodeEnvelope(t, r.body)
			wantCode, wantMessage := string(c.code), "the message for "+string(c.code)
			if c.code == models.EInternal {
				wantMessage = "internal error"
			}
			if got := e.Error.Code; got != wantCode {
				t.Errorf("code = %q, want %q", got, wantCode)
			}
			if got := e.Error.Message; got != wantMessage {
				t.Errorf("message = %q, want %q", got, wantMessage)
			}
			if e.Error.Fields != nil || e.Error.Details != nil {
				t.Errorf("fields/details present though empty: %s", r.body)
			}
			if strings.Contains(string(r.body), "secret cause") {
				t.Errorf("cause leaked: %s", r.body)
			}
		})
	}
}

func fmtWrap(err error) error { return errors.Join(errors.New("service: get"), err) }

func TestErrorHandlerFieldsAndDetails(t *testing.T) {
	f := &fakeProtocol{getFn: func(string) (*models.Proposal, error) {
		return nil, &models.Error{
			Code:    models.ESchemaViolation,
			Message: "arguments break the schema",
			Fields: []models.FieldProblem{
				{Pointer: "/amount_minor", Message: "must be at least 1"},
				{Pointer: "/items/0/sku", Message: "is required"},
			},
			Details: map[string]any{"tool": "refund_order"},
		}
	}}
	srv, _ := newServer(t, f)
	r := get(t, srv, "GET", "/api/v1/proposals/prop_1", authed)
	if got, want := r.status, http.StatusUnprocessableEntity; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	want := `{"error":{"code":"schema_violation","message":"arguments break the schema","fields":[{"pointer":"/amount_minor","message":"must be at least 1"},{"pointer":"/items/0/sku","message":"is required"}],"details":{"tool":"refund_order"}}}` + "\n"
	if got := string(r.body); got != want {
		t.Errorf("body =\n%s\nwant\n%s", got, want)
	}
}

// TestRateLimitedSaysWhenToRetry: a rate_limited error is 429 with a
// Retry-After header of the seconds its details name.
func TestRateLimitedSaysWhenToRetry(t *testing.T) {
	f := &fakeProtocol{getFn: func(string) (*models.Proposal, error) {
		return nil, models.RateLimited("open_proposals", 41500*time.Millisecond, "too many open proposals")
	}}
	srv, _ := newServer(t, f)
	r := get(t, srv, "GET", "/api/v1/proposals/prop_1", authed)
	if got, want := r.status, http.StatusTooManyRequests; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	if got, want := r.header.Get("Retry-After"), "42"; got != want {
		t.Errorf("Retry-After = %q, want %q", got, want)
	}
	want := `{"error":{"code":"rate_limited","message":"too many open proposals","details":{"limit":"open_proposals","retry_after":42}}}` + "\n"
	if got := string(r.body); got != want {
		t.Errorf("body =\n%s\nwant\n%s", got, want)
	}
}

func TestInternalErrorsDoNotLeak(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        func() (*models.Proposal, error)
		wantStatus int
		wantCode   models.Code
		wantMsg    string
	}{
		{"plain error", func() (*models.Proposal, error) {
			return nil, errors.New("sql: dsn postgres://admin:hunter2@db/countersign")
		}, 500, models.EInternal, "internal error"},
		{"internal code with a careless message", func() (*models.Proposal, error) {
			return nil, models.Errorf(models.EInternal, "hunter2 in the message")
		}, 500, models.EInternal, "internal error"},
		{"unavailable with a cause", func() (*models.Proposal, error) {
			return nil, models.Wrap(models.EUnavailable, errors.New("dial tcp db:5432 hunter2"), "database unavailable")
		}, 503, models.EUnavailable, "database unavailable"},
		{"panic", func() (*models.Proposal, error) {
			panic("hunter2 exploded")
		}, 500, models.EInternal, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, logs := newServer(t, &fakeProtocol{getFn: func(string) (*models.Proposal, error) { return tc.err() }})
			r := get(t, srv, "GET", "/api/v1/proposals/prop_1", authed)
			if got, want := r.status, tc.wantStatus; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			e := decodeEnvelope(t, r.body)
			if got, want := e.Error.Code, string(tc.wantCode); got != want {
				t.Errorf("code = %q, want %q", got, want)
			}
			if got, want := e.Error.Message, tc.wantMsg; got != want {
				t.Errorf("message = %q, want %q", got, want)
			}
			if strings.Contains(string(r.body), "hunter2") {
				t.Errorf("internal text leaked to the client: %s", r.body)
			}
			// The cause is logged, with the request id, for the operator.
			rid := r.header.Get("X-Request-Id")
			if rid == "" {
				t.Fatal("no X-Request-Id")
			}
			if out := logs.String(); !strings.Contains(out, "hunter2") || !strings.Contains(out, rid) {
				t.Errorf("log lacks the cause or the request id %s:\n%s", rid, out)
			}
		})
	}
}

func TestClientErrorsAreNotLoggedAsFailures(t *testing.T) {
	srv, logs := newServer(t, &fakeProtocol{})
	get(t, srv, "GET", "/api/v1/proposals/prop_1", authed) // 404 not_found
	if strings.Contains(logs.String(), `"msg":"request failed"`) {
		t.Errorf("a 404 was logged as a failure:\n%s", logs)
	}
}

func TestEchoErrorsUseTheEnvelope(t *testing.T) {
	srv, _ := newServer(t, &fakeProtocol{})
	for _, tc := range []struct {
		method, path string
		header       http.Header
		status       int
		code         models.Code
	}{
		{"GET", "/no/such/route", nil, http.StatusNotFound, models.ENotFound},
		{"GET", "/api/v1/no-such-route", authed, http.StatusNotFound, models.ENotFound},
		{"DELETE", "/healthz", nil, http.StatusMethodNotAllowed, models.EMethodNotAllowed},
		{"PUT", "/api/v1/proposals/prop_1", authed, http.StatusMethodNotAllowed, models.EMethodNotAllowed},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := get(t, srv, tc.method, tc.path, tc.header)
			if got, want := r.status, tc.status; got != want {
				t.Errorf("status = %d, want %d (%s)", got, want, r.body)
			}
			if got, want := decodeEnvelope(t, r.body).Error.Code, string(tc.code); got != want {
				t.Errorf("code = %q, want %q", got, want)
			}
			if tc.status == http.StatusMethodNotAllowed && r.header.Get("Allow") == "" {
				t.Errorf("405 without an Allow header")
			}
		})
	}
}

func TestCommonHeaders(t *testing.T) {
	srv, logs := newServer(t, &fakeProtocol{})
	for _, path := range []string{"/healthz", "/.well-known/jwks.json", "/api/v1/proposals", "/nope"} {
		r := get(t, srv, "GET", path, nil)
		if got, want := r.header.Get("X-Content-Type-Options"), "nosniff"; got != want {
			t.Errorf("%s: X-Content-Type-Options = %q, want %q", path, got, want)
		}
		if got := r.header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
			t.Errorf("%s: X-Request-Id = %q, want a generated id", path, got)
		}
	}

	r := get(t, srv, "GET", "/healthz", http.Header{"X-Request-Id": {"proxy-1234.abc"}})
	if got, want := r.header.Get("X-Request-Id"), "proxy-1234.abc"; got != want {
		t.Errorf("a well-formed incoming request id: X-Request-Id = %q, want %q", got, want)
	}
	r = get(t, srv, "GET", "/healthz", http.Header{"X-Request-Id": {`bad id "quoted"`}})
	if got := r.header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
		t.Errorf("a malformed incoming request id was kept: %q", got)
	}

	// One access-log line per request, with the status actually sent.
	var line map[string]any
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, `"path":"/nope"`) && strings.Contains(l, `"msg":"http request"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil {
		t.Fatalf("no access-log line for /nope:\n%s", logs)
	}
	if got, want := line["status"], 404.0; got != want {
		t.Errorf("access log status = %v, want %v", got, want)
	}
	if got, _ := line["request_id"].(string); !strings.HasPrefix(got, "req_") {
		t.Errorf("access log request_id = %q", got)
	}
}
