package httpadapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/adaptertest"
	"github.com/countersign/countersign/models/adapters/httpadapter"
)

// env is an adapter talking to a real reference business system over a
// real loopback HTTP server.
type env struct {
	srv *adaptertest.Server
	ts  *httptest.Server
	a   *httpadapter.Adapter
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := adaptertest.New(testSecret)
	srv.AddResource("ord_1", "Order #1 (Ada Lovelace)", 5000)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &env{srv: srv, ts: ts, a: newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret, Timeout: 5 * time.Second})}
}

func newAdapter(t *testing.T, cfg httpadapter.Config) *httpadapter.Adapter {
	t.Helper()
	a, err := httpadapter.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

// stub serves h (unsigned checks) and returns an adapter pointing at it
// that accepts unsigned answers: these tests are about how answers are
// classified; response signatures have tests of their own
// (TestAnswersMustBeSigned), and so does the same classification behind a
// signature (TestSignedAnswersAreClassifiedAlike).
func stub(t *testing.T, h http.HandlerFunc) *httpadapter.Adapter {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret, Timeout: 5 * time.Second, UnsignedResponses: true})
}

func refundArgs(order string, amount int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount})
	return b
}

func validateReq(order string, amount int64) models.ValidateRequest {
	return models.ValidateRequest{Tool: "refund", Arguments: refundArgs(order, amount), Tenant: "t1", Principal: "agent_1"}
}

func executeReq(key, order string, amount int64, version string) models.ExecuteRequest {
	return models.ExecuteRequest{Tool: "refund", Arguments: refundArgs(order, amount), Tenant: "t1", IdempotencyKey: key, ExpectedStateVersion: version}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  httpadapter.Config
	}{
		{"short secret", httpadapter.Config{BaseURL: "http://127.0.0.1:9000", Secret: []byte("short")}},
		{"no secret", httpadapter.Config{BaseURL: "http://127.0.0.1:9000"}},
		{"relative URL", httpadapter.Config{BaseURL: "/countersign", Secret: testSecret}},
		{"other scheme", httpadapter.Config{BaseURL: "ftp://example.com/x", Secret: testSecret}},
		{"query", httpadapter.Config{BaseURL: "http://127.0.0.1:9000/x?a=1", Secret: testSecret}},
		{"fragment", httpadapter.Config{BaseURL: "http://127.0.0.1:9000/x#f", Secret: testSecret}},
		{"unparsable", httpadapter.Config{BaseURL: "http://[::1", Secret: testSecret}},
		{"negative timeout", httpadapter.Config{BaseURL: "http://127.0.0.1:9000", Secret: testSecret, Timeout: -time.Second}},
	}
	for _, c := range cases {
		if _, err := httpadapter.New(c.cfg); err == nil {
			t.Errorf("%s: New succeeded, want an error", c.name)
		}
	}
}

func TestValidateOK(t *testing.T) {
	e := newEnv(t)
	got, err := e.a.Validate(context.Background(), validateReq("ord_1", 1500))
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := models.ValidateResult{OK: true, StateVersion: "1", ResourceLabel: "Order #1 (Ada Lovelace)", Problems: []string{}}
	if got.OK != want.OK || got.StateVersion != want.StateVersion || got.ResourceLabel != want.ResourceLabel || len(got.Problems) != 0 {
		t.Errorf("Validate = %+v, want %+v", got, want)
	}

	e.srv.Bump("ord_1")
	got, err = e.a.Validate(context.Background(), validateReq("ord_1", 1500))
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got, want := got.StateVersion, "2"; got != want {
		t.Errorf("state version after Bump = %q, want %q", got, want)
	}
}

