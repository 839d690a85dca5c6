package mcpserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The transport's plain-text refusals become the API's error body with
// its code's status; what it streams, and any refusal already under way, passes
// as written.
func TestTransportRefusalsBecomeJSON(t *testing.T) {
	serve := func(h http.HandlerFunc) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		jw := &jsonErrors{ResponseWriter: rec}
		h(jw, httptest.NewRequest("POST", "/mcp", nil))
		jw.finish()
		return rec
	}
	// The status is the code's, as the README's table of errors says.
	for status, want := range map[int]struct {
		code   string
		status int
	}{
		403: {"forbidden", 403}, 404: {"not_found", 404}, 400: {"invalid_request", 400},
		415: {"invalid_request", 400}, 406: {"invalid_request", 400}, 500: {"internal", 500},
	} {
		code := want.code
		rec := serve(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "session user mismatch", status) })
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != want.status || body.Error.Code != code ||
			rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%d: %d %q %s", status, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
		if want := "session user mismatch"; status < 500 && body.Error.Message != want || status >= 500 && body.Error.Message != "internal error" {
			t.Errorf("%d: message %q", status, body.Error.Message)
		}
	}
	rec := serve(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("event: message\ndata: {}\n\n"))
	})
	if rec.Code != 200 || rec.Body.String() != "event: message\ndata: {}\n\n" {
		t.Errorf("a stream was changed: %d %q", rec.Code, rec.Body)
	}
	// The decoder's words name Go types: they are not shown.
	rec = serve(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `malformed payload: json: cannot unmarshal "5" into Go value of type string`, http.StatusBadRequest)
	})
	if b := rec.Body.String(); strings.Contains(b, "Go value") || !strings.Contains(b, "not a well-formed JSON-RPC message") {
		t.Errorf("a malformed body was refused with %s", b)
	}
	rec = serve(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, strings.Repeat("x", 5000), http.StatusBadRequest)
	})
	var body struct{ Error struct{ Message string } }
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if len(body.Error.Message) != maxRefusalText {
		t.Errorf("a long refusal kept %d bytes, want %d", len(body.Error.Message), maxRefusalText)
	}
}
