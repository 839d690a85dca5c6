package apitest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// recorder collects what Check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

const (
	auditPage = `{"entries":[],"next_after":0,"checkpoint":null}`
	badLimit  = `{"error":{"code":"invalid_request","message":"limit must be 1 to 1000"}}`
)

// bodyRequest is a request whose body can be read again, as one from
// http.NewRequest.
func bodyRequest(method, path, body string) *http.Request {
	req, err := http.NewRequest(method, "http://countersign.test"+path, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func TestCheckRefusesWhatTheDocumentDoesNotSay(t *testing.T) {
	Document(t)
	get := httptest.NewRequest("GET", "/api/v1/proposals/prop_1", nil)
	exec := httptest.NewRequest("POST", "/api/v1/executions", nil)
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	for _, c := range []struct {
		name   string
		req    *http.Request
		status int
		body   string
		ok     bool
		why    string // when not ok, what one of the reports says
	}{
		{"documented error", get, 404, `{"error":{"code":"not_found","message":"no such proposal"}}`, true, ""},
		{"code of another status", get, 404, `{"error":{"code":"invalid_state","message":"x"}}`, false, ""},
		{"undocumented code", exec, 403, `{"error":{"code":"nope","message":"x"}}`, false, ""},
		{"undocumented status", get, http.StatusTeapot, `{"error":{"code":"invalid_request","message":"x"}}`, false, ""},
		{"status of another operation", get, 410, `{"error":{"code":"token_expired","message":"x"}}`, false, ""},
		{"extra envelope field", get, 404, `{"error":{"code":"not_found","message":"x","hint":"y"}}`, false, ""},
		{"extra body field", get, 200, `{"id":"prop_1","surprise":true}`, false, ""},
		{"unknown route answered 200", httptest.NewRequest("GET", "/api/v1/unlisted", nil), 200, `{}`, false, ""},
		{"unknown route refused", httptest.NewRequest("GET", "/api/v1/unlisted", nil), 404, `{"error":{"code":"not_found","message":"no such route"}}`, true, ""},
		{"console page", httptest.NewRequest("GET", "/history", nil), 200, `<html>`, true, ""},
		{"HEAD of a documented GET", httptest.NewRequest("HEAD", "/api/v1/proposals/prop_1", nil), 200, ``, true, ""},
		{"HEAD with a status GET lacks", httptest.NewRequest("HEAD", "/api/v1/proposals/prop_1", nil), 410, ``, false, ""},
		{"page the document allows", httptest.NewRequest("GET", "/api/v1/audit?limit=10", nil), 200, auditPage, true, ""},
		{"page the document refuses, served", httptest.NewRequest("GET", "/api/v1/audit?limit=5000", nil), 200, auditPage, false, "a request the document does not allow"},
		{"page the document refuses, refused", httptest.NewRequest("GET", "/api/v1/audit?limit=5000", nil), 400, badLimit, true, ""},
		{"page the document allows, refused", httptest.NewRequest("GET", "/api/v1/audit?limit=10", nil), 400, badLimit, false, "to parameters the document allows"},
		{"body the document refuses, accepted", bodyRequest("POST", "/api/v1/webhooks", `{"url":42}`), 201, `{}`, false, "a request the document does not allow"},
		{"OPTIONS of a documented route", httptest.NewRequest("OPTIONS", "/api/v1/proposals", nil), 204, ``, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			Check(r, c.req, c.status, jsonHeader, []byte(c.body))
			if got := len(r.errs) == 0; got != c.ok {
				t.Errorf("accepted = %v, want %v (%v)", got, c.ok, r.errs)
			}
			if c.why != "" && !strings.Contains(strings.Join(r.errs, "\n"), c.why) {
				t.Errorf("no report says %q: %v", c.why, r.errs)
			}
		})
	}
}
