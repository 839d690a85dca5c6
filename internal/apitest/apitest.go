// Package apitest checks, in tests, that every answer of the agent API is
// one its OpenAPI document (handlers/api/openapi.json) describes: a
// documented status for that operation, a documented content type, and a
// body that validates against the response schema, error codes included.
// The clients of the test suites send their API requests through it, so the
// document cannot drift from the server.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/countersign/countersign/handlers/api"
)

var (
	loadOnce sync.Once
	doc      *openapi3.T
	router   routers.Router
	errorDoc *openapi3.Schema
	loadErr  error
)

func load() {
	loader := openapi3.NewLoader()
	doc, loadErr = loader.LoadFromData(api.OpenAPIDocument())
	if loadErr != nil {
		return
	}
	if loadErr = doc.Validate(context.Background()); loadErr != nil {
		return
	}
	router, loadErr = gorillamux.NewRouter(doc)
	if loadErr != nil {
		return
	}
	ref := doc.Components.Schemas["Error"]
	if ref == nil || ref.Value == nil {
		loadErr = errors.New("the document has no Error schema")
		return
	}
	errorDoc = ref.Value
}

// Document returns the parsed, validated OpenAPI document.
func Document(t testing.TB) *openapi3.T {
	t.Helper()
	loadOnce.Do(load)
	if loadErr != nil {
		t.Fatalf("openapi.json: %v", loadErr)
	}
	return doc
}

// Covered reports whether path belongs to the API the document describes;
// the console's pages and the MCP endpoint are not part of it.
func Covered(path string) bool {
	return strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/.well-known/") || path == "/healthz"
}

// Check validates one response to req against the document and reports
// every mismatch with t.Errorf. A request to a route or method the document
// does not list must have been refused (404 or 405) with the error
// envelope.
func Check(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	if !Covered(req.URL.Path) {
		return
	}
	Document(t)
	what := req.Method + " " + req.URL.RequestURI()
	if req.Method == http.MethodHead {
		// HEAD answers as GET does, without a body: the status must be
		// one the GET operation documents.
		get := req.Clone(req.Context())
		get.Method = http.MethodGet
		route, _, err := router.FindRoute(get)
		switch {
		case err != nil && status != http.StatusNotFound && status != http.StatusMethodNotAllowed:
			t.Errorf("openapi: %s is not in the document (%v) but answered %d", what, err, status)
		case err == nil && route.Operation.Responses.Status(status) == nil:
			t.Errorf("openapi: %s answered %d, which GET does not document", what, status)
		}
		return
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			t.Errorf("openapi: %s is not in the document (%v) but answered %d", what, err, status)
			return
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Errorf("openapi: %s answered %d with a body that is not JSON: %q", what, status, body)
			return
		}
		if err := errorDoc.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("openapi: %s answered %d with a body outside the Error schema: %v", what, status, err)
		}
		return
	}
	reqIn := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	checkRequest(t, what, reqIn, status, body)
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqIn,
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: false},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("openapi: %s answered %d outside the document: %v\nbody: %s", what, status, err, truncate(body))
	}
}

// checkRequest holds the request to the document too, where the answer
// says what the server made of it: a request the server accepted (2xx)
// must be one the document allows, or the document forbids what clients
// may send; and a GET the server refused as invalid_request must break a
// rule the document states for its parameters, or the document hides a
// rule clients must keep. (A body can be refused for what no schema says,
// such as malformed JSON; a GET has only its parameters.)
func checkRequest(t testing.TB, what string, in *openapi3filter.RequestValidationInput, status int, body []byte) {
	t.Helper()
	req := in.Request
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			in.Options.ExcludeRequestBody = true // sent and gone: only the parameters can be checked
		} else {
			rc, err := req.GetBody()
			if err != nil {
				t.Errorf("openapi: %s: re-reading the request body: %v", what, err)
				return
			}
			clone := req.Clone(req.Context())
			clone.Body = rc
			in.Request = clone
			defer func() { in.Request = req }()
		}
	}
	in.Options.SkipSettingDefaults = true // the request is the caller's: leave it as sent
	err := openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case status >= 200 && status < 300 && err != nil:
		t.Errorf("openapi: %s answered %d to a request the document does not allow: %v", what, status, err)
	case status == http.StatusBadRequest && req.Method == http.MethodGet && err == nil && errorCode(body) == "invalid_request":
		t.Errorf("openapi: %s answered 400 invalid_request to parameters the document allows: %s", what, truncate(body))
	}
}

// errorCode is the code of an error envelope, or "".
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

// Transport wraps next (http.DefaultTransport when nil) so that every
// response it returns is checked against the document. The body is read
// and replaced, so callers read it as usual.
func Transport(t testing.TB, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return roundTripper{t: t, next: next}
}

// Client is an HTTP client that checks every API response it receives and
// does not follow redirects.
func Client(t testing.TB) *http.Client {
	return &http.Client{
		Transport:     Transport(t, nil),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type roundTripper struct {
	t    testing.TB
	next http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil && Covered(req.URL.Path) {
		// Keep the body to check the request by, on a copy: a
		// RoundTripper must not change its caller's request.
		sent, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(sent))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(sent)), nil }
	}
	res, err := rt.next.RoundTrip(req)
	if err != nil || !Covered(req.URL.Path) {
		return res, err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	Check(rt.t, req, res.StatusCode, res.Header, body)
	return res, nil
}

func truncate(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}
