package httpadapter_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/countersign/countersign/models/adapters/httpadapter"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// The vectors were computed with openssl, independently of this package:
//
//	printf '1700000000\nPOST\n/countersign/execute\nreq_01\n{"tool":"refund"}' |
//	  openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
func TestSignKnownVectors(t *testing.T) {
	cases := []struct {
		method, path, key, body, want string
	}{
		{"POST", "/countersign/execute", "req_01", `{"tool":"refund"}`,
			"v1=db7a2eed19265d3fd01c349d23255cbc8f9fc546805cb2894fe2945d7df2309c"},
		{"GET", "/executions/a%2Fb?tenant=t1", "", "",
			"v1=df38b0e23c9ddc92c59c7919c8d98cf605cd9cea1952e79fa5754616639fac52"},
	}
	for _, c := range cases {
		got := httpadapter.Sign(testSecret, 1700000000, c.method, c.path, c.key, []byte(c.body))
		if got != c.want {
			t.Errorf("Sign(%s %s) = %s, want %s", c.method, c.path, got, c.want)
		}
	}
}

// signedRequest builds a server-side request as net/http would hand it to a
// handler, signed at ts.
func signedRequest(method, target, key, body string, ts int64) *http.Request {
	r := httptest.NewRequest(method, target, bytes.NewReader([]byte(body)))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	r.Header.Set("X-Countersign-Timestamp", strconv.FormatInt(ts, 10))
	r.Header.Set("X-Countersign-Signature", httpadapter.Sign(testSecret, ts, method, target, key, []byte(body)))
	return r
}

func TestVerifyRequestRoundTrip(t *testing.T) {
	now := time.Unix(1700000000, 0)
	body := `{"tool":"refund","arguments":{"order_id":"ord_1"}}`
	r := signedRequest("POST", "/countersign/execute", "req_01", body, now.Unix())

	got, err := httpadapter.VerifyRequest(testSecret, r, now, time.Minute)
	if err != nil {
		t.Fatalf("VerifyRequest: %v", err)
	}
	if got, want := string(got), body; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}
	// The body stays readable for the handler that follows.
	again, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(again), body; got != want {
		t.Errorf("re-read body = %q, want %q", got, want)
	}

	// A GET with a query and an escaped segment.
	r = signedRequest("GET", "/executions/a%2Fb?tenant=t1", "", "", now.Unix())
	if _, err := httpadapter.VerifyRequest(testSecret, r, now, time.Minute); err != nil {
		t.Errorf("GET: VerifyRequest: %v", err)
	}

	// Behind http.StripPrefix the original request line is what counts.
	r = signedRequest("POST", "/countersign/validate", "", `{}`, now.Unix())
	var verr error
	http.StripPrefix("/countersign", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, verr = httpadapter.VerifyRequest(testSecret, r, now, time.Minute)
	})).ServeHTTP(httptest.NewRecorder(), r)
	if verr != nil {
		t.Errorf("behind StripPrefix: %v", verr)
	}

	// Rotation: a list of signatures passes when one of them matches.
	r = signedRequest("POST", "/validate", "", `{}`, now.Unix())
	r.Header.Set("X-Countersign-Signature", "v1=00ff, "+r.Header.Get("X-Countersign-Signature"))
	if _, err := httpadapter.VerifyRequest(testSecret, r, now, time.Minute); err != nil {
		t.Errorf("signature list: %v", err)
	}
}

