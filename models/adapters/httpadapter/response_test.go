package httpadapter_test

import (
	"bytes"
	"context"
	"errors"
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

// The vector was computed with openssl, independently of this package:
//
//	printf 'response\n1700000001\n200\nv1=db7a…309c\n{"status":"succeeded"}' |
//	  openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
func TestSignResponseKnownVector(t *testing.T) {
	reqSig := "v1=db7a2eed19265d3fd01c349d23255cbc8f9fc546805cb2894fe2945d7df2309c"
	got := httpadapter.SignResponse(testSecret, 1700000001, 200, reqSig, []byte(`{"status":"succeeded"}`))
	if want := "v1=e905fba056cb66b9341d4b22f2a18c4502aba7668837990552bdf30035f0e5d6"; got != want {
		t.Fatalf("SignResponse = %s, want %s", got, want)
	}
}

func TestVerifyResponse(t *testing.T) {
	now := time.Unix(1700000100, 0)
	reqSig := "v1=" + strings.Repeat("ab", 32)
	body := []byte(`{"status":"succeeded"}`)
	header := func(ts int64, sig string) http.Header {
		h := http.Header{}
		h.Set(httpadapter.HeaderTimestamp, strconv.FormatInt(ts, 10))
		h.Set(httpadapter.HeaderSignature, sig)
		return h
	}
	good := httpadapter.SignResponse(testSecret, now.Unix(), 200, reqSig, body)
	if err := httpadapter.VerifyResponse(testSecret, header(now.Unix(), good), 200, reqSig, body, now, 0); err != nil {
		t.Fatalf("genuine answer refused: %v", err)
	}
	// Rotation: any entry may match.
	if err := httpadapter.VerifyResponse(testSecret, header(now.Unix(), "v1=00,"+good), 200, reqSig, body, now, 0); err != nil {
		t.Fatalf("second entry not accepted: %v", err)
	}
	stale := now.Add(-httpadapter.DefaultMaxSkew - time.Second).Unix()
	cases := map[string]error{
		"other status":  httpadapter.VerifyResponse(testSecret, header(now.Unix(), good), 409, reqSig, body, now, 0),
		"other body":    httpadapter.VerifyResponse(testSecret, header(now.Unix(), good), 200, reqSig, []byte(`{"status":"failed_terminal"}`), now, 0),
		"other request": httpadapter.VerifyResponse(testSecret, header(now.Unix(), good), 200, "v1="+strings.Repeat("cd", 32), body, now, 0),
		"other secret":  httpadapter.VerifyResponse([]byte("another-secret-of-32-bytes-long!"), header(now.Unix(), good), 200, reqSig, body, now, 0),
		"other time":    httpadapter.VerifyResponse(testSecret, header(now.Unix()+1, good), 200, reqSig, body, now, 0),
		"stale":         httpadapter.VerifyResponse(testSecret, header(stale, httpadapter.SignResponse(testSecret, stale, 200, reqSig, body)), 200, reqSig, body, now, 0),
		"unsigned":      httpadapter.VerifyResponse(testSecret, http.Header{}, 200, reqSig, body, now, 0),
		// A request's MAC over the same bytes never passes as an answer's.
		"request MAC": httpadapter.VerifyResponse(testSecret, header(now.Unix(),
			httpadapter.Sign(testSecret, now.Unix(), "200", reqSig, "", body)), 200, reqSig, body, now, 0),
	}
	for name, err := range cases {
		if !errors.Is(err, httpadapter.ErrResponseSignature) {
			t.Errorf("%s: %v, want ErrResponseSignature", name, err)
		}
	}
}

// replayer forwards the first request to the reference business system and
// remembers its signed answer; every later request gets that same answer
// (headers, status and body), as an attacker on the path would send.
type replayer struct {
	next http.Handler
	mu   sync.Mutex
	rec  *httptest.ResponseRecorder
}

func (p *replayer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rec == nil {
		p.rec = httptest.NewRecorder()
		p.next.ServeHTTP(p.rec, r)
	}
	for k, v := range p.rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(p.rec.Code)
	w.Write(p.rec.Body.Bytes())
}

// TestAnswersMustBeSigned: an answer that is unsigned, signed with another
// secret, altered, or replayed from another request is no answer: execute
// is unknown (never succeeded, failed or a state conflict), validate and
// status are unavailable (never "it never arrived").
func TestAnswersMustBeSigned(t *testing.T) {
	success := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"succeeded","provider_ref":"forged","ok":true,"state_version":"9"}`))
	}
	notFound := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNotFound) }
	otherSecret := []byte("another-secret-of-32-bytes-long!")
	// signedAs signs with sign* values but sends status and body as given.
	tampered := func(signStatus int, signBody string, status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ts := time.Now().Unix()
			w.Header().Set(httpadapter.HeaderTimestamp, strconv.FormatInt(ts, 10))
			w.Header().Set(httpadapter.HeaderSignature,
				httpadapter.SignResponse(testSecret, ts, signStatus, r.Header.Get(httpadapter.HeaderSignature), []byte(signBody)))
			w.WriteHeader(status)
			w.Write([]byte(body))
		}
	}
	cases := map[string]http.Handler{
		"unsigned success":      http.HandlerFunc(success),
		"unsigned 404":          http.HandlerFunc(notFound),
		"other secret":          httpadapter.SignResponses(otherSecret, nil, http.HandlerFunc(success)),
		"body altered":          tampered(200, `{"status":"failed_retryable"}`, 200, `{"status":"succeeded","ok":true,"state_version":"9"}`),
		"status altered to 409": tampered(200, `{}`, 409, `{}`),
		"status altered to 404": tampered(200, `{}`, 404, `{}`),
	}
	for name, h := range cases {
		ts := httptest.NewServer(h)
		a := newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret, Timeout: 5 * time.Second})
		if _, err := a.Validate(context.Background(), validateReq("ord_1", 1)); models.ErrorCode(err) != models.EUnavailable {
			t.Errorf("%s: Validate = %v, want unavailable", name, err)
		}
		res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
		if !errors.Is(err, models.ErrOutcomeUnknown) || errors.Is(err, models.ErrStateConflict) {
			t.Errorf("%s: Execute = %+v, %v; want outcome unknown", name, res, err)
		}
		_, err = a.Status(context.Background(), "t1", "req_1")
		if models.ErrorCode(err) != models.EUnavailable || errors.Is(err, models.ErrNeverArrived) {
			t.Errorf("%s: Status = %v, want unavailable", name, err)
		}
		ts.Close()
	}

	// A genuine answer replayed for another request.
	srv := adaptertest.New(testSecret)
	srv.AddResource("ord_1", "Order #1", 5000)
	srv.AddResource("ord_2", "Order #2", 5000)
	ts := httptest.NewServer(&replayer{next: srv})
	defer ts.Close()
	a := newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret, Timeout: 5 * time.Second})
	first, err := a.Execute(context.Background(), executeReq("req_a", "ord_1", 100, "1"))
	if err != nil || first.Status != models.StatusSucceeded {
		t.Fatalf("first execute: %+v %v", first, err)
	}
	res, err := a.Execute(context.Background(), executeReq("req_b", "ord_2", 100, "1"))
	if !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Fatalf("replayed answer for another request: %+v %v; want outcome unknown", res, err)
	}
	if srv.Balance("ord_2") != 5000 {
		t.Fatal("the replay test wrote ord_2")
	}
}

// TestUnsignedResponsesOptOut: a tool that opts out accepts unsigned answers.
func TestUnsignedResponsesOptOut(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"status":"succeeded","provider_ref":"r1"}`))
	}))
	defer ts.Close()
	a := newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret, UnsignedResponses: true})
	res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
	if err != nil || res.Status != models.StatusSucceeded {
		t.Fatalf("Execute = %+v, %v", res, err)
	}
}

