package httpadapter

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Header names of the signing scheme.
const (
	// HeaderTimestamp carries the signing time in Unix seconds, base 10.
	HeaderTimestamp = "X-Countersign-Timestamp"
	// HeaderSignature carries "v1=<hex HMAC-SHA256>". A verifier accepts a
	// comma-separated list ("v1=…,v1=…") and succeeds if any entry matches,
	// so a sender may sign with an old and a new secret during rotation.
	HeaderSignature = "X-Countersign-Signature"
	// HeaderIdempotencyKey carries the idempotency key of an execute (the execution's downstream key). It is part
	// of the signed string, so it cannot be swapped in transit.
	HeaderIdempotencyKey = "Idempotency-Key"
)

// DefaultMaxSkew is the clock skew VerifyRequest tolerates when given a
// maxSkew of zero or less.
const DefaultMaxSkew = 5 * time.Minute

// MaxBodyBytes bounds every body this package reads: request bodies in
// VerifyRequest and response bodies in the Adapter (1 MiB).
const MaxBodyBytes = 1 << 20

// Errors returned by VerifyRequest. Answer all of them with 401 and do not
// say which one it was.
var (
	// ErrSignatureInvalid: the signature headers are missing, malformed or
	// do not match the request.
	ErrSignatureInvalid = errors.New("httpadapter: invalid request signature")
	// ErrTimestampSkew: the signing timestamp is further than maxSkew from
	// now (a stale or replayed request, or a badly set clock).
	ErrTimestampSkew = errors.New("httpadapter: request timestamp outside the allowed skew")
	// ErrBodyTooLarge: the request body exceeds MaxBodyBytes.
	ErrBodyTooLarge = errors.New("httpadapter: request body too large")
)

// Sign returns the value of the X-Countersign-Signature header for one
// request: "v1=" followed by the lower-case hex HMAC-SHA256, keyed with
// secret, of
//
//	ts + "\n" + method + "\n" + path + "\n" + idemKey + "\n" + body
//
// where ts is formatted in base 10, method is the HTTP method as sent (e.g.
// "POST"), path is the request target as it appears on the request line —
// the escaped path, followed by "?" and the raw query when there is one
// (url.URL.RequestURI) — and idemKey is the Idempotency-Key header, empty
// when the request has none. The body is signed byte for byte.
func Sign(secret []byte, ts int64, method, path, idemKey string, body []byte) string {
	return "v1=" + hex.EncodeToString(mac(secret, ts, method, path, idemKey, body))
}

func mac(secret []byte, ts int64, method, path, idemKey string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	io.WriteString(h, strconv.FormatInt(ts, 10))
	io.WriteString(h, "\n")
	io.WriteString(h, method)
	io.WriteString(h, "\n")
	io.WriteString(h, path)
	io.WriteString(h, "\n")
	io.WriteString(h, idemKey)
	io.WriteString(h, "\n")
	h.Write(body)
	return h.Sum(nil)
}

// VerifyRequest checks the signature of an incoming adapter call, for
// business systems written in Go. It reads the whole body (at most
// MaxBodyBytes), returns it, and replaces r.Body with a fresh reader over the
// same bytes so that later handlers can read it again.
//
// The signature is compared in constant time. The timestamp must be within
// maxSkew of now (DefaultMaxSkew when maxSkew <= 0). The signed path is the
// request target exactly as received (r.RequestURI), so verification still
// works behind http.StripPrefix; for requests built in-process without a
// RequestURI, r.URL.RequestURI() is used.
//
// Within the skew window a captured request can be replayed verbatim; that
// is harmless for validate and status (reads) and for execute, whose
// idempotency key is signed and makes a replay return the first outcome.
//
// It returns ErrSignatureInvalid, ErrTimestampSkew or ErrBodyTooLarge, or the
// error from reading the body.
func VerifyRequest(secret []byte, r *http.Request, now time.Time, maxSkew time.Duration) ([]byte, error) {
	if maxSkew <= 0 {
		maxSkew = DefaultMaxSkew
	}
	tsText := r.Header.Get(HeaderTimestamp)
	sigText := r.Header.Get(HeaderSignature)
	if tsText == "" || sigText == "" || len(secret) == 0 {
		return nil, ErrSignatureInvalid
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil || strconv.FormatInt(ts, 10) != tsText {
		return nil, ErrSignatureInvalid
	}
	signedAt := time.Unix(ts, 0)
	if d := now.Sub(signedAt); d > maxSkew || d < -maxSkew {
		return nil, ErrTimestampSkew
	}

	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		body, err = io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(body) > MaxBodyBytes {
			return nil, ErrBodyTooLarge
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))

	want := mac(secret, ts, r.Method, requestTarget(r), r.Header.Get(HeaderIdempotencyKey), body)
	if !anyMatch(sigText, want) {
		return nil, ErrSignatureInvalid
	}
	return body, nil
}

// requestTarget is the path that was signed: the request line's target as
// received, reduced to path and query when it came in absolute form.
func requestTarget(r *http.Request) string {
	rt := r.RequestURI
	if rt == "" {
		return r.URL.RequestURI()
	}
	if strings.HasPrefix(rt, "/") {
		return rt
	}
	if u, err := url.ParseRequestURI(rt); err == nil {
		return u.RequestURI()
	}
	return rt
}