func TestValidateProblems(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name    string
		req     models.ValidateRequest
		problem string
	}{
		{"unknown resource", validateReq("ord_404", 100), "unknown order"},
		{"amount above balance", validateReq("ord_1", 5001), "above the refundable balance"},
		{"not an integer", models.ValidateRequest{Tool: "refund", Arguments: json.RawMessage(`{"order_id":"ord_1","amount_minor":1.5}`)}, "integer"},
		{"arguments not an object", models.ValidateRequest{Tool: "refund", Arguments: json.RawMessage(`[1]`)}, "object"},
	}
	for _, c := range cases {
		got, err := e.a.Validate(context.Background(), c.req)
		if err != nil {
			t.Errorf("%s: Validate: %v", c.name, err)
			continue
		}
		if got.OK {
			t.Errorf("%s: OK = true, want false", c.name)
		}
		if len(got.Problems) == 0 || !strings.Contains(got.Problems[0], c.problem) {
			t.Errorf("%s: problems = %q, want one containing %q", c.name, got.Problems, c.problem)
		}
	}
}

func TestValidateStateVersionForms(t *testing.T) {
	cases := []struct {
		name, version, want string
	}{
		{"number", `7`, "7"},
		{"string", `"v7-abc"`, "v7-abc"},
		{"numeric string", `"7"`, "7"},
		{"number beyond float64 precision", `12345678901234567890123`, "12345678901234567890123"},
		{"number beyond int64", `18446744073709551617`, "18446744073709551617"},
	}
	for _, c := range cases {
		a := stub(t, func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"ok":true,"state_version":` + c.version + `,"resource_label":"Order","problems":[]}`))
		})
		got, err := a.Validate(context.Background(), validateReq("ord_1", 1))
		if err != nil {
			t.Errorf("%s: Validate: %v", c.name, err)
			continue
		}
		if got.StateVersion != c.want {
			t.Errorf("%s: StateVersion = %q, want %q", c.name, got.StateVersion, c.want)
		}
	}

	bad := []struct{ name, body string }{
		{"object version", `{"ok":true,"state_version":{"v":1}}`},
		{"bool version", `{"ok":true,"state_version":true}`},
		{"ok without version", `{"ok":true,"resource_label":"Order"}`},
		{"ok with null version", `{"ok":true,"state_version":null}`},
		{"no ok field", `{"state_version":1}`},
		{"not JSON", `<html>hello</html>`},
		{"empty", ``},
	}
	for _, c := range bad {
		a := stub(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(c.body)) })
		_, err := a.Validate(context.Background(), validateReq("ord_1", 1))
		if got, want := models.ErrorCode(err), models.EUnavailable; got != want {
			t.Errorf("%s: code = %q (%v), want %q", c.name, got, err, want)
		}
	}
}

func TestValidateUnavailable(t *testing.T) {
	for _, code := range []int{500, 502, 503, 404, 400} {
		a := stub(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
		_, err := a.Validate(context.Background(), validateReq("ord_1", 1))
		if got, want := models.ErrorCode(err), models.EUnavailable; got != want {
			t.Errorf("HTTP %d: code = %q, want %q", code, got, want)
		}
		// The safe message never carries the cause.
		if msg := models.ErrorMessage(err); strings.Contains(msg, "HTTP") {
			t.Errorf("HTTP %d: message %q leaks the cause", code, msg)
		}
	}
}

func TestExecuteSucceeded(t *testing.T) {
	e := newEnv(t)
	got, err := e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 1500, "1"))
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got, want := got.Status, models.StatusSucceeded; got != want {
		t.Errorf("Status = %q, want %q", got, want)
	}
	if got, want := got.ProviderRef, "ref_1"; got != want {
		t.Errorf("ProviderRef = %q, want %q", got, want)
	}
	var result struct {
		RefundedMinor int64 `json:"refunded_minor"`
		BalanceMinor  int64 `json:"balance_minor"`
	}
	if err := json.Unmarshal(got.Result, &result); err != nil {
		t.Fatalf("Result %s: %v", got.Result, err)
	}
	if got, want := result.BalanceMinor, int64(3500); got != want {
		t.Errorf("result balance = %d, want %d", got, want)
	}
	if got, want := e.srv.Balance("ord_1"), int64(3500); got != want {
		t.Errorf("Balance = %d, want %d", got, want)
	}
	if got, want := e.srv.Version("ord_1"), int64(2); got != want {
		t.Errorf("Version = %d, want %d", got, want)
	}
	if got, want := e.srv.Writes("req_1"), 1; got != want {
		t.Errorf("Writes = %d, want %d", got, want)
	}

	st, err := e.a.Status(context.Background(), "t1", "req_1")
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if got, want := st.ProviderRef, "ref_1"; got != want || st.Status != models.StatusSucceeded {
		t.Errorf("Status = %+v, want succeeded with %s", st, want)
	}
}

func TestExecuteSameKeyTwiceWritesOnce(t *testing.T) {
	e := newEnv(t)
	first, err := e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1"))
	if err != nil {
		t.Fatalf("first Execute: %v", err)
	}
	// The retry carries the same expected version; the resource moved on
	// because of the first write, yet the recorded outcome comes back.
	second, err := e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1"))
	if err != nil {
		t.Fatalf("second Execute: %v", err)
	}
	if got, want := second.ProviderRef, first.ProviderRef; got != want || second.Status != first.Status {
		t.Errorf("second = %+v, want the first outcome %+v", second, first)
	}
	if got, want := e.srv.Writes("req_1"), 1; got != want {
		t.Errorf("Writes = %d, want %d", got, want)
	}
	if got, want := e.srv.ExecuteCalls("req_1"), 2; got != want {
		t.Errorf("ExecuteCalls = %d, want %d", got, want)
	}
	if got, want := e.srv.Balance("ord_1"), int64(4000); got != want {
		t.Errorf("Balance = %d, want %d", got, want)
	}
}

func TestExecuteStateConflict(t *testing.T) {
	e := newEnv(t)
	e.srv.Bump("ord_1")
	_, err := e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1"))
	if !errors.Is(err, models.ErrStateConflict) {
		t.Fatalf("Execute = %v, want ErrStateConflict", err)
	}
	if errors.Is(err, models.ErrOutcomeUnknown) {
		t.Errorf("a conflict is a clear answer, not an unknown outcome: %v", err)
	}
	if got, want := e.srv.TotalWrites(), 0; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
	if _, err := e.a.Status(context.Background(), "t1", "req_1"); !errors.Is(err, models.ErrNeverArrived) {
		t.Errorf("Status after 409 = %v, want ErrNeverArrived (nothing recorded)", err)
	}
}

func TestExecuteTerminalIsRecorded(t *testing.T) {
	e := newEnv(t)
	got, err := e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 9999, "1"))
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got, want := got.Status, models.StatusFailedTerminal; got != want {
		t.Errorf("Status = %q, want %q", got, want)
	}
	st, err := e.a.Status(context.Background(), "t1", "req_1")
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if got, want := st.Status, models.StatusFailedTerminal; got != want {
		t.Errorf("Status() = %q, want %q", got, want)
	}
	if got, want := e.srv.TotalWrites(), 0; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
}

func TestExecuteRetryableThenSameKeySucceeds(t *testing.T) {
	e := newEnv(t)
	e.srv.FailNextExecutes(1)
	got, err := e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1"))
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got, want := got.Status, models.StatusFailedRetryable; got != want {
		t.Fatalf("Status = %q, want %q", got, want)
	}
	if got, want := e.srv.Writes("req_1"), 0; got != want {
		t.Errorf("Writes after retryable = %d, want %d", got, want)
	}
	got, err = e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1"))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got, want := got.Status, models.StatusSucceeded; got != want {
		t.Errorf("retry Status = %q, want %q", got, want)
	}
	if got, want := e.srv.Writes("req_1"), 1; got != want {
		t.Errorf("Writes after retry = %d, want %d", got, want)
	}
}

// The heart of it: a response lost after the commit is an unknown outcome,
// and asking by key afterwards finds the single write.
func TestExecuteTimeoutAfterCommitIsUnknown(t *testing.T) {
	e := newEnv(t)
	a := newAdapter(t, httpadapter.Config{BaseURL: e.ts.URL, Secret: testSecret, Timeout: 100 * time.Millisecond})
	e.srv.SetExecuteDelay(2 * time.Second)

	start := time.Now()
	res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1"))
	if !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Fatalf("Execute = %+v, %v; want ErrOutcomeUnknown", res, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the cause should stay visible: %v", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Execute took %v, want about the 100ms timeout", elapsed)
	}
	if res.Status != "" {
		t.Errorf("an unknown outcome must not carry a status, got %q", res.Status)
	}

	st, err := a.Status(context.Background(), "t1", "req_1")
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if got, want := st.Status, models.StatusSucceeded; got != want {
		t.Errorf("Status = %q, want %q", got, want)
	}
	if got, want := e.srv.Writes("req_1"), 1; got != want {
		t.Errorf("Writes = %d, want %d", got, want)
	}
	if got, want := e.srv.Balance("ord_1"), int64(4000); got != want {
		t.Errorf("Balance = %d, want %d", got, want)
	}
}

func TestExecuteCallerCancelledIsUnknown(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.a.Execute(ctx, executeReq("req_1", "ord_1", 1000, "1"))
	if !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Errorf("Execute = %v, want ErrOutcomeUnknown", err)
	}
}

func TestStatusNeverSent(t *testing.T) {
	e := newEnv(t)
	_, err := e.a.Status(context.Background(), "t1", "req_never")
	if !errors.Is(err, models.ErrNeverArrived) {
		t.Errorf("Status = %v, want ErrNeverArrived", err)
	}
}

func TestStatusOtherTenantIsAbsent(t *testing.T) {
	e := newEnv(t)
	if _, err := e.a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.Status(context.Background(), "t2", "req_1"); !errors.Is(err, models.ErrNeverArrived) {
		t.Errorf("Status for another tenant = %v, want ErrNeverArrived", err)
	}
}

func TestServerDown(t *testing.T) {
	ts := httptest.NewServer(adaptertest.New(testSecret))
	url := ts.URL
	ts.Close()
	a := newAdapter(t, httpadapter.Config{BaseURL: url, Secret: testSecret, Timeout: 2 * time.Second})

	_, err := a.Validate(context.Background(), validateReq("ord_1", 1))
	if got, want := models.ErrorCode(err), models.EUnavailable; got != want {
		t.Errorf("Validate code = %q (%v), want %q", got, err, want)
	}
	res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
	if !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Errorf("Execute = %+v, %v; want ErrOutcomeUnknown", res, err)
	}
	_, err = a.Status(context.Background(), "t1", "req_1")
	if err == nil || errors.Is(err, models.ErrNeverArrived) {
		t.Errorf("Status = %v, want an error that is not ErrNeverArrived", err)
	}
	if got, want := models.ErrorCode(err), models.EUnavailable; got != want {
		t.Errorf("Status code = %q, want %q", got, want)
	}
}

func TestSignatureRejectedByServer(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		cfg  httpadapter.Config
	}{
		{"wrong secret", httpadapter.Config{BaseURL: e.ts.URL, Secret: []byte("another-secret-of-32-bytes-long!")}},
		{"stale timestamp", httpadapter.Config{BaseURL: e.ts.URL, Secret: testSecret,
			Clock: func() time.Time { return time.Now().Add(-10 * time.Minute) }}},
		{"future timestamp", httpadapter.Config{BaseURL: e.ts.URL, Secret: testSecret,
			Clock: func() time.Time { return time.Now().Add(10 * time.Minute) }}},
	}
	for _, c := range cases {
		a := newAdapter(t, c.cfg)
		key := "req_" + strings.ReplaceAll(c.name, " ", "_")
		_, err := a.Validate(context.Background(), validateReq("ord_1", 1))
		if got, want := models.ErrorCode(err), models.EUnavailable; got != want {
			t.Errorf("%s: Validate code = %q (%v), want %q", c.name, got, err, want)
		}
		// On execute the server's 401 cannot be verified either (another
		// secret, or a clock outside the skew): it is no proof that nothing
		// ran, so the outcome is unknown rather than failed.
		res, err := a.Execute(context.Background(), executeReq(key, "ord_1", 1, "1"))
		if !errors.Is(err, models.ErrOutcomeUnknown) || !errors.Is(err, httpadapter.ErrResponseSignature) {
			t.Errorf("%s: Execute = %+v, %v; want ErrOutcomeUnknown for an unverifiable answer", c.name, res, err)
		}
		if got, want := e.srv.ExecuteCalls(key), 0; got != want {
			t.Errorf("%s: ExecuteCalls = %d, want %d (rejected before routing)", c.name, got, want)
		}
	}

	// A hand-made request with a bad signature, and one with none.
	for name, sig := range map[string]string{"bad signature": "v1=" + strings.Repeat("00", 32), "unsigned": ""} {
		req, _ := http.NewRequest("POST", e.ts.URL+"/validate", strings.NewReader(`{}`))
		if sig != "" {
			req.Header.Set("X-Countersign-Timestamp", strconv.FormatInt(time.Now().Unix(), 10))
			req.Header.Set("X-Countersign-Signature", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.StatusCode, http.StatusUnauthorized; got != want {
			t.Errorf("%s: HTTP %d, want %d", name, got, want)
		}
	}
	if got, want := e.srv.TotalWrites(), 0; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
}

func TestExecuteServerErrorIsUnknown(t *testing.T) {
	for _, code := range []int{500, 502, 503, 504} {
		a := stub(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			w.Write([]byte(`{"status":"failed_terminal"}`)) // a 5xx body is never believed
		})
		res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
		if !errors.Is(err, models.ErrOutcomeUnknown) {
			t.Errorf("HTTP %d: Execute = %+v, %v; want ErrOutcomeUnknown", code, res, err)
		}
	}
}

func TestExecuteAmbiguousAnswersAreUnknown(t *testing.T) {
	cases := []struct {
		name string
		h    http.HandlerFunc
	}{
		{"not JSON", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("OK")) }},
		{"empty body", func(w http.ResponseWriter, r *http.Request) {}},
		{"missing status", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"provider_ref":"x"}`)) }},
		{"unknown status", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"done"}`)) }},
		{"non-outcome status", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"unknown"}`)) }},
		{"truncated JSON", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"status":"succ`)) }},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		}},
		{"connection dropped mid-answer", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			w.Write([]byte(`{"status":`))
			panic(http.ErrAbortHandler)
		}},
		{"connection hijacked and closed", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}},
	}
	for _, c := range cases {
		a := stub(t, c.h)
		res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
		if !errors.Is(err, models.ErrOutcomeUnknown) {
			t.Errorf("%s: Execute = %+v, %v; want ErrOutcomeUnknown", c.name, res, err)
		}
	}
}

