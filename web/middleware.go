package web

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/web/detach"
)

// requestIDPattern is what we accept from a client's X-Request-Id (e.g. a
// proxy's); anything else is replaced, so log lines stay well-formed.
var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestID gives every request an X-Request-Id, echoed in the response and
// in every log line about it.
func requestID() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			rid := c.Request().Header.Get(echo.HeaderXRequestID)
			if !requestIDPattern.MatchString(rid) {
				rid = models.NewID("req")
			}
			c.Response().Header().Set(echo.HeaderXRequestID, rid)
			return next(c)
		}
	}
}

// noSniff stops browsers from guessing content types (a JSON error body must
// never be run as HTML or script).
func noSniff(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderXContentTypeOptions, "nosniff")
		return next(c)
	}
}

// accessLog writes one structured line per request. It hands errors to the
// error handler itself, so the line carries the status actually sent; for a
// detached request (a parked long-poll) the line is written when its answer
// is, with that answer's status and size.
func accessLog(logger *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err)
			}
			req, res := c.Request(), c.Response()
			dr := detach.FromContext(req.Context())
			detached := dr != nil && dr.Detached()
			ctx := req.Context()
			if detached {
				ctx = dr.Context()
			}
			// The line may be written after the handler returned (detached):
			// it keeps these, not c, which echo reuses.
			rid, method, path, route := res.Header().Get(echo.HeaderXRequestID), req.Method, req.URL.Path, c.Path()
			remote := req.RemoteAddr // not X-Forwarded-For: clients can forge it
			line := func(status int, size int64) {
				level := slog.LevelInfo
				if status >= 500 {
					level = slog.LevelError
				}
				logger.LogAttrs(ctx, level, "http request",
					slog.String("request_id", rid),
					slog.String("method", method),
					slog.String("path", path),
					slog.String("route", route),
					slog.Int("status", status),
					slog.Int64("bytes", size),
					slog.Duration("latency", time.Since(start)),
					slog.String("remote_addr", remote),
				)
			}
			if detached {
				dr.OnFinish(line)
				return nil
			}
			line(res.Status, res.Size)
			return nil
		}
	}
}

// detachable lets handlers detach their requests (see package detach),
// answering errors after that as errorHandler does.
func detachable(logger *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			method, path := req.Method, req.URL.Path
			dr := &detach.Request{ErrorResponse: func(ctx context.Context, err error, h http.Header) (int, []byte) {
				return detachedError(logger, ctx, method, path, err, h)
			}}
			c.SetRequest(req.WithContext(detach.NewContext(req.Context(), dr)))
			return next(c)
		}
	}
}

// recoverPanics turns a panic into a 500 internal answer; the panic value and
// stack go to the error handler's log line, never to the client. (echo's own
// Recover middleware would pull golang.org/x/time into the build through its
// package; this is all we need of it.)
func recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				panic(r) // net/http's way to abort a response; let it through
			}
			stack := make([]byte, 8<<10)
			stack = stack[:runtime.Stack(stack, false)]
			err = fmt.Errorf("panic: %v\n%s", r, stack)
		}()
		return next(c)
	}
}

// bodyLimit refuses declared oversize bodies before reading them and caps
// undeclared ones, so no handler can be made to read more than limit bytes.
// The JSON decoder enforces the same limit on its own with a precise message;
// this is the transport-level backstop for every route.
func bodyLimit(limit int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if req.ContentLength > limit {
				return models.Errorf(models.EInvalidRequest, "request body exceeds the limit of %d bytes", limit)
			}
			if req.Body != nil && req.Body != http.NoBody {
				req.Body = http.MaxBytesReader(c.Response(), req.Body, limit)
			}
			return next(c)
		}
	}
}

// headStopsAtHeaders ends a HEAD request's context as soon as its headers
// are written. A HEAD answer has no body (net/http discards it), so a
// handler that streams after its headers — the console's event stream —
// has nothing more to send and must not hold the connection.
func headStopsAtHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Method != http.MethodHead {
			return next(c)
		}
		ctx, cancel := context.WithCancel(req.Context())
		defer cancel()
		c.SetRequest(req.WithContext(ctx))
		c.Response().Before(cancel)
		return next(c)
	}
}

// ContentSecurityPolicy allows only this site's own scripts, styles,
// images (and data: images), connections and form targets; no inline
// script or style, no plugins, no <base>, and no framing at all, so an
// approve button can never be clickjacked.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// PermissionsPolicy turns off powerful features the console never uses.
const PermissionsPolicy = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

// securityHeaders sets the console's security headers on every response
// before the handler runs, so error pages and 404s carry them too: the CSP,
// X-Frame-Options DENY, Referrer-Policy same-origin, nosniff, COOP, a
// minimal Permissions-Policy and Cache-Control no-store (pages show CSRF
// tokens, keys and evidence; handlers of cacheable responses, such as the
// hashed static assets, replace it). With secure, it adds HSTS.
func securityHeaders(secure bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set("Content-Security-Policy", ContentSecurityPolicy)
			h.Set(echo.HeaderXFrameOptions, "DENY")
			h.Set(echo.HeaderReferrerPolicy, "same-origin")
			h.Set(echo.HeaderXContentTypeOptions, "nosniff")
			h.Set("Cross-Origin-Opener-Policy", "same-origin")
			h.Set("Permissions-Policy", PermissionsPolicy)
			h.Set(echo.HeaderCacheControl, "no-store")
			if secure {
				h.Set(echo.HeaderStrictTransportSecurity, "max-age=31536000")
			}
			return next(c)
		}
	}
}
