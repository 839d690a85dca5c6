package events

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix starts every webhook signing secret; the rest is the
// base64 of the HMAC key, as Standard Webhooks defines it.
const SecretPrefix = "whsec_"

// NewSecret returns a fresh signing secret: "whsec_" and 32 random bytes in
// base64.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

func secretKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil || len(key) == 0 {
		return nil, errors.New("events: the signing secret is not whsec_ followed by base64")
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature header value of one message:
// "v1," and the base64 HMAC-SHA256, keyed with the secret's bytes, of
// "<id>.<unix seconds>.<body>".
func Sign(secret, id string, at time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, at.Unix(), body)), nil
}

func mac(key []byte, id string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "."))
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrMissingHeaders = errors.New("webhook-id, webhook-timestamp or webhook-signature missing")
	ErrTimestamp      = errors.New("webhook-timestamp outside the tolerance")
	ErrSignature      = errors.New("no webhook-signature matches")
)

// Verify checks a received message as a receiver should: the three
// headers are present, the timestamp is within tolerance of now (which
// bounds replays; receivers also de-duplicate by webhook-id), and one of
// the space-separated v1 signatures matches, compared in constant time.
func Verify(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	want := mac(key, id, sec, body)
	for _, s := range strings.Fields(sigs) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}