func TestExecuteClientErrorsAreExplicitRefusals(t *testing.T) {
	cases := []struct {
		code int
		body string
		want models.Status
	}{
		{400, `{"error":"invalid_request"}`, models.StatusFailedTerminal},
		{401, ``, models.StatusFailedTerminal},
		{403, `forbidden`, models.StatusFailedTerminal},
		{422, `{"error":"business_rule"}`, models.StatusFailedTerminal},
		{429, ``, models.StatusFailedRetryable},
		{408, ``, models.StatusFailedRetryable},
	}
	for _, c := range cases {
		a := stub(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.code)
			w.Write([]byte(c.body))
		})
		res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
		if err != nil {
			t.Errorf("HTTP %d: Execute: %v", c.code, err)
			continue
		}
		if got, want := res.Status, c.want; got != want {
			t.Errorf("HTTP %d: status = %q, want %q", c.code, got, want)
		}
		var result struct {
			HTTPStatus int             `json:"http_status"`
			Body       json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(res.Result, &result); err != nil {
			t.Errorf("HTTP %d: Result %s: %v", c.code, res.Result, err)
			continue
		}
		if got, want := result.HTTPStatus, c.code; got != want {
			t.Errorf("HTTP %d: result http_status = %d", c.code, got)
		}
		if c.body != "" && !strings.Contains(string(result.Body), strings.Trim(c.body, "{}")) {
			t.Errorf("HTTP %d: result body = %s, want it to carry %s", c.code, result.Body, c.body)
		}
	}
}

