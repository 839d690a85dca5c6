// Package web builds countersign's HTTP server: middleware, the one route
// table (routes.go) and the one error handler that turns domain error codes
// into HTTP statuses and JSON bodies.
package web

import (
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/api"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/protocol"
)

// Config is the server's configuration, read once in cmd/countersign.
type Config struct {
	// Addr is the listen address, e.g. "127.0.0.1:8080"; it becomes
	// e.Server.Addr, so the caller may simply call e.Start(cfg.Addr).
	Addr string
	// BaseURL is the public origin, e.g. "https://countersign.example.com";
	// when set, Location headers are absolute.
	BaseURL string
	// MaxBodyBytes bounds request bodies; api.DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// Logger receives the access log and internal errors; slog.Default()
	// when nil.
	Logger *slog.Logger
}

// Deps are the server's collaborators.
type Deps struct {
	// Protocol is the domain service (*protocol.Service).
	Protocol api.Protocol
	// Clock is the server's clock; models.SystemClock when nil.
	Clock models.Clock
}

// The domain service is what production wires in.
var _ api.Protocol = (*protocol.Service)(nil)

// Server timeouts. Writes must outlast the longest long-poll.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = protocol.MaxWait + 30*time.Second
	idleTimeout       = 120 * time.Second
)

// NewServer builds the complete HTTP server: middleware, routes and error
// handling. It does not listen; the caller starts it.
func NewServer(cfg Config, deps Deps) *echo.Echo {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	clock := deps.Clock
	if clock == nil {
		clock = models.SystemClock{}
	}
	apiHandlers := api.New(deps.Protocol, api.Options{
		Clock:        clock,
		MaxBodyBytes: cfg.MaxBodyBytes,
		BaseURL:      cfg.BaseURL,
	})

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Server.Addr = cfg.Addr
	e.Server.ReadHeaderTimeout = readHeaderTimeout
	e.Server.ReadTimeout = readTimeout
	e.Server.WriteTimeout = writeTimeout
	e.Server.IdleTimeout = idleTimeout
	e.HTTPErrorHandler = errorHandler(logger)

	// Outermost first: every response, including errors and recovered
	// panics, gets a request id, nosniff and an access-log line.
	e.Use(
		requestID(),
		noSniff,
		accessLog(logger),
		recoverPanics,
		bodyLimit(apiHandlers.MaxBodyBytes()),
	)
	routes(e, apiHandlers)
	return e
}
