package adaptertest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models/adapters/adaptertest"
	"github.com/countersign/countersign/models/adapters/httpadapter"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func newServer(t *testing.T) (*adaptertest.Server, *httptest.Server) {
	t.Helper()
	srv := adaptertest.New(secret)
	srv.AddResource("ord_1", "Order #1", 5000)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return srv, ts
}

// call sends a request signed with secret; an empty key sends no
// Idempotency-Key header. It reports failures with t.Errorf so that it can
// run in goroutines.
func call(t *testing.T, ts *httptest.Server, method, path, key, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	now := time.Now().Unix()
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("X-Countersign-Timestamp", strconv.FormatInt(now, 10))
	req.Header.Set("X-Countersign-Signature", httpadapter.Sign(secret, now, method, req.URL.RequestURI(), key, []byte(body)))
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: read: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func execBody(order string, amount int64, version string) string {
	b, _ := json.Marshal(map[string]any{
		"tool":                   "refund",
		"tenant":                 "t1",
		"arguments":              map[string]any{"order_id": order, "amount_minor": amount},
		"expected_state_version": version,
	})
	return string(b)
}

type outcome struct {
	Status      string          `json:"status"`
	ProviderRef string          `json:"provider_ref"`
	Result      json.RawMessage `json:"result"`
}

func decode(t *testing.T, b []byte) outcome {
	t.Helper()
	var o outcome
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return o
}

func TestRejectsUnsignedRequests(t *testing.T) {
	srv, ts := newServer(t)
	resp, err := ts.Client().Post(ts.URL+"/execute", "application/json", bytes.NewReader([]byte(execBody("ord_1", 1, "1"))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.StatusCode, http.StatusUnauthorized; got != want {
		t.Errorf("HTTP %d, want %d", got, want)
	}
	if got, want := srv.TotalWrites(), 0; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
}

func TestExecuteNeedsIdempotencyKey(t *testing.T) {
	srv, ts := newServer(t)
	code, _ := call(t, ts, "POST", "/execute", "", execBody("ord_1", 100, "1"))
	if got, want := code, http.StatusBadRequest; got != want {
		t.Errorf("HTTP %d, want %d", got, want)
	}
	if got, want := srv.TotalWrites(), 0; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
	code, _ = call(t, ts, "POST", "/execute", "req_1", "not json")
	if got, want := code, http.StatusBadRequest; got != want {
		t.Errorf("malformed body: HTTP %d, want %d", got, want)
	}
}

func TestValidate(t *testing.T) {
	srv, ts := newServer(t)
	code, body := call(t, ts, "POST", "/validate", "", `{"tool":"refund","tenant":"t1","principal":"a","arguments":{"order_id":"ord_1","amount_minor":100}}`)
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, body)
	}
	var reply struct {
		OK            bool            `json:"ok"`
		StateVersion  json.RawMessage `json:"state_version"`
		ResourceLabel string          `json:"resource_label"`
		Problems      []string        `json:"problems"`
	}
	if err := json.Unmarshal(body, &reply); err != nil {
		t.Fatal(err)
	}
	if !reply.OK || reply.ResourceLabel != "Order #1" || len(reply.Problems) != 0 {
		t.Errorf("reply = %s", body)
	}
	// The version is a JSON number.
	if got, want := string(reply.StateVersion), "1"; got != want {
		t.Errorf("state_version = %s, want %s", got, want)
	}
	srv.Bump("ord_1")
	_, body = call(t, ts, "POST", "/validate", "", `{"arguments":{"order_id":"ord_1","amount_minor":100}}`)
	json.Unmarshal(body, &reply)
	if got, want := string(reply.StateVersion), "2"; got != want {
		t.Errorf("state_version after Bump = %s, want %s", got, want)
	}

	for _, args := range []string{
		`{"order_id":"ord_404","amount_minor":1}`,
		`{"order_id":"ord_1","amount_minor":5001}`,
		`{"order_id":"ord_1","amount_minor":0}`,
		`{"order_id":"ord_1","amount_minor":"10"}`,
		`{"order_id":7,"amount_minor":10}`,
		`{"order_id":"ord_1"}`,
		`"ord_1"`,
	} {
		_, body := call(t, ts, "POST", "/validate", "", `{"arguments":`+args+`}`)
		reply.OK, reply.Problems = true, nil
		if err := json.Unmarshal(body, &reply); err != nil {
			t.Fatal(err)
		}
		if reply.OK || len(reply.Problems) == 0 {
			t.Errorf("arguments %s: reply %s, want ok=false with problems", args, body)
		}
	}
	if got, want := srv.TotalWrites(), 0; got != want {
		t.Errorf("validate wrote: TotalWrites = %d", got)
	}
}

func TestExecuteIsIdempotent(t *testing.T) {
	srv, ts := newServer(t)
	code, first := call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 1500, "1"))
	if code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", code, first)
	}
	o := decode(t, first)
	if o.Status != "succeeded" || o.ProviderRef != "ref_1" {
		t.Errorf("first = %s", first)
	}
	// Even with a different body, a recorded key answers what it recorded.
	code, second := call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 1500, "2"))
	if got, want := string(second), string(first); code != http.StatusOK || got != want {
		t.Errorf("repeat = HTTP %d %s, want %s", code, got, want)
	}
	if got, want := srv.Writes("req_1"), 1; got != want {
		t.Errorf("Writes = %d, want %d", got, want)
	}
	if got, want := srv.ExecuteCalls("req_1"), 2; got != want {
		t.Errorf("ExecuteCalls = %d, want %d", got, want)
	}
	if got, want := srv.Balance("ord_1"), int64(3500); got != want {
		t.Errorf("Balance = %d, want %d", got, want)
	}
	if got, want := srv.Version("ord_1"), int64(2); got != want {
		t.Errorf("Version = %d, want %d", got, want)
	}

	// A second key is a second write with the next provider ref.
	_, body := call(t, ts, "POST", "/execute", "req_2", execBody("ord_1", 500, "2"))
	if got, want := decode(t, body).ProviderRef, "ref_2"; got != want {
		t.Errorf("second key ref = %q, want %q", got, want)
	}
	if got, want := srv.TotalWrites(), 2; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
}