func TestOversizeResponses(t *testing.T) {
	huge := `{"status":"succeeded","ok":true,"state_version":1,"result":"` + strings.Repeat("x", httpadapter.MaxBodyBytes) + `"}`
	a := stub(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(huge)) })

	_, err := a.Validate(context.Background(), validateReq("ord_1", 1))
	if got, want := models.ErrorCode(err), models.EUnavailable; got != want {
		t.Errorf("Validate code = %q (%v), want %q", got, err, want)
	}
	_, err = a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
	if !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Errorf("Execute = %v, want ErrOutcomeUnknown", err)
	}
	_, err = a.Status(context.Background(), "t1", "req_1")
	if err == nil || errors.Is(err, models.ErrNeverArrived) {
		t.Errorf("Status = %v, want an error that is not ErrNeverArrived", err)
	}

	// An endless body is cut at the limit rather than read forever.
	endless := stub(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"succeeded","result":"`))
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	_, err = endless.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
	if !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Errorf("endless Execute = %v, want ErrOutcomeUnknown", err)
	}

	// A body just under the limit is fine.
	fits := `{"status":"succeeded","result":"` + strings.Repeat("x", httpadapter.MaxBodyBytes-100) + `"}`
	ok := stub(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(fits)) })
	if res, err := ok.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1")); err != nil || res.Status != models.StatusSucceeded {
		t.Errorf("Execute near the limit = %+v, %v; want succeeded", res.Status, err)
	}

	// An oversize 4xx body still yields the refusal, without the body.
	big4xx := stub(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		w.Write([]byte(huge))
	})
	res, err := big4xx.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
	if err != nil || res.Status != models.StatusFailedTerminal {
		t.Errorf("oversize 422 = %+v, %v; want failed_terminal", res.Status, err)
	}
	if got, want := string(res.Result), `{"http_status":422}`; got != want {
		t.Errorf("oversize 422 Result = %s, want %s", got, want)
	}
}

