package mcpserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/countersign/countersign/handlers/httpstatus"
	"github.com/countersign/countersign/models"
)

// jsonErrors rewrites the transport's plain-text HTTP refusals (a session
// that is unknown or another agent's, a wrong Accept header, a malformed
// body) as the API's error body, {"error": {"code", "message"}}, so that
// every refusal at /mcp carries a stable code. The status is the code's, as
// everywhere in the API (a wrong Content-Type, 415 from the transport, is
// invalid_request and so 400). What
// the transport streams (JSON-RPC, server-sent events) passes untouched.
type jsonErrors struct {
	http.ResponseWriter
	status int // the refusal held back, 0 while passing through
	text   bytes.Buffer
	passed bool // a status went through: nothing is rewritten after it
}

func (w *jsonErrors) WriteHeader(status int) {
	if !w.passed && w.status == 0 && status >= 400 &&
		strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	w.passed = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *jsonErrors) Write(b []byte) (int, error) {
	if w.status != 0 {
		// A refusal's text is a line; keep a bounded start of it.
		if room := maxRefusalText - w.text.Len(); room > 0 {
			w.text.Write(b[:min(len(b), room)])
		}
		return len(b), nil
	}
	w.passed = true
	return w.ResponseWriter.Write(b)
}

// Flush passes through, for the event streams.
func (w *jsonErrors) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.status == 0 {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (w *jsonErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxRefusalText bounds the transport's text kept for a refusal's message.
const maxRefusalText = 1 << 10

// finish writes the refusal held back, if any.
func (w *jsonErrors) finish() {
	if w.status == 0 {
		return
	}
	body := ToolErrorBody{Code: refusalCode(w.status), Message: refusalMessage(w.status, w.text.String())}
	h := w.ResponseWriter.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.ResponseWriter.WriteHeader(httpstatus.Of(body.Code))
	_ = json.NewEncoder(w.ResponseWriter).Encode(ToolError{Error: body})
}

// refusalMessage is what a refusal says: the transport's own sentence,
// except where it would show internals, as the API never does: a body
// that is not JSON-RPC is said so without the decoder's words (which name
// Go types), and a failure of the server says nothing more.
func refusalMessage(status int, text string) string {
	text = strings.TrimSpace(text)
	switch {
	case status >= 500:
		return "internal error"
	case strings.HasPrefix(text, "malformed payload"):
		return "the body is not a well-formed JSON-RPC message"
	}
	return text
}

// refusalCode is the domain code of a transport refusal's status.
func refusalCode(status int) models.Code {
	switch status {
	case http.StatusUnauthorized:
		return models.EUnauthenticated
	case http.StatusForbidden:
		return models.EForbidden
	case http.StatusNotFound:
		return models.ENotFound
	case http.StatusMethodNotAllowed:
		return models.EMethodNotAllowed
	case http.StatusConflict:
		return models.EInvalidState
	}
	if status >= 500 {
		return models.EInternal
	}
	return models.EInvalidRequest
}
