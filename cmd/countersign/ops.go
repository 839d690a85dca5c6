package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/metrics"
)

// opsFlags are the serve flags for running countersign in production:
// metrics (and, below, traces and keys at rest).
func opsFlags(fs *flag.FlagSet, cfg *serveConfig) {
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics at /metrics on this listen `ADDRESS` of their own\n(e.g. 127.0.0.1:9090); without it, metrics are served only with --metrics-token")
	fs.StringVar(&cfg.MetricsToken, "metrics-token", "", "serve Prometheus metrics at /metrics to requests with \"Authorization: Bearer `TOKEN`\"\n(on the main address, or on --metrics-addr when given)")
}

// mainServerMetricsToken is the token that routes /metrics on the main
// server: only when metrics have no address of their own.
func mainServerMetricsToken(cfg serveConfig) string {
	if cfg.MetricsAddr != "" {
		return ""
	}
	return cfg.MetricsToken
}

// serveMetrics serves the metrics on ln until the returned stop is called
// or ctx ends.
func serveMetrics(ctx context.Context, ln net.Listener, a *app.App, token string, logger *slog.Logger) (stop func()) {
	h := a.MetricsHandler()
	if token != "" {
		h = metrics.Protect(h, token)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server failed", "err", err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
}

// metricsURL says where the metrics are, if anywhere.
func metricsURL(cfg serveConfig, base string, metricsLn net.Listener) string {
	auth := ""
	if cfg.MetricsToken != "" {
		auth = " (Bearer --metrics-token)"
	}
	switch {
	case metricsLn != nil:
		return listenURL(metricsLn.Addr()) + "/metrics" + auth
	case cfg.MetricsToken != "":
		return base + "/metrics" + auth
	}
	return ""
}
