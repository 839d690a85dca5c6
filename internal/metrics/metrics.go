// Package metrics exposes countersign's Prometheus metrics. Every number is
// either observed from the result of a protocol call (writes.Observer), an
// adapter call (Adapter), or read from the database at scrape time; nothing
// here decides anything.
package metrics

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// namespace prefixes every metric of countersign's own.
const namespace = "countersign"

// Config is what the metrics read at scrape time.
type Config struct {
	// Stats gives proposal counts, pending age and the execution backlog.
	Stats *store.Store
	// DB is the connection pool whose statistics are exported.
	DB *sql.DB
	// Waiting is how many long-polls wait in this process.
	Waiting func() int
	// Clock is the server clock; models.SystemClock when nil.
	Clock models.Clock
	// Logger receives scrape-time failures; discarded when nil.
	Logger *slog.Logger
}

// Metrics holds countersign's collectors in a registry of its own.
type Metrics struct {
	reg *prometheus.Registry
	log *slog.Logger

	proposed        *prometheus.CounterVec
	decisions       *prometheus.CounterVec
	refusals        *prometheus.CounterVec
	timeToDecision  *prometheus.HistogramVec
	executeDuration *prometheus.HistogramVec
	executions      *prometheus.CounterVec
	reconciles      *prometheus.CounterVec
	reconsiders     *prometheus.CounterVec
	adapterDuration *prometheus.HistogramVec
	adapterErrors   *prometheus.CounterVec
	outboxPruned    *prometheus.CounterVec
}

// New registers every collector: the protocol's counters and histograms,
// the database snapshot, the connection pool, the long-poll waiters, and
// Go's runtime and process metrics.
func New(cfg Config) *Metrics {
	if cfg.Clock == nil {
		cfg.Clock = models.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{reg: prometheus.NewRegistry(), log: cfg.Logger}
	m.proposed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "proposals_created_total", Help: "Proposals created (replays of a request key not counted), by tool, risk tier and resulting status."},
		[]string{"tool", "tier", "status"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "decisions_total", Help: "Reviewer decisions recorded, by decision (approve, decline), tool and risk tier."},
		[]string{"decision", "tool", "tier"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "refusals_total", Help: "Protocol calls refused, by operation and error code."},
		[]string{"op", "code"})
	m.timeToDecision = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace,
		Name: "time_to_decision_seconds", Help: "From proposal to the decision that settled it (confirmed or declined).",
		Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600}},
		[]string{"decision", "tier"})
	m.executeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace,
		Name: "execute_duration_seconds", Help: "Execute calls (redeem and business write), by tool; refused redeems have tool \"\".",
		Buckets: prometheus.DefBuckets}, []string{"tool"})
	m.executions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "executions_total", Help: "Execute answers, by tool and outcome: the execution's status, or the error code of a refusal."},
		[]string{"tool", "outcome"})
	m.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "reconcile_attempts_total", Help: "Reconciler attempts on uncertain executions, by tool and result (ok or an error code)."},
		[]string{"tool", "result"})
	m.adapterDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace,
		Name: "adapter_call_duration_seconds", Help: "Business-system calls, by tool and call (validate, execute, status).",
		Buckets: prometheus.DefBuckets}, []string{"tool", "call"})
	m.adapterErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "adapter_errors_total", Help: "Business-system calls that failed, by tool, call and kind (outcome_unknown, state_conflict or an error code)."},
		[]string{"tool", "call", "kind"})
	m.outboxPruned = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "outbox_pruned_total", Help: "Outbox rows deleted once past the retention, by kind (events, deliveries, attempts)."},
		[]string{"kind"})
	for _, kind := range []string{"events", "deliveries", "attempts"} {
		m.outboxPruned.WithLabelValues(kind) // exported as 0 before the first pruning
	}
	m.reconsiders = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace,
		Name: "group_reconsiderations_total", Help: "Waiting proposals a change of group membership completed, by what became of them (confirmed, unchanged, dropped: the target changed, put_off: tried again later)."},
		[]string{"outcome"})
	for _, o := range []string{"confirmed", "unchanged", "dropped", "put_off"} {
		m.reconsiders.WithLabelValues(o) // exported as 0 before the first
	}
	m.reg.MustRegister(m.proposed, m.decisions, m.refusals, m.timeToDecision, m.executeDuration,
		m.executions, m.reconciles, m.reconsiders, m.adapterDuration, m.adapterErrors, m.outboxPruned)
	if cfg.Stats != nil {
		m.reg.MustRegister(&dbSnapshot{src: cfg.Stats, clock: cfg.Clock, log: cfg.Logger})
	}
	if cfg.DB != nil {
		m.reg.MustRegister(collectors.NewDBStatsCollector(cfg.DB, namespace))
	}
	if cfg.Waiting != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace,
			Name: "longpoll_waiters", Help: "Long-polls waiting for a proposal to change, in this process."},
			func() float64 { return float64(cfg.Waiting()) }))
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// OutboxPruned counts what one pruning of the outbox deleted.
func (m *Metrics) OutboxPruned(p store.OutboxPruned) {
	m.outboxPruned.WithLabelValues("events").Add(float64(p.Events))
	m.outboxPruned.WithLabelValues("deliveries").Add(float64(p.Deliveries))
	m.outboxPruned.WithLabelValues("attempts").Add(float64(p.Attempts))
}

