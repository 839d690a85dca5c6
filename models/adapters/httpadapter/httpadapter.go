// Package httpadapter is the client side of countersign's HTTP adapter
// contract (SPEC section 7): it asks an integrator's business system to
// validate and execute writes over signed JSON-over-HTTP calls.
//
// The endpoints, relative to Config.BaseURL:
//
//	POST {base}/validate               {tool, arguments, tenant, principal}
//	                                   → {ok, state_version, resource_label, problems[]}
//	POST {base}/execute                Idempotency-Key: <downstream key>
//	                                   {tool, arguments, tenant, expected_state_version}
//	                                   → {status, provider_ref, result}; 409 on a version conflict
//	GET  {base}/executions/{key}?tenant=…  → the same body as execute; 404 if it never arrived
//	POST {base}/describe               {tool, arguments, tenant}
//	                                   → {facts: […], changes: […]}; optional: 404 means none
//
// Every request is signed (see Sign); business systems written in Go verify
// calls with VerifyRequest. Every answer must be signed too (SignResponse,
// bound to the request it answers); an answer without a valid signature is
// treated as no answer unless Config.UnsignedResponses is set.
//
// The failure rules exist so that a write is never sent twice under two
// keys and an unknown outcome is never reported as a failure: whenever an
// execute may have reached the business system and no clear answer came
// back, Execute returns an error wrapping models.ErrOutcomeUnknown, and the
// caller must ask Status with the same key instead of writing again.
package httpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/countersign/countersign/models"
)

// DefaultTimeout bounds one request, including reading its response, when
// Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// MinSecretLen is the shortest accepted shared secret, in bytes.
const MinSecretLen = 16

// maxKeyLen bounds idempotency keys; countersign's own keys are far shorter.
const maxKeyLen = 255

// Config configures an Adapter.
type Config struct {
	// BaseURL is the absolute http or https URL the endpoint paths are
	// appended to, e.g. http://127.0.0.1:9000/countersign. It must not carry
	// a query or a fragment.
	BaseURL string
	// Secret is the HMAC-SHA256 key shared with the business system, at
	// least MinSecretLen bytes. New copies it.
	Secret []byte
	// Timeout bounds each request, response body included; DefaultTimeout
	// when zero.
	Timeout time.Duration
	// Client sends the requests; a client without a timeout of its own when
	// nil. The Adapter uses a shallow copy that never follows redirects (a
	// redirected write would be ambiguous), so the caller's client is not
	// modified.
	Client *http.Client
	// Clock supplies the signing timestamps and checks the answers'; time.Now
	// when nil.
	Clock func() time.Time
	// UnsignedResponses accepts answers without a valid response signature
	// (SignResponse). Off by default: an unsigned or wrongly signed answer
	// is then treated as no answer at all — outcome unknown for execute,
	// unavailable for validate and status — because anyone on the path
	// could have written it. Set it only for a business system that cannot
	// sign yet and is reached over a channel that is authenticated some
	// other way.
	UnsignedResponses bool
}

// Adapter calls a business system over the HTTP adapter contract. It
// implements models.Adapter and is safe for concurrent use.
type Adapter struct {
	base    *url.URL
	secret  []byte
	timeout time.Duration
	client  *http.Client
	clock   func() time.Time
	// unsigned accepts answers without a response signature.
	unsigned bool
}

var _ models.Adapter = (*Adapter)(nil)

// New checks cfg and returns an Adapter. It fails when BaseURL is not an
// absolute http(s) URL without query or fragment, when Secret is shorter
// than MinSecretLen, or when Timeout is negative.
func New(cfg Config) (*Adapter, error) {
	if len(cfg.Secret) < MinSecretLen {
		return nil, fmt.Errorf("httpadapter: secret must be at least %d bytes", MinSecretLen)
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("httpadapter: negative timeout")
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("httpadapter: base URL: %w", err)
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.Opaque != "" {
		return nil, fmt.Errorf("httpadapter: base URL %q is not an absolute http or https URL", cfg.BaseURL)
	}
	if base.RawQuery != "" || base.ForceQuery || base.Fragment != "" {
		return nil, fmt.Errorf("httpadapter: base URL %q must not have a query or fragment", cfg.BaseURL)
	}
	// Keep the escaped form of the base path so that whatever the
	// integrator wrote is sent (and signed) unchanged.
	escaped := strings.TrimRight(base.EscapedPath(), "/")
	base.Path, err = url.PathUnescape(escaped)
	if err != nil {
		return nil, fmt.Errorf("httpadapter: base URL path: %w", err)
	}
	base.RawPath = escaped

	a := &Adapter{
		base:     base,
		secret:   bytes.Clone(cfg.Secret),
		timeout:  cfg.Timeout,
		clock:    cfg.Clock,
		unsigned: cfg.UnsignedResponses,
	}
	if a.timeout == 0 {
		a.timeout = DefaultTimeout
	}
	if a.clock == nil {
		a.clock = time.Now
	}
	if cfg.Client != nil {
		c := *cfg.Client
		a.client = &c
	} else {
		a.client = &http.Client{}
	}
	a.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return a, nil
}

// validateBody and executeBody are the wire forms of the requests.
type validateBody struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Tenant    string          `json:"tenant"`
	Principal string          `json:"principal"`
}