func TestExecuteConcurrentSameKey(t *testing.T) {
	e := newEnv(t)
	const n = 50
	var wg sync.WaitGroup
	results := make([]models.ExecuteResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.a.Execute(context.Background(), executeReq("req_same", "ord_1", 100, "1"))
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("goroutine %d: %v", i, errs[i])
			continue
		}
		if got, want := results[i].ProviderRef, "ref_1"; got != want || results[i].Status != models.StatusSucceeded {
			t.Errorf("goroutine %d: %+v, want succeeded %s", i, results[i], want)
		}
	}
	if got, want := e.srv.Writes("req_same"), 1; got != want {
		t.Errorf("Writes = %d, want %d", got, want)
	}
	if got, want := e.srv.TotalWrites(), 1; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
	if got, want := e.srv.ExecuteCalls("req_same"), n; got != want {
		t.Errorf("ExecuteCalls = %d, want %d", got, want)
	}
	if got, want := e.srv.Balance("ord_1"), int64(4900); got != want {
		t.Errorf("Balance = %d, want %d", got, want)
	}
}

// Keys travel as a header and as one escaped path segment, and a base URL
// with a path prefix works behind http.StripPrefix.
func TestKeysAndBasePathAreSignedAsSent(t *testing.T) {
	srv := adaptertest.New(testSecret)
	srv.AddResource("ord_1", "Order #1", 5000)
	mux := http.NewServeMux()
	mux.Handle("/countersign/", http.StripPrefix("/countersign", srv))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)

	for _, base := range []string{ts.URL + "/countersign", ts.URL + "/countersign/"} {
		a := newAdapter(t, httpadapter.Config{BaseURL: base, Secret: testSecret})
		if _, err := a.Validate(context.Background(), validateReq("ord_1", 1)); err != nil {
			t.Errorf("%s: Validate: %v", base, err)
		}
	}

	a := newAdapter(t, httpadapter.Config{BaseURL: ts.URL + "/countersign", Secret: testSecret})
	keys := []string{"exec_01jabc", "a/b", "semi;colon,comma", "per%cent", "q?x=1#frag", "dots.in.key", "ünïcode-is-refused"}
	version := int64(1)
	for _, key := range keys {
		res, err := a.Execute(context.Background(), executeReq(key, "ord_1", 1, itoa(version)))
		if key == "ünïcode-is-refused" {
			if got, want := models.ErrorCode(err), models.EInternal; got != want {
				t.Errorf("%q: code = %q (%v), want %q", key, got, err, want)
			}
			continue
		}
		if err != nil || res.Status != models.StatusSucceeded {
			t.Errorf("%q: Execute = %+v, %v", key, res, err)
			continue
		}
		version++
		st, err := a.Status(context.Background(), "t1", key)
		if err != nil {
			t.Errorf("%q: Status: %v", key, err)
			continue
		}
		if got, want := st.ProviderRef, res.ProviderRef; got != want {
			t.Errorf("%q: Status ref = %q, want %q", key, got, want)
		}
		if got, want := srv.Writes(key), 1; got != want {
			t.Errorf("%q: Writes = %d, want %d", key, got, want)
		}
	}
	for _, key := range []string{"", ".", "..", "has space", "new\nline"} {
		if _, err := a.Execute(context.Background(), executeReq(key, "ord_1", 1, "1")); models.ErrorCode(err) != models.EInternal {
			t.Errorf("Execute(%q) = %v, want EInternal", key, err)
		}
		if _, err := a.Status(context.Background(), "t1", key); models.ErrorCode(err) != models.EInternal {
			t.Errorf("Status(%q) = %v, want EInternal", key, err)
		}
	}
}