// ErrResponseSignature: an answer from the business system carries no valid
// signature for the request it claims to answer (missing, malformed, made
// with another secret, for another request, or outside the allowed skew).
var ErrResponseSignature = errors.New("httpadapter: invalid response signature")

// SignResponse returns the value of the X-Countersign-Signature header of a
// business system's answer: "v1=" followed by the lower-case hex
// HMAC-SHA256, keyed with the same secret as requests, of
//
//	"response\n" + ts + "\n" + status + "\n" + requestSignature + "\n" + body
//
// where ts is the answer's X-Countersign-Timestamp in base 10, status the
// HTTP status code in base 10, requestSignature the X-Countersign-Signature
// header of the request being answered, exactly as received, and body the
// answer's body byte for byte. The "response" prefix keeps an answer's MAC
// from ever passing as a request's. The request's signature covers its
// timestamp, method, target, idempotency key and body, so an answer signed
// for one request does not verify for any other.
func SignResponse(secret []byte, ts int64, status int, requestSignature string, body []byte) string {
	return "v1=" + hex.EncodeToString(responseMAC(secret, ts, status, requestSignature, body))
}

func responseMAC(secret []byte, ts int64, status int, requestSignature string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	io.WriteString(h, "response\n")
	io.WriteString(h, strconv.FormatInt(ts, 10))
	io.WriteString(h, "\n")
	io.WriteString(h, strconv.Itoa(status))
	io.WriteString(h, "\n")
	io.WriteString(h, requestSignature)
	io.WriteString(h, "\n")
	h.Write(body)
	return h.Sum(nil)
}

// WriteSignedResponse writes an answer to r signed with SignResponse, for
// business systems written in Go: it sets X-Countersign-Timestamp (now) and
// X-Countersign-Signature, then the status and body. Set other headers
// (e.g. Content-Type) before calling it.
func WriteSignedResponse(w http.ResponseWriter, r *http.Request, secret []byte, now time.Time, status int, body []byte) error {
	ts := now.Unix()
	w.Header().Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	w.Header().Set(HeaderSignature, SignResponse(secret, ts, status, r.Header.Get(HeaderSignature), body))
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// VerifyResponse checks an answer's signature headers against the request
// signature it was sent with: the timestamp must be within maxSkew of now
// (DefaultMaxSkew when maxSkew <= 0) and one of the comma-separated "v1="
// entries must match in constant time. It returns ErrResponseSignature.
func VerifyResponse(secret []byte, header http.Header, status int, requestSignature string, body []byte, now time.Time, maxSkew time.Duration) error {
	if maxSkew <= 0 {
		maxSkew = DefaultMaxSkew
	}
	tsText, sigText := header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	if tsText == "" || sigText == "" || len(secret) == 0 || requestSignature == "" {
		return ErrResponseSignature
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil || strconv.FormatInt(ts, 10) != tsText {
		return ErrResponseSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > maxSkew || d < -maxSkew {
		return ErrResponseSignature
	}
	if !anyMatch(sigText, responseMAC(secret, ts, status, requestSignature, body)) {
		return ErrResponseSignature
	}
	return nil
}

// anyMatch reports whether one of the comma-separated "v1=<hex>" entries of
// header equals want, comparing every entry in constant time.
func anyMatch(header string, want []byte) bool {
	ok := false
	for _, part := range strings.Split(header, ",") {
		v, found := strings.CutPrefix(strings.TrimSpace(part), "v1=")
		if !found {
			continue
		}
		got, err := hex.DecodeString(v)
		if err != nil {
			continue
		}
		// Keep looping after a match so the time taken does not depend on
		// which entry matched.
		if hmac.Equal(got, want) {
			ok = true
		}
	}
	return ok
}

// SignResponses wraps a business system's handler so that every answer it
// gives is signed with SignResponse for the request it answers. The answer
// is held in memory until the handler returns (at most MaxBodyBytes+1 bytes
// are kept; a longer body is cut, and countersign refuses it as oversized),
// then sent with X-Countersign-Timestamp and X-Countersign-Signature. now is
// time.Now when nil.
func SignResponses(secret []byte, now func() time.Time, next http.Handler) http.Handler {
	secret = bytes.Clone(secret)
	if now == nil {
		now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if rec.hijacked {
			return
		}
		_ = WriteSignedResponse(w, r, secret, now(), rec.status, rec.body.Bytes())
	})
}

// recorder holds an answer until it can be signed. Headers go straight to
// the real writer's header map; status and body are kept.
type recorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	body        bytes.Buffer
	hijacked    bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wroteHeader = true
	if room := MaxBodyBytes + 1 - r.body.Len(); room > 0 {
		r.body.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Unwrap lets http.ResponseController reach the real writer (a handler
// that hijacks the connection sends nothing through the recorder).
func (r *recorder) Unwrap() http.ResponseWriter {
	r.hijacked = true
	return r.ResponseWriter
}
