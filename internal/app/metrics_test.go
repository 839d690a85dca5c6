package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// eachDB runs fn with the URL of a fresh SQLite and a fresh PostgreSQL
// database.
func eachDB(t *testing.T, fn func(t *testing.T, db string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			db := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
			if kind == "postgres" {
				db = pgtest.DSN(t)
			}
			fn(t, db)
		})
	}
}

// scrape is one /metrics answer, parsed into "name{labels}" → value.
type scrape map[string]float64

func getMetrics(t *testing.T, url, token string) (int, scrape) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := scrape{}
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, out
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, out
}

// sum adds the samples of metric name whose labels include every given
// name="value" pair; found is false when none matched.
func (s scrape) sum(name string, labels ...string) (total float64, found bool) {
	for key, v := range s {
		n, rest, _ := strings.Cut(key, "{")
		if n != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(rest, labels[i]+`="`+labels[i+1]+`"`) {
				ok = false
				break
			}
		}
		if ok {
			total, found = total+v, true
		}
	}
	return total, found
}

func (s scrape) want(t *testing.T, want float64, name string, labels ...string) {
	t.Helper()
	got, found := s.sum(name, labels...)
	if !found {
		t.Errorf("%s%v: no sample", name, labels)
		return
	}
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// TestMetricsAfterAFlow scrapes /metrics after a scripted flow — propose,
// approve, execute, a refused replay, a decline, a pending proposal with a
// long-poll on it — and checks that each number moved as it should.
func TestMetricsAfterAFlow(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, db string) {
		ctx := context.Background()
		start := time.Date(2026, 9, 1, 9, 0, 0, 0, time.UTC)
		clock := models.NewFixedClock(start)
		a, err := app.Open(ctx, app.Config{DB: db, Clock: clock, Logger: slog.New(slog.DiscardHandler),
			MetricsToken: "metrics-secret", PollInterval: 20 * time.Millisecond, PasswordHash: cheapPasswordHash})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a.Server)
		t.Cleanup(func() { srv.Close(); a.Close() })
		backlog := 7.0
		if err := a.Metrics.RegisterGauge("webhook_backlog", "Webhook deliveries waiting.", func() float64 { return backlog }); err != nil {
			t.Fatal(err)
		}
		if err := a.Metrics.RegisterGauge("webhook_backlog", "again", func() float64 { return 0 }); err == nil {
			t.Error("a gauge name was registered twice")
		}

		// Without the token (or with another) there is nothing to see.
		for _, tok := range []string{"", "metrics-secre", "metrics-secretX"} {
			if status, _ := getMetrics(t, srv.URL+"/metrics", tok); status != http.StatusUnauthorized {
				t.Errorf("/metrics with token %q: %d, want 401", tok, status)
			}
		}

		creds, err := a.SeedDemo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		agent, err := a.Protocol.AuthenticateAgent(ctx, creds.AgentKey)
		if err != nil {
			t.Fatal(err)
		}
		tenant, _ := a.Store.TenantByName(ctx, creds.Tenant)
		alice, _, err := a.Store.UserCredentials(ctx, tenant.ID, creds.Reviewer)
		if err != nil {
			t.Fatal(err)
		}
		propose := func(order string) *models.Proposal {
			args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": 100, "currency": "CNY", "reason": "damaged"})
			p, _, err := a.Protocol.Propose(ctx, agent, writes.ProposeInput{Tool: "refund_order", Arguments: args, RequestKey: "k-" + order})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		api := &agentClient{t: t, base: srv.URL, key: creds.AgentKey}

		// Approved 90 s after it was proposed, executed, then replayed.
		p1 := propose("ord_1001")
		propose("ord_1001") // the same request key again: a replay, not a new proposal
		clock.Advance(90 * time.Second)
		c1, err := a.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: p1.ID, DigestSeen: p1.ArgsDigest, EffectSeen: p1.EffectDigest, Evidence: auth.ApprovalEvidence(alice, nil)})
		if err != nil {
			t.Fatal(err)
		}
		if out := api.execute(p1.ID, c1.Token.Compact); out["status"] != "succeeded" {
			t.Fatalf("execute: %v", out)
		}
		body, _ := json.Marshal(map[string]string{"proposal_id": p1.ID, "token": c1.Token.Compact})
		if res, b := api.do("POST", "/api/v1/executions", string(body), nil); res.StatusCode != http.StatusConflict {
			t.Fatalf("replayed token: %d %s, want 409", res.StatusCode, b)
		}

		// Declined 10 s after it was proposed.
		p2 := propose("ord_1002")
		clock.Advance(10 * time.Second)
		if _, err := a.Protocol.Decline(ctx, writes.DeclineInput{Reviewer: alice, ProposalID: p2.ID, DigestSeen: p2.ArgsDigest, Reason: "no"}); err != nil {
			t.Fatal(err)
		}

		// Pending for 30 s, with an agent long-polling on it.
		p3 := propose("ord_1003")
		clock.Advance(30 * time.Second)
		res, _ := api.do("GET", "/api/v1/proposals/"+p3.ID, "", nil)
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			req, _ := http.NewRequest("GET", srv.URL+"/api/v1/proposals/"+p3.ID+"?wait=30", nil)
			req.Header.Set("Authorization", "Bearer "+creds.AgentKey)
			req.Header.Set("If-None-Match", res.Header.Get("ETag"))
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}()
		waitUntil(t, "the long-poll to wait", func() bool { return a.Protocol.Waiting() == 1 })

		status, m := getMetrics(t, srv.URL+"/metrics", "metrics-secret")
		if status != http.StatusOK {
			t.Fatalf("/metrics: %d", status)
		}
		m.want(t, 3, "countersign_proposals_created_total", "tool", "refund_order", "status", "awaiting_confirmation")
		m.want(t, 1, "countersign_decisions_total", "decision", "approve", "tool", "refund_order")
		m.want(t, 1, "countersign_decisions_total", "decision", "decline")
		m.want(t, 1, "countersign_time_to_decision_seconds_count", "decision", "approve")
		m.want(t, 90, "countersign_time_to_decision_seconds_sum", "decision", "approve")
		m.want(t, 10, "countersign_time_to_decision_seconds_sum", "decision", "decline")
		m.want(t, 1, "countersign_executions_total", "tool", "refund_order", "outcome", "succeeded")
		m.want(t, 1, "countersign_executions_total", "outcome", "already_consumed")
		m.want(t, 2, "countersign_execute_duration_seconds_count")
		m.want(t, 1, "countersign_refusals_total", "op", "execute", "code", "already_consumed")
		m.want(t, 1, "countersign_adapter_call_duration_seconds_count", "tool", "refund_order", "call", "execute")
		if n, _ := m.sum("countersign_adapter_call_duration_seconds_count", "tool", "refund_order", "call", "validate"); n < 4 {
			t.Errorf("adapter validate calls = %v, want at least 4 (three proposals and a confirmation)", n)
		}
		m.want(t, 1, "countersign_proposals", "tool", "refund_order", "status", "succeeded")
		m.want(t, 1, "countersign_proposals", "status", "declined")
		m.want(t, 1, "countersign_proposals", "status", "awaiting_confirmation")
		m.want(t, 30, "countersign_pending_oldest_age_seconds")
		m.want(t, 0, "countersign_reconcile_backlog")
		m.want(t, 0, "countersign_executions_unsettled", "status", "unknown")
		m.want(t, 1, "countersign_longpoll_waiters")
		m.want(t, 7, "countersign_webhook_backlog")
		if n, ok := m.sum("go_sql_open_connections", "db_name", "countersign"); !ok || n < 1 {
			t.Errorf("connection pool: open connections = %v (%v), want at least 1", n, ok)
		}
		txs, okTx := m.sum("countersign_sqlite_write_transactions_total")
		commits, okCommits := m.sum("countersign_sqlite_write_commits_total")
		if sqlite := strings.HasPrefix(db, "sqlite"); okTx != sqlite || okCommits != sqlite ||
			(sqlite && (commits < 1 || txs < commits || txs < 5)) {
			t.Errorf("SQLite's write transactions %v (%v) in %v commits (%v), on %s", txs, okTx, commits, okCommits, db)
		}

		// The long-poll ends when the proposal changes; the gauge follows.
		if res, b := api.do("POST", "/api/v1/proposals/"+p3.ID+"/cancel", "", nil); res.StatusCode != http.StatusOK {
			t.Fatalf("cancel: %d %s", res.StatusCode, b)
		}
		<-polled
		backlog = 0
		_, m = getMetrics(t, srv.URL+"/metrics", "metrics-secret")
		m.want(t, 0, "countersign_longpoll_waiters")
		m.want(t, 0, "countersign_pending_oldest_age_seconds")
		m.want(t, 0, "countersign_webhook_backlog")
		m.want(t, 1, "countersign_proposals", "status", "cancelled")
	})
}

// What pruning deletes from the outbox is counted, by kind, from 0.
func TestOutboxPruningIsCounted(t *testing.T) {
	t.Parallel()
	c := openConsole(t, func(cfg *app.Config) {
		cfg.OutboxRetention = 50 * time.Millisecond
		cfg.MetricsToken = "metrics-secret"
	})
	_, m := getMetrics(t, c.srv.URL+"/metrics", "metrics-secret")
	m.want(t, 0, "countersign_outbox_pruned_total", "kind", "events")
	m.want(t, 0, "countersign_outbox_pruned_total", "kind", "deliveries")
	c.propose("ord_1001", 100)
	time.Sleep(60 * time.Millisecond)
	c.app.PruneOnce(context.Background())
	_, m = getMetrics(t, c.srv.URL+"/metrics", "metrics-secret")
	m.want(t, 2, "countersign_outbox_pruned_total", "kind", "events") // created, awaiting_confirmation
	c.app.PruneOnce(context.Background())
	_, m = getMetrics(t, c.srv.URL+"/metrics", "metrics-secret")
	m.want(t, 2, "countersign_outbox_pruned_total", "kind", "events")
}