type executeBody struct {
	Tool                 string          `json:"tool"`
	Arguments            json.RawMessage `json:"arguments"`
	Tenant               string          `json:"tenant"`
	ExpectedStateVersion string          `json:"expected_state_version"`
}

// validateReply accepts state_version as a JSON number or string.
type validateReply struct {
	OK            *bool           `json:"ok"`
	StateVersion  json.RawMessage `json:"state_version"`
	ResourceLabel string          `json:"resource_label"`
	Problems      []string        `json:"problems"`
}

// executeReply is the body of execute and status answers.
type executeReply struct {
	Status      models.Status   `json:"status"`
	ProviderRef string          `json:"provider_ref"`
	Result      json.RawMessage `json:"result"`
}

// unavailable is the error for a business system that could not be asked or
// gave no usable answer. Its message is safe to show; the cause is for logs.
func unavailable(cause error) error {
	return models.Wrap(models.EUnavailable, cause, "the business system is unavailable")
}

// Validate asks the business system whether the write is allowed now. An
// answer with ok=false is not an error: its problems are in the result.
// state_version may come as a JSON number (returned as its exact literal
// text) or string; an ok answer without one is a contract violation.
//
// Errors: EUnavailable (*models.Error) when the request fails, times out,
// is answered with anything but 2xx (including 401 for a bad signature),
// the answer carries no valid response signature (unless
// Config.UnsignedResponses), or the body is oversized or not a valid answer.
func (a *Adapter) Validate(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, error) {
	body, err := json.Marshal(validateBody{
		Tool:      req.Tool,
		Arguments: orNull(req.Arguments),
		Tenant:    req.Tenant,
		Principal: req.Principal,
	})
	if err != nil {
		return models.ValidateResult{}, models.Wrap(models.EInternal, err, "cannot encode the validate request")
	}
	resp, err := a.do(ctx, http.MethodPost, a.endpoint("validate", ""), "", body)
	if err != nil {
		return models.ValidateResult{}, unavailable(fmt.Errorf("httpadapter: validate: %w", err))
	}
	if !is2xx(resp.code) {
		return models.ValidateResult{}, unavailable(fmt.Errorf("httpadapter: validate: HTTP %d", resp.code))
	}
	if resp.tooLarge {
		return models.ValidateResult{}, unavailable(errors.New("httpadapter: validate: response body too large"))
	}
	var reply validateReply
	if err := json.Unmarshal(resp.body, &reply); err != nil {
		return models.ValidateResult{}, unavailable(fmt.Errorf("httpadapter: validate: decode answer: %w", err))
	}
	if reply.OK == nil {
		return models.ValidateResult{}, unavailable(errors.New("httpadapter: validate: answer has no ok field"))
	}
	version, err := stateVersion(reply.StateVersion)
	if err != nil {
		return models.ValidateResult{}, unavailable(fmt.Errorf("httpadapter: validate: %w", err))
	}
	if *reply.OK && version == "" {
		return models.ValidateResult{}, unavailable(errors.New("httpadapter: validate: ok answer without state_version"))
	}
	return models.ValidateResult{
		OK:            *reply.OK,
		StateVersion:  version,
		ResourceLabel: reply.ResourceLabel,
		Problems:      reply.Problems,
	}, nil
}

// stateVersion turns a JSON string or number into its text; a number keeps
// its exact literal (no float rounding). Absent or null gives "".
func stateVersion(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "", nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("state_version: %w", err)
	}
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	default:
		return "", fmt.Errorf("state_version is a JSON %T, want a number or string", v)
	}
}

// Timeout is how long one request may take, response body included. The
// server derives an execution's lease from it, so that the lease always
// outlasts the attempt.
func (a *Adapter) Timeout() time.Duration { return a.timeout }

