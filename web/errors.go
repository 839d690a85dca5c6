package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/httpstatus"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/web/session"
)

// StatusOf is the HTTP status of a domain error code, the same across the
// whole API (SPEC section 7). An unknown code is a bug: 500. The table
// itself is httpstatus.Of, shared with the console handlers.
func StatusOf(code models.Code) int { return httpstatus.Of(code) }

// errorBody is the JSON error envelope: {"error": {...}}.
type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Code    models.Code    `json:"code"`
	Message string         `json:"message"`
	Fields  []fieldJSON    `json:"fields,omitempty"`
	Details map[string]any `json:"details,omitempty"`
}

type fieldJSON struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// internalMessage is all a caller ever learns about an internal error.
const internalMessage = "internal error"

// errorHandler is the server's one error handler. A *models.Error anywhere in
// the chain gives the status of its code and its caller-safe message, fields
// and details; echo's own errors (no route, wrong method) become not_found
// or method_not_allowed; anything else is 500 internal. The text of an error is
// never shown unless it is a *models.Error message, which is written for the
// caller; causes are logged, with the request id, for every 5xx.
//
// Console requests (outside /api/, /.well-known/, /static/ and /healthz)
// that take HTML — browsers, htmx — get the console's error page instead of
// JSON, with the same status and message, when page is set.
func errorHandler(logger *slog.Logger, page errorPage) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		req := c.Request()
		rid := c.Response().Header().Get(echo.HeaderXRequestID)
		if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
			logger.LogAttrs(req.Context(), slog.LevelDebug, "request abandoned by client",
				slog.String("request_id", rid), slog.String("path", req.URL.Path))
			return
		}
		status, body := errorResponse(err)
		logFailure(logger, context.WithoutCancel(req.Context()), rid, req.Method, req.URL.Path, status, body, err)
		if c.Response().Committed {
			return // the handler already answered; nothing more can be sent
		}
		if secs, ok := models.RetryAfter(err); ok {
			c.Response().Header().Set(echo.HeaderRetryAfter, strconv.Itoa(secs))
		}
		var werr error
		switch {
		case req.Method == http.MethodHead:
			werr = c.NoContent(status)
		case page != nil && consolePath(req.URL.Path) && session.WantsHTML(req):
			werr = page(c, status, pageMessage(err, body.Error.Message))
		default:
			werr = c.JSON(status, body)
		}
		if werr != nil {
			logger.LogAttrs(context.WithoutCancel(req.Context()), slog.LevelWarn, "writing error response failed",
				slog.String("request_id", rid), slog.String("err", werr.Error()))
		}
	}
}

// logFailure logs a request that failed with a 5xx, with its cause (which
// the answer never shows).
func logFailure(logger *slog.Logger, ctx context.Context, rid, method, path string, status int, body errorBody, err error) {
	if status < 500 {
		return
	}
	logger.LogAttrs(ctx, slog.LevelError, "request failed",
		slog.String("request_id", rid),
		slog.String("method", method),
		slog.String("path", path),
		slog.Int("status", status),
		slog.String("code", string(body.Error.Code)),
		slog.String("err", err.Error()),
	)
}

// detachedError is errorHandler for an API request (method, path) whose
// handler detached it and met err afterwards: the same status, JSON body
// and Retry-After, and the same log line for a 5xx.
func detachedError(logger *slog.Logger, ctx context.Context, method, path string, err error, h http.Header) (int, []byte) {
	status, body := errorResponse(err)
	logFailure(logger, ctx, h.Get(echo.HeaderXRequestID), method, path, status, body, err)
	if secs, ok := models.RetryAfter(err); ok {
		h.Set(echo.HeaderRetryAfter, strconv.Itoa(secs))
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(body); err != nil {
		return http.StatusInternalServerError, nil
	}
	h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	return status, b.Bytes()
}

// errorPage renders the console's HTML error page.
type errorPage func(c echo.Context, status int, message string) error

// consolePath reports whether a path belongs to the console rather than to
// the agent API, the public key set, the assets or the health check.
func consolePath(path string) bool {
	for _, prefix := range []string{"/api/", "/.well-known/", "/static/"} {
		if strings.HasPrefix(path, prefix) {
			return false
		}
	}
	return path != "/healthz"
}

// pageMessage says echo's own refusals in words for people; a domain
// error's caller-safe message stays as it is.
func pageMessage(err error, message string) string {
	var he *echo.HTTPError
	var me *models.Error
	if errors.As(err, &me) || !errors.As(err, &he) {
		return message
	}
	switch he.Code {
	case http.StatusNotFound:
		return "There is no page at this address."
	case http.StatusMethodNotAllowed:
		return "This page cannot be used that way."
	}
	return message
}

// errorResponse maps err to a status and the body the caller sees.
func errorResponse(err error) (int, errorBody) {
	var me *models.Error
	if errors.As(err, &me) {
		status := StatusOf(me.Code)
		if status == http.StatusInternalServerError {
			// Internal or unmapped codes: the message may not have been
			// written with a caller in mind.
			return status, errorBody{Error: errorJSON{Code: models.EInternal, Message: internalMessage}}
		}
		out := errorJSON{Code: me.Code, Message: me.Message, Details: me.Details}
		if out.Message == "" {
			out.Message = http.StatusText(status)
		}
		for _, f := range me.Fields {
			out.Fields = append(out.Fields, fieldJSON{Pointer: f.Pointer, Message: f.Message})
		}
		return status, errorBody{Error: out}
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch {
		case he.Code == http.StatusNotFound:
			return he.Code, errorBody{Error: errorJSON{Code: models.ENotFound, Message: "no such route"}}
		case he.Code == http.StatusMethodNotAllowed:
			return he.Code, errorBody{Error: errorJSON{Code: models.EMethodNotAllowed, Message: "method not allowed on this route"}}
		case he.Code == http.StatusRequestEntityTooLarge:
			return http.StatusBadRequest, errorBody{Error: errorJSON{Code: models.EInvalidRequest, Message: "request body too large"}}
		case he.Code >= 400 && he.Code < 500:
			return he.Code, errorBody{Error: errorJSON{Code: models.EInvalidRequest, Message: http.StatusText(he.Code)}}
		}
	}
	return http.StatusInternalServerError, errorBody{Error: errorJSON{Code: models.EInternal, Message: internalMessage}}
}