func TestExecuteVersionConflictRecordsNothing(t *testing.T) {
	srv, ts := newServer(t)
	srv.Bump("ord_1")
	code, body := call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 100, "1"))
	if got, want := code, http.StatusConflict; got != want {
		t.Fatalf("HTTP %d (%s), want %d", got, body, want)
	}
	if got, want := srv.Writes("req_1"), 0; got != want {
		t.Errorf("Writes = %d, want %d", got, want)
	}
	code, _ = call(t, ts, "GET", "/executions/req_1", "", "")
	if got, want := code, http.StatusNotFound; got != want {
		t.Errorf("status after 409: HTTP %d, want %d", got, want)
	}
	// Nothing was recorded, so the key is still free.
	code, body = call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 100, "2"))
	if code != http.StatusOK || decode(t, body).Status != "succeeded" {
		t.Errorf("with the current version: HTTP %d %s", code, body)
	}
	// An empty expected version never matches.
	code, _ = call(t, ts, "POST", "/execute", "req_2", execBody("ord_1", 100, ""))
	if got, want := code, http.StatusConflict; got != want {
		t.Errorf("empty version: HTTP %d, want %d", got, want)
	}
}

func TestExecuteTerminalFailureIsRecorded(t *testing.T) {
	srv, ts := newServer(t)
	_, body := call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 9999, "1"))
	if got, want := decode(t, body).Status, "failed_terminal"; got != want {
		t.Fatalf("status = %q (%s), want %q", got, body, want)
	}
	// Even once the balance would allow it, the key keeps its outcome.
	srv.AddResource("ord_1", "Order #1", 100000)
	_, body = call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 9999, "1"))
	if got, want := decode(t, body).Status, "failed_terminal"; got != want {
		t.Errorf("repeat status = %q, want %q", got, want)
	}
	code, body := call(t, ts, "GET", "/executions/req_1", "", "")
	if code != http.StatusOK || decode(t, body).Status != "failed_terminal" {
		t.Errorf("status endpoint: HTTP %d %s", code, body)
	}
	_, body = call(t, ts, "POST", "/execute", "req_2", execBody("ord_404", 1, "1"))
	if got, want := decode(t, body).Status, "failed_terminal"; got != want {
		t.Errorf("unknown order: %q, want %q", got, want)
	}
	if got, want := srv.TotalWrites(), 0; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
}

func TestFailNextExecutes(t *testing.T) {
	srv, ts := newServer(t)
	_, body := call(t, ts, "POST", "/execute", "req_done", execBody("ord_1", 100, "1"))
	done := decode(t, body)

	srv.FailNextExecutes(2)
	// A recorded key still answers its outcome and uses up no failure.
	_, body = call(t, ts, "POST", "/execute", "req_done", execBody("ord_1", 100, "1"))
	if got, want := decode(t, body).ProviderRef, done.ProviderRef; got != want {
		t.Errorf("recorded key = %s, want its outcome", body)
	}
	for i := range 2 {
		_, body = call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 100, "2"))
		if got, want := decode(t, body).Status, "failed_retryable"; got != want {
			t.Errorf("attempt %d: %q, want %q", i, got, want)
		}
		code, _ := call(t, ts, "GET", "/executions/req_1", "", "")
		if got, want := code, http.StatusNotFound; got != want {
			t.Errorf("attempt %d: a retryable failure is not recorded: HTTP %d, want %d", i, got, want)
		}
	}
	_, body = call(t, ts, "POST", "/execute", "req_1", execBody("ord_1", 100, "2"))
	if got, want := decode(t, body).Status, "succeeded"; got != want {
		t.Errorf("third attempt: %q, want %q", got, want)
	}
	if got, want := srv.Writes("req_1"), 1; got != want {
		t.Errorf("Writes = %d, want %d", got, want)
	}
	if got, want := srv.ExecuteCalls("req_1"), 3; got != want {
		t.Errorf("ExecuteCalls = %d, want %d", got, want)
	}
}