// Execute asks the business system to perform the write once, with
// req.IdempotencyKey as the Idempotency-Key.
//
// Outcomes, for an answer whose response signature verifies (or any answer
// with Config.UnsignedResponses; an answer that does not verify is treated
// like a lost one, below):
//   - a 2xx answer with status succeeded, failed_terminal or failed_retryable
//     is returned as is;
//   - 409 returns an error wrapping models.ErrStateConflict (nothing written);
//   - 408, 425 and 429 (the business system declined to process the request
//     now) return a failed_retryable result: retry with the same key;
//   - any other 4xx (400, 401, 403, 404, 422, …: the business system
//     explicitly refused) returns a failed_terminal result whose Result is
//     {"http_status": N, "body": <the answer's JSON, or its text>};
//   - anything else — a transport error or timeout, a 5xx, a redirect, an
//     oversized or undecodable 2xx body, an unknown or missing status, an
//     answer without a valid response signature —
//     returns an error wrapping models.ErrOutcomeUnknown (and the cause, so
//     errors.Is also finds e.g. context.DeadlineExceeded). The write may
//     have happened: ask Status with the same key, never execute again under
//     another key.
//
// An empty or malformed idempotency key is refused before anything is sent,
// with EInternal: the caller has a bug.
func (a *Adapter) Execute(ctx context.Context, req models.ExecuteRequest) (models.ExecuteResult, error) {
	if err := checkKey(req.IdempotencyKey); err != nil {
		return models.ExecuteResult{}, err
	}
	body, err := json.Marshal(executeBody{
		Tool:                 req.Tool,
		Arguments:            orNull(req.Arguments),
		Tenant:               req.Tenant,
		ExpectedStateVersion: req.ExpectedStateVersion,
	})
	if err != nil {
		return models.ExecuteResult{}, models.Wrap(models.EInternal, err, "cannot encode the execute request")
	}
	unknown := func(cause error) error {
		return fmt.Errorf("httpadapter: execute %q: %w: %w", req.IdempotencyKey, models.ErrOutcomeUnknown, cause)
	}

	resp, err := a.do(ctx, http.MethodPost, a.endpoint("execute", ""), req.IdempotencyKey, body)
	switch {
	case err != nil:
		return models.ExecuteResult{}, unknown(err)
	case resp.code == http.StatusConflict:
		return models.ExecuteResult{}, fmt.Errorf("httpadapter: execute %q: %w", req.IdempotencyKey, models.ErrStateConflict)
	case is2xx(resp.code):
		res, err := decodeOutcome(resp)
		if err != nil {
			return models.ExecuteResult{}, unknown(err)
		}
		return res, nil
	case resp.code == http.StatusRequestTimeout, resp.code == http.StatusTooEarly, resp.code == http.StatusTooManyRequests:
		return models.ExecuteResult{Status: models.StatusFailedRetryable, Result: refusal(resp)}, nil
	case resp.code >= 400 && resp.code < 500:
		return models.ExecuteResult{Status: models.StatusFailedTerminal, Result: refusal(resp)}, nil
	default:
		return models.ExecuteResult{}, unknown(fmt.Errorf("HTTP %d", resp.code))
	}
}

// Status asks the business system for the outcome of an earlier Execute by
// idempotency key (sent as GET {base}/executions/{key}?tenant=…).
//
// Errors: models.ErrNeverArrived (wrapped) on 404; otherwise, when the
// business system could not be asked or gave no usable answer (transport
// error, timeout, non-2xx, oversized or undecodable body, unknown status),
// an EUnavailable *models.Error — never ErrNeverArrived, since not knowing
// is not the same as "it never arrived". A malformed key is EInternal.
func (a *Adapter) Status(ctx context.Context, tenant, requestKey string) (models.ExecuteResult, error) {
	if err := checkKey(requestKey); err != nil {
		return models.ExecuteResult{}, err
	}
	var query string
	if tenant != "" {
		query = url.Values{"tenant": {tenant}}.Encode()
	}
	resp, err := a.do(ctx, http.MethodGet, a.endpoint("executions/"+url.PathEscape(requestKey), query), "", nil)
	switch {
	case err != nil:
		return models.ExecuteResult{}, unavailable(fmt.Errorf("httpadapter: status %q: %w", requestKey, err))
	case resp.code == http.StatusNotFound:
		return models.ExecuteResult{}, fmt.Errorf("httpadapter: status %q: %w", requestKey, models.ErrNeverArrived)
	case !is2xx(resp.code):
		return models.ExecuteResult{}, unavailable(fmt.Errorf("httpadapter: status %q: HTTP %d", requestKey, resp.code))
	}
	res, err := decodeOutcome(resp)
	if err != nil {
		return models.ExecuteResult{}, unavailable(fmt.Errorf("httpadapter: status %q: %w", requestKey, err))
	}
	return res, nil
}

