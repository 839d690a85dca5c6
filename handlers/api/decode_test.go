package api_test

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// A compressed body is refused for what it is, not as text that is not
// UTF-8; the status stays 400, the one of invalid_request.
func TestCompressedBodiesAreRefusedByName(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte(`{"tool":"refund_order","arguments":{}}`))
	w.Close()
	for _, enc := range []string{"gzip", "br", "identity, gzip"} {
		r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA, contentType: "application/json",
			body: gz.String(), header: http.Header{"Content-Encoding": {enc}}})
		e := wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, "Content-Encoding", "not supported", "uncompressed")
		if strings.Contains(e.Error.Message, "UTF-8") {
			t.Errorf("%s: %q", enc, e.Error.Message)
		}
	}
	if got := f.callCount("Propose"); got != 0 {
		t.Errorf("compressed bodies reached Propose %d times", got)
	}
	r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA, contentType: "application/json",
		body: `{"tool":"refund_order","arguments":{}}`, header: http.Header{"Content-Encoding": {"identity"}}})
	if r.StatusCode == http.StatusBadRequest {
		t.Errorf("an identity body was refused: %s", r.body)
	}
}