func TestStatusEndpoint(t *testing.T) {
	_, ts := newServer(t)
	code, _ := call(t, ts, "GET", "/executions/req_never", "", "")
	if got, want := code, http.StatusNotFound; got != want {
		t.Errorf("never sent: HTTP %d, want %d", got, want)
	}
	key := "a/b;c"
	_, first := call(t, ts, "POST", "/execute", key, execBody("ord_1", 100, "1"))
	path := "/executions/" + url.PathEscape(key)
	code, body := call(t, ts, "GET", path, "", "")
	if got, want := string(body), string(first); code != http.StatusOK || got != want {
		t.Errorf("status = HTTP %d %s, want %s", code, got, want)
	}
	code, _ = call(t, ts, "GET", path+"?tenant=t1", "", "")
	if got, want := code, http.StatusOK; got != want {
		t.Errorf("own tenant: HTTP %d, want %d", got, want)
	}
	code, _ = call(t, ts, "GET", path+"?tenant=t2", "", "")
	if got, want := code, http.StatusNotFound; got != want {
		t.Errorf("other tenant: HTTP %d, want %d", got, want)
	}
}

// Optimistic concurrency: many different keys expecting the same version;
// exactly one write applies, the rest get 409 and record nothing.
func TestConcurrentKeysOneVersion(t *testing.T) {
	srv, ts := newServer(t)
	const n = 30
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = call(t, ts, "POST", "/execute", "req_"+strconv.Itoa(i), execBody("ord_1", 10, "1"))
		}()
	}
	wg.Wait()
	ok, conflict := 0, 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			conflict++
		}
	}
	if ok != 1 || conflict != n-1 {
		t.Errorf("ok=%d conflict=%d, want 1 and %d", ok, conflict, n-1)
	}
	if got, want := srv.TotalWrites(), 1; got != want {
		t.Errorf("TotalWrites = %d, want %d", got, want)
	}
	if got, want := srv.Balance("ord_1"), int64(4990); got != want {
		t.Errorf("Balance = %d, want %d", got, want)
	}
}

// The execute delay happens after the commit and holds no lock: while one
// answer is held back, the write is visible and others are served.
func TestExecuteDelayIsAfterCommitAndUnlocked(t *testing.T) {
	srv, ts := newServer(t)
	const delay = 1500 * time.Millisecond
	srv.SetExecuteDelay(delay)

	start := time.Now()
	answered := make(chan time.Duration, 1)
	go func() {
		call(t, ts, "POST", "/execute", "req_slow", execBody("ord_1", 100, "1"))
		answered <- time.Since(start)
	}()

	deadline := time.Now().Add(delay / 2)
	for srv.Writes("req_slow") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the write was not applied before the delay")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t0 := time.Now()
	if got, want := srv.Balance("ord_1"), int64(4900); got != want {
		t.Errorf("Balance during the delay = %d, want %d", got, want)
	}
	code, body := call(t, ts, "GET", "/executions/req_slow", "", "")
	if code != http.StatusOK || decode(t, body).Status != "succeeded" {
		t.Errorf("status during the delay: HTTP %d %s", code, body)
	}
	call(t, ts, "POST", "/validate", "", `{"arguments":{"order_id":"ord_1","amount_minor":1}}`)
	if elapsed := time.Since(t0); elapsed > delay/3 {
		t.Errorf("other calls took %v during the delay; the lock is held", elapsed)
	}
	select {
	case d := <-answered:
		t.Errorf("answered after %v, while other calls should still run inside the %v delay", d, delay)
	default:
		if d := <-answered; d < delay {
			t.Errorf("answered after %v, want at least %v", d, delay)
		}
	}
}

func TestBumpUnknownPanics(t *testing.T) {
	srv := adaptertest.New(secret)
	defer func() {
		if recover() == nil {
			t.Error("Bump of an unknown resource did not panic")
		}
	}()
	srv.Bump("nope")
}