// TestSignedAnswersAreClassifiedAlike: behind SignResponses, refusals and
// conflicts keep their meaning.
func TestSignedAnswersAreClassifiedAlike(t *testing.T) {
	cases := []struct {
		code int
		want models.Status
	}{{422, models.StatusFailedTerminal}, {429, models.StatusFailedRetryable}, {401, models.StatusFailedTerminal}}
	for _, c := range cases {
		ts := httptest.NewServer(httpadapter.SignResponses(testSecret, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.code)
			w.Write([]byte(`{"error":"x"}`))
		})))
		a := newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret})
		res, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1"))
		if err != nil || res.Status != c.want {
			t.Errorf("signed %d: %+v %v; want %s", c.code, res, err, c.want)
		}
		ts.Close()
	}
	ts := httptest.NewServer(httpadapter.SignResponses(testSecret, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
	})))
	defer ts.Close()
	a := newAdapter(t, httpadapter.Config{BaseURL: ts.URL, Secret: testSecret})
	if _, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1")); !errors.Is(err, models.ErrStateConflict) {
		t.Errorf("signed 409: %v, want ErrStateConflict", err)
	}
	// A signed answer whose body was cut at the limit cannot be verified.
	big := httptest.NewServer(httpadapter.SignResponses(testSecret, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), httpadapter.MaxBodyBytes+10))
	})))
	defer big.Close()
	a = newAdapter(t, httpadapter.Config{BaseURL: big.URL, Secret: testSecret})
	if _, err := a.Execute(context.Background(), executeReq("req_1", "ord_1", 1, "1")); !errors.Is(err, models.ErrOutcomeUnknown) {
		t.Errorf("oversized signed answer: %v, want outcome unknown", err)
	}
}
