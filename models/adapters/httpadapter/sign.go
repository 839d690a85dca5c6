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
	ok := false
	for _, part := range strings.Split(sigText, ",") {
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
	if !ok {
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