// decodeOutcome reads an execute or status answer and insists on one of the
// three outcome statuses.
func decodeOutcome(resp response) (models.ExecuteResult, error) {
	if resp.tooLarge {
		return models.ExecuteResult{}, errors.New("response body too large")
	}
	var reply executeReply
	if err := json.Unmarshal(resp.body, &reply); err != nil {
		return models.ExecuteResult{}, fmt.Errorf("decode answer: %w", err)
	}
	switch reply.Status {
	case models.StatusSucceeded, models.StatusFailedTerminal, models.StatusFailedRetryable:
	default:
		return models.ExecuteResult{}, fmt.Errorf("answer has status %q, want succeeded, failed_terminal or failed_retryable", reply.Status)
	}
	res := models.ExecuteResult{Status: reply.Status, ProviderRef: reply.ProviderRef}
	if len(reply.Result) > 0 && !bytes.Equal(reply.Result, []byte("null")) {
		res.Result = reply.Result
	}
	return res, nil
}

// refusal describes a 4xx answer for ExecuteResult.Result.
func refusal(resp response) json.RawMessage {
	out := struct {
		HTTPStatus int `json:"http_status"`
		Body       any `json:"body,omitempty"`
	}{HTTPStatus: resp.code}
	if !resp.tooLarge && len(bytes.TrimSpace(resp.body)) > 0 {
		if json.Valid(resp.body) {
			out.Body = json.RawMessage(resp.body)
		} else {
			const maxText = 4 << 10
			text := resp.body
			if len(text) > maxText {
				text = text[:maxText]
			}
			out.Body = strings.ToValidUTF8(string(text), "\uFFFD")
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return json.RawMessage(`{"http_status":` + strconv.Itoa(resp.code) + `}`)
	}
	return b
}

// response is a fully read answer.
type response struct {
	code     int
	body     []byte
	tooLarge bool // body exceeded MaxBodyBytes and was cut
}

// do sends one signed request and reads the answer within the timeout. An
// error means no complete answer was received.
func (a *Adapter) do(ctx context.Context, method string, u *url.URL, idemKey string, body []byte) (response, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()

	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// net/http sends a request that carries an Idempotency-Key again,
		// by itself, when a kept-alive connection fails under it: a write
		// the business system made before it dropped the connection would
		// reach it a second time, unseen by the attempt count. Without a
		// way to rewind the body it does not; the answer is then unknown,
		// and countersign asks the status endpoint as the contract says.
		req.GetBody = nil
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "countersign-httpadapter")
	if idemKey != "" {
		req.Header.Set(HeaderIdempotencyKey, idemKey)
	}
	// The trace context (W3C traceparent/tracestate) of the call, so the
	// business system's spans join the execution's trace. It is not part
	// of the signed string: it identifies, it does not authorize.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	ts := a.clock().Unix()
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	// Sign exactly the target net/http writes on the request line.
	reqSig := Sign(a.secret, ts, method, req.URL.RequestURI(), idemKey, body)
	req.Header.Set(HeaderSignature, reqSig)

	res, err := a.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, MaxBodyBytes+1))
	if err != nil {
		return response{}, fmt.Errorf("read answer (HTTP %d): %w", res.StatusCode, err)
	}
	out := response{code: res.StatusCode, body: data}
	if len(data) > MaxBodyBytes {
		out.body, out.tooLarge = nil, true
	}
	if !a.unsigned {
		// An answer that does not prove it comes from the business system,
		// for this very request, is no answer: the callers treat the error
		// like a lost response. A cut body cannot be checked either.
		if out.tooLarge {
			return response{}, fmt.Errorf("answer (HTTP %d) too large to verify: %w", res.StatusCode, ErrResponseSignature)
		}
		if err := VerifyResponse(a.secret, res.Header, res.StatusCode, reqSig, data, a.clock(), 0); err != nil {
			return response{}, fmt.Errorf("answer (HTTP %d): %w", res.StatusCode, err)
		}
	}
	return out, nil
}

// endpoint returns base + "/" + rel, where rel is already escaped.
func (a *Adapter) endpoint(rel, rawQuery string) *url.URL {
	u := *a.base
	u.RawPath = a.base.RawPath + "/" + rel
	u.Path, _ = url.PathUnescape(u.RawPath) // both parts are valid escapes
	u.RawQuery = rawQuery
	return &u
}

// checkKey refuses keys that cannot travel safely as a header and a single
// path segment.
func checkKey(key string) error {
	if key == "" || key == "." || key == ".." || len(key) > maxKeyLen {
		return models.Errorf(models.EInternal, "invalid idempotency key")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f {
			return models.Errorf(models.EInternal, "invalid idempotency key")
		}
	}
	return nil
}

// orNull sends absent arguments as JSON null rather than failing to encode.
func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func is2xx(code int) bool { return code >= 200 && code < 300 }
