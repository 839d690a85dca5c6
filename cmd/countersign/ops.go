package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/kek"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/models/store"
)

// opsFlags are the serve flags for running countersign in production:
// metrics (and, below, traces and keys at rest).
func opsFlags(fs *flag.FlagSet, cfg *serveConfig) {
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics at /metrics on this listen `ADDRESS` of their own\n(e.g. 127.0.0.1:9090); without it, metrics are served only with --metrics-token")
	fs.StringVar(&cfg.KEKFile, "kek-file", "", "encrypt the keys kept in the database (token signing keys, cookie keys) with the\nkey-encryption key in this `FILE` (base64 of 32 bytes: openssl rand -base64 32);\nCOUNTERSIGN_KEK may hold the key itself instead")
	fs.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "send traces to this OTLP/HTTP collector `URL` (e.g. http://otel-collector:4318);\nwhen empty, the standard OTEL_EXPORTER_OTLP_ENDPOINT decides, and without it tracing is off")
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

// kekEnv holds a key-encryption key itself (base64), for deployments that
// pass secrets in the environment rather than in files.
const kekEnv = envPrefix + "KEK"

// loadKEK is the key-encryption key from the file at path, or from
// COUNTERSIGN_KEK; nil when neither is given.
func (c *cli) loadKEK(path string) (*kek.KEK, error) {
	inline := c.getenv(kekEnv)
	switch {
	case path != "" && inline != "":
		return nil, fmt.Errorf("give the key-encryption key once: --kek-file (COUNTERSIGN_KEK_FILE) or %s, not both", kekEnv)
	case path != "":
		return kek.Load(path)
	case inline != "":
		k, err := kek.Parse(inline)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kekEnv, err)
		}
		return k, nil
	}
	return nil, nil
}

// keysWarning is the start-up banner's word on keys at rest, if any.
func keysWarning(a *app.App) string {
	switch {
	case a.Store.KEK() == nil:
		return "keys (token signing, cookies) are stored unencrypted in the database; give --kek-file to encrypt them"
	case a.Keys.Plain > 0:
		return fmt.Sprintf("%d stored keys are still unencrypted; run countersign keys rekey to encrypt them", a.Keys.Plain)
	}
	return ""
}

const rekeyAbout = `
Re-encrypts every key the database keeps (token signing keys, console cookie
keys) under the key-encryption key given with --kek-file or COUNTERSIGN_KEK,
in one transaction. Keys encrypted under the previous KEK need it as
--old-kek-file; keys still stored unencrypted are encrypted. Servers must be
restarted with the new KEK afterwards (one still running with the old KEK
keeps working with the keys it loaded, but cannot read keys added later).`

// keysRekey is "countersign keys rekey".
func (c *cli) keysRekey(ctx context.Context, args []string) error {
	var db, kekFile, oldFile string
	cmd := newCommand("keys rekey", "countersign keys rekey --kek-file NEW [--old-kek-file OLD] [flags]", rekeyAbout, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&kekFile, "kek-file", "", "the new key-encryption key `FILE`")
	cmd.fs.StringVar(&oldFile, "old-kek-file", "", "the key-encryption key `FILE` the keys are encrypted with now, if any")
	if err := cmd.parseFlags(args, c.getenv, "db"); err != nil {
		return err
	}
	next, err := c.loadKEK(kekFile)
	if err != nil {
		return err
	}
	if next == nil {
		return usagef(cmd.synopsis, "give the new key-encryption key with --kek-file or %s", kekEnv)
	}
	var old *kek.KEK
	if oldFile != "" {
		if old, err = kek.Load(oldFile); err != nil {
			return err
		}
	}
	if err := existingDB(db); err != nil {
		return err
	}
	st, err := store.Open(db, store.Options{Logger: c.quietLogger(), KEK: next})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	n, err := st.Rekey(ctx, old)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%d keys encrypted under key-encryption key %s\n", n, next.ID())
	return nil
}

// flushTraces sends the spans still buffered and stops the exporter.
func flushTraces(ctx context.Context, stop func(context.Context) error, logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := stop(sctx); err != nil {
		logger.Warn("flushing traces failed", "err", err)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