func TestVerifyRequestRejectsTampering(t *testing.T) {
	now := time.Unix(1700000000, 0)
	const body = `{"tool":"refund","arguments":{"order_id":"ord_1","amount_minor":100}}`
	fresh := func() *http.Request { return signedRequest("POST", "/execute", "req_01", body, now.Unix()) }

	cases := []struct {
		name   string
		mutate func(r *http.Request) *http.Request
		want   error
	}{
		{"body changed", func(r *http.Request) *http.Request {
			r.Body = io.NopCloser(bytes.NewReader([]byte(`{"tool":"refund","arguments":{"order_id":"ord_1","amount_minor":900}}`)))
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"body emptied", func(r *http.Request) *http.Request {
			r.Body = http.NoBody
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"path changed", func(r *http.Request) *http.Request {
			r2 := httptest.NewRequest("POST", "/validate", bytes.NewReader([]byte(body)))
			r2.Header = r.Header
			return r2
		}, httpadapter.ErrSignatureInvalid},
		{"query added", func(r *http.Request) *http.Request {
			r2 := httptest.NewRequest("POST", "/execute?tenant=other", bytes.NewReader([]byte(body)))
			r2.Header = r.Header
			return r2
		}, httpadapter.ErrSignatureInvalid},
		{"method changed", func(r *http.Request) *http.Request {
			r.Method = "PUT"
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"idempotency key changed", func(r *http.Request) *http.Request {
			r.Header.Set("Idempotency-Key", "req_02")
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"idempotency key removed", func(r *http.Request) *http.Request {
			r.Header.Del("Idempotency-Key")
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"timestamp changed", func(r *http.Request) *http.Request {
			r.Header.Set("X-Countersign-Timestamp", strconv.FormatInt(now.Unix()+1, 10))
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"timestamp re-spelled", func(r *http.Request) *http.Request {
			r.Header.Set("X-Countersign-Timestamp", "+"+strconv.FormatInt(now.Unix(), 10))
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"timestamp missing", func(r *http.Request) *http.Request {
			r.Header.Del("X-Countersign-Timestamp")
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"signature missing", func(r *http.Request) *http.Request {
			r.Header.Del("X-Countersign-Signature")
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"signature without version", func(r *http.Request) *http.Request {
			sig := r.Header.Get("X-Countersign-Signature")
			r.Header.Set("X-Countersign-Signature", sig[len("v1="):])
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"signature truncated", func(r *http.Request) *http.Request {
			sig := r.Header.Get("X-Countersign-Signature")
			r.Header.Set("X-Countersign-Signature", sig[:len(sig)-2])
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"other secret", func(r *http.Request) *http.Request {
			r.Header.Set("X-Countersign-Signature",
				httpadapter.Sign([]byte("another-secret-of-32-bytes-long!"), now.Unix(), "POST", "/execute", "req_01", []byte(body)))
			return r
		}, httpadapter.ErrSignatureInvalid},
		{"stale timestamp, correctly signed", func(r *http.Request) *http.Request {
			return signedRequest("POST", "/execute", "req_01", body, now.Add(-2*time.Minute).Unix())
		}, httpadapter.ErrTimestampSkew},
		{"future timestamp, correctly signed", func(r *http.Request) *http.Request {
			return signedRequest("POST", "/execute", "req_01", body, now.Add(2*time.Minute).Unix())
		}, httpadapter.ErrTimestampSkew},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.mutate(fresh())
			_, err := httpadapter.VerifyRequest(testSecret, r, now, time.Minute)
			if !errors.Is(err, c.want) {
				t.Errorf("VerifyRequest = %v, want %v", err, c.want)
			}
		})
	}
}

func TestVerifyRequestSkewBoundary(t *testing.T) {
	now := time.Unix(1700000000, 0)
	r := signedRequest("POST", "/validate", "", `{}`, now.Add(-time.Minute).Unix())
	if _, err := httpadapter.VerifyRequest(testSecret, r, now, time.Minute); err != nil {
		t.Errorf("exactly maxSkew old: %v", err)
	}
	// maxSkew <= 0 means DefaultMaxSkew.
	r = signedRequest("POST", "/validate", "", `{}`, now.Add(-httpadapter.DefaultMaxSkew+time.Second).Unix())
	if _, err := httpadapter.VerifyRequest(testSecret, r, now, 0); err != nil {
		t.Errorf("within default skew: %v", err)
	}
	r = signedRequest("POST", "/validate", "", `{}`, now.Add(-httpadapter.DefaultMaxSkew-time.Second).Unix())
	if _, err := httpadapter.VerifyRequest(testSecret, r, now, 0); !errors.Is(err, httpadapter.ErrTimestampSkew) {
		t.Errorf("beyond default skew: %v, want ErrTimestampSkew", err)
	}
}

func TestVerifyRequestBodyLimit(t *testing.T) {
	now := time.Unix(1700000000, 0)
	big := string(bytes.Repeat([]byte("a"), httpadapter.MaxBodyBytes+1))
	r := signedRequest("POST", "/validate", "", big, now.Unix())
	if _, err := httpadapter.VerifyRequest(testSecret, r, now, time.Minute); !errors.Is(err, httpadapter.ErrBodyTooLarge) {
		t.Errorf("VerifyRequest = %v, want ErrBodyTooLarge", err)
	}
}