func TestCallerClientIsNotModified(t *testing.T) {
	e := newEnv(t)
	client := &http.Client{}
	a := newAdapter(t, httpadapter.Config{BaseURL: e.ts.URL, Secret: testSecret, Client: client})
	if _, err := a.Validate(context.Background(), validateReq("ord_1", 1)); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if client.CheckRedirect != nil {
		t.Errorf("the caller's client was modified")
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// A business system that takes an execute on a kept-alive connection and
// drops the connection without answering gets the execute once: the
// answer is unknown (countersign then asks the status endpoint), and the
// HTTP client does not send the write again by itself, as net/http would
// for a request carrying an Idempotency-Key.
func TestDroppedConnectionIsNotSentAgain(t *testing.T) {
	var mu sync.Mutex
	executes := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/execute") {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"ok":true,"state_version":"1","resource_label":"Order 1"}`))
			return
		}
		mu.Lock()
		executes++
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(ts.Close)
	a := newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret, Timeout: 5 * time.Second, UnsignedResponses: true})
	// A first call leaves a kept-alive connection for the execute to reuse.
	if _, err := a.Validate(context.Background(), validateReq("ord_1", 1000)); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	_, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1000, "1"))
	if !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Fatalf("Execute: %v, want ErrOutcomeUnknown", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if executes != 1 {
		t.Fatalf("the business system got the execute %d times, want once", executes)
	}
}