// metricName is what RegisterGauge accepts after the namespace.
var metricName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// RegisterGauge exports a number read at every scrape as
// countersign_NAME, e.g. a notification queue's backlog:
//
//	m.RegisterGauge("webhook_backlog", "Webhook deliveries waiting to be sent.", queue.Len)
//
// It fails when the name is malformed or taken.
func (m *Metrics) RegisterGauge(name, help string, value func() float64) error {
	if !metricName.MatchString(name) || value == nil {
		return fmt.Errorf("metrics: gauge %q: give a lower_snake_case name and a value function", name)
	}
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, value))
}

// Handler serves the registry in the Prometheus exposition format. A
// collector that fails (the database down) does not hide the others.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: m.reg})
}

// Protect serves h only to requests carrying "Authorization: Bearer
// token"; others get 401. The comparison takes constant time.
func Protect(h http.Handler, token string) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			http.Error(w, "metrics need the bearer token given to --metrics-token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Observe implements writes.Observer.
func (m *Metrics) Observe(_ context.Context, ev writes.Event) {
	code := models.ErrorCode(ev.Err)
	if ev.Err != nil {
		m.refusals.WithLabelValues(string(ev.Op), string(code)).Inc()
	}
	p := ev.Proposal
	switch ev.Op {
	case writes.OpPropose:
		if ev.Err == nil && ev.Created && p != nil {
			m.proposed.WithLabelValues(p.Tool, p.Tier.Name, string(p.Status)).Inc()
		}
	case writes.OpConfirm, writes.OpDecline:
		if ev.Err != nil || p == nil {
			return
		}
		decision := "approve"
		settled := models.StatusConfirmed
		if ev.Op == writes.OpDecline {
			decision, settled = "decline", models.StatusDeclined
		}
		m.decisions.WithLabelValues(decision, p.Tool, p.Tier.Name).Inc()
		if p.Status == settled {
			m.timeToDecision.WithLabelValues(decision, p.Tier.Name).Observe(max(ev.Now.Sub(p.CreatedAt), 0).Seconds())
		}
	case writes.OpExecute:
		tool, outcome := "", string(code)
		if e := ev.Execution; e != nil {
			tool, outcome = e.Operation, string(e.Status)
		}
		m.executeDuration.WithLabelValues(tool).Observe(ev.Duration.Seconds())
		m.executions.WithLabelValues(tool, outcome).Inc()
	case writes.OpReconcile:
		if ev.Outcome == writes.OutcomeNotClaimed {
			return // another instance made the attempt, and counts it
		}
		tool, result := "", "ok"
		if ev.Execution != nil {
			tool = ev.Execution.Operation
		}
		if ev.Err != nil {
			result = string(code)
		}
		m.reconciles.WithLabelValues(tool, result).Inc()
	case writes.OpReconsider:
		m.reconsiders.WithLabelValues(ev.Outcome).Inc()
		if ev.Outcome == "confirmed" && p != nil {
			// The change of membership settled it: the last approval's
			// moment, as far as the decision rule goes.
			m.timeToDecision.WithLabelValues("approve", p.Tier.Name).Observe(max(ev.Now.Sub(p.CreatedAt), 0).Seconds())
		}
	}
}

// Adapter wraps a tool's adapter so that every business-system call is
// timed and its failures counted under the tool's name. The wrapper offers
// the optional calls the adapter has, and only those: the protocol looks
// for them, so hiding one would change what it does (a business system
// kept in countersign's database writes in the consuming transaction,
// store.TxAdapter; one that validates and describes from one look at its
// state is asked once, models.ValidateDescribeAdapter).
func (m *Metrics) Adapter(tool string, a models.Adapter) models.Adapter {
	t := &timedAdapter{m: m, tool: tool, next: a}
	in, isTx := a.(store.TxAdapter)
	vd, isVD := a.(models.ValidateDescribeAdapter)
	switch {
	case isTx && isVD:
		return &struct {
			*timedAdapter
			timedIn
			timedVD
		}{t, timedIn{t, in}, timedVD{t, vd}}
	case isTx:
		return &struct {
			*timedAdapter
			timedIn
		}{t, timedIn{t, in}}
	case isVD:
		return &struct {
			*timedAdapter
			timedVD
		}{t, timedVD{t, vd}}
	}
	return t
}

// timedIn times a write in the consuming transaction as an execute.
type timedIn struct {
	t  *timedAdapter
	in store.TxAdapter
}

func (w timedIn) ExecuteIn(tx *gorm.DB, req models.ExecuteRequest) (models.ExecuteResult, error) {
	start := time.Now()
	res, err := w.in.ExecuteIn(tx, req)
	w.t.record("execute", start, err)
	return res, err
}

// timedVD times a combined validation and description as a validation.
type timedVD struct {
	t  *timedAdapter
	vd models.ValidateDescribeAdapter
}

func (w timedVD) ValidateDescribe(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, *models.Description, error) {
	start := time.Now()
	vr, d, err := w.vd.ValidateDescribe(ctx, req)
	w.t.record("validate", start, err)
	return vr, d, err
}

type timedAdapter struct {
	m    *Metrics
	tool string
	next models.Adapter
}

// Timeout passes the wrapped adapter's own bound through: the protocol
// derives each tool's execution lease from it, so a wrapper that hid it
// would shorten the lease below a slow business system's answer time.
func (t *timedAdapter) Timeout() time.Duration {
	if ta, ok := t.next.(models.TimedAdapter); ok {
		return ta.Timeout()
	}
	return 0
}

func (t *timedAdapter) record(call string, start time.Time, err error) {
	t.m.adapterDuration.WithLabelValues(t.tool, call).Observe(time.Since(start).Seconds())
	if err == nil || errors.Is(err, models.ErrNeverArrived) {
		return // "never arrived" is an answer, not a failure
	}
	kind := string(models.ErrorCode(err))
	switch {
	case errors.Is(err, models.ErrOutcomeUnknown):
		kind = "outcome_unknown"
	case errors.Is(err, models.ErrStateConflict):
		kind = "state_conflict"
	}
	t.m.adapterErrors.WithLabelValues(t.tool, call, kind).Inc()
}

func (t *timedAdapter) Validate(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, error) {
	start := time.Now()
	res, err := t.next.Validate(ctx, req)
	t.record("validate", start, err)
	return res, err
}

func (t *timedAdapter) Execute(ctx context.Context, req models.ExecuteRequest) (models.ExecuteResult, error) {
	start := time.Now()
	res, err := t.next.Execute(ctx, req)
	t.record("execute", start, err)
	return res, err
}

func (t *timedAdapter) Status(ctx context.Context, tenant, requestKey string) (models.ExecuteResult, error) {
	start := time.Now()
	res, err := t.next.Status(ctx, tenant, requestKey)
	t.record("status", start, err)
	return res, err
}

// Describe passes the optional describe call on (models.DescribeAdapter),
// timed like the others; an adapter without it describes nothing.
func (t *timedAdapter) Describe(ctx context.Context, req models.DescribeRequest) (models.Description, error) {
	da, ok := t.next.(models.DescribeAdapter)
	if !ok {
		return models.Description{}, models.ErrNoDescription
	}
	start := time.Now()
	res, err := da.Describe(ctx, req)
	if errors.Is(err, models.ErrNoDescription) {
		return res, err
	}
	t.record("describe", start, err)
	return res, err
}

// dbSnapshot reads the database's numbers at each scrape.
type dbSnapshot struct {
	src   *store.Store
	clock models.Clock
	log   *slog.Logger
}

var (
	descProposals = prometheus.NewDesc(namespace+"_proposals", "Proposals in the database, by tool, risk tier and status.",
		[]string{"tool", "tier", "status"}, nil)
	descPendingAge = prometheus.NewDesc(namespace+"_pending_oldest_age_seconds",
		"Age of the oldest proposal awaiting confirmation; 0 when none waits.", nil, nil)
	descExecutions = prometheus.NewDesc(namespace+"_executions_unsettled",
		"Executions not settled yet, by status (executing, failed_retryable, unknown).", []string{"status"}, nil)
	descReconcile = prometheus.NewDesc(namespace+"_reconcile_backlog",
		"Executions the reconciler has to settle now: unknown, or executing past their lease.", nil, nil)
	descWriteTx = prometheus.NewDesc(namespace+"_sqlite_write_transactions_total",
		"Write transactions this process ran on SQLite.", nil, nil)
	descWriteCommits = prometheus.NewDesc(namespace+"_sqlite_write_commits_total",
		"SQLite transactions those ran in: queued ones commit together.", nil, nil)
)

func (d *dbSnapshot) Describe(ch chan<- *prometheus.Desc) {
	ch <- descProposals
	ch <- descPendingAge
	ch <- descExecutions
	ch <- descReconcile
	ch <- descWriteTx
	ch <- descWriteCommits
}

// scrapeTimeout bounds the database queries of one scrape.
const scrapeTimeout = 5 * time.Second

func (d *dbSnapshot) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	now := d.clock.Now()
	st, err := d.src.Stats(ctx, now)
	if err != nil {
		d.log.LogAttrs(ctx, slog.LevelWarn, "metrics: reading database numbers failed", slog.String("err", err.Error()))
		ch <- prometheus.NewInvalidMetric(descProposals, err)
		return
	}
	for _, c := range st.Proposals {
		ch <- prometheus.MustNewConstMetric(descProposals, prometheus.GaugeValue, float64(c.Count), c.Tool, c.Tier, string(c.Status))
	}
	age := 0.0
	if !st.OldestPending.IsZero() {
		age = max(now.Sub(st.OldestPending), 0).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(descPendingAge, prometheus.GaugeValue, age)
	for _, s := range []models.Status{models.StatusExecuting, models.StatusFailedRetryable, models.StatusUnknown} {
		ch <- prometheus.MustNewConstMetric(descExecutions, prometheus.GaugeValue, float64(st.Executions[s]), strings.ToLower(string(s)))
	}
	ch <- prometheus.MustNewConstMetric(descReconcile, prometheus.GaugeValue, float64(st.ReconcileDue))
	if txs, commits, ok := d.src.WriteCommits(); ok {
		ch <- prometheus.MustNewConstMetric(descWriteTx, prometheus.CounterValue, float64(txs))
		ch <- prometheus.MustNewConstMetric(descWriteCommits, prometheus.CounterValue, float64(commits))
	}
}
