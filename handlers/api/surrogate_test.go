package api_test

import (
	"net/http"
	"testing"

	"github.com/countersign/countersign/models"
)

// A lone UTF-16 surrogate escape would become U+FFFD in encoding/json: the
// stored text would not be what the agent sent. It is refused, wherever it
// is, before anything reaches the protocol.
func TestProposeRefusesLoneSurrogates(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	for _, tc := range []struct{ name, body string }{
		{"in the context", `{"tool":"refund_order","arguments":{},"context":"x\ud800y"}`},
		{"low half alone", `{"tool":"refund_order","arguments":{},"context":"\udc00"}`},
		{"in an argument", `{"tool":"refund_order","arguments":{"reason":"\ud83d"}}`},
		{"high half before another escape", `{"tool":"refund_order","arguments":{"reason":"\ud83d\u0041"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
				contentType: "application/json", body: tc.body})
			wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, "lone UTF-16 surrogate")
		})
	}
	if got := f.callCount("Propose"); got != 0 {
		t.Errorf("bodies with lone surrogates reached Propose %d times", got)
	}
	// A whole pair is a character like any other.
	r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
		contentType: "application/json", body: `{"tool":"refund_order","arguments":{},"context":"\ud83d\ude00"}`})
	if r.StatusCode == http.StatusBadRequest {
		t.Errorf("a surrogate pair was refused: %s", r.body)
	}
}
