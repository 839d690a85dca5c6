package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// served is one application serving on a loopback port until stop.
type served struct {
	app  *app.App
	base string
	stop func() error
}

func serveApp(t *testing.T, db string, mutate ...func(*app.Config)) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	cfg := app.Config{DB: db, Addr: ln.Addr().String(), BaseURL: base,
		Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond, PasswordHash: cheapPasswordHash}
	for _, m := range mutate {
		m(&cfg)
	}
	a, err := app.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln, time.Second) }()
	s := &served{app: a, base: base}
	stopped := false
	s.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		err := <-done
		a.Close()
		return err
	}
	t.Cleanup(func() { _ = s.stop() })
	return s
}

// TestShutdownAnswersUnavailable: once shutdown starts, a redeem gets 503
// unavailable (not a closed connection) and leaves the token unused, while
// a long-poll that was in flight still gets its answer.
func TestShutdownAnswersUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "c.db")
	s := serveApp(t, db)
	creds, err := s.app.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := s.app.Protocol.AuthenticateAgent(ctx, creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := s.app.Store.TenantByName(ctx, creds.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	alice, _, err := s.app.Store.UserCredentials(ctx, tenant.ID, creds.Reviewer)
	if err != nil {
		t.Fatal(err)
	}
	propose := func(order string) *models.Proposal {
		args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": 100, "currency": "CNY", "reason": "damaged"})
		p, _, err := s.app.Protocol.Propose(ctx, agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := propose("ord_1001")
	confirmed, err := s.app.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(alice, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if confirmed.Token == nil || confirmed.Token.Compact == "" {
		t.Fatal("confirmation issued no token")
	}
	redeem, _ := json.Marshal(map[string]string{"proposal_id": p.ID, "token": confirmed.Token.Compact})
	agentAPI := &agentClient{t: t, base: s.base, key: creds.AgentKey}

	// A long-poll on another proposal is in flight when shutdown starts.
	waiting := propose("ord_1002")
	res, _ := agentAPI.do("GET", "/api/v1/proposals/"+waiting.ID, "", nil)
	etag := res.Header.Get("ETag")
	type answer struct {
		status int
		err    error
	}
	polled := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", s.base+"/api/v1/proposals/"+waiting.ID+"?wait=30", nil)
		req.Header.Set("Authorization", "Bearer "+creds.AgentKey)
		req.Header.Set("If-None-Match", etag)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- answer{err: err}
			return
		}
		res.Body.Close()
		polled <- answer{status: res.StatusCode}
	}()
	waitUntil(t, "the long-poll to be in flight", func() bool { return s.app.Drain.InFlight() == 1 })

	stopped := make(chan error, 1)
	go func() { stopped <- s.stop() }()
	waitUntil(t, "shutdown to start", s.app.Drain.Draining)

	// The listener is still open while the long-poll runs: a redeem on a
	// new connection is answered, and refused as unavailable.
	res, body := agentAPI.do("POST", "/api/v1/executions", string(redeem), nil)
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("redeem during shutdown: %d %s, want 503", res.StatusCode, body)
	}
	var env struct{ Error struct{ Code string } }
	if err := json.Unmarshal(body, &env); err != nil || env.Error.Code != string(models.EUnavailable) {
		t.Errorf("redeem during shutdown: body %s, want code unavailable", body)
	}
	if res.Header.Get("Retry-After") == "" || !res.Close {
		t.Errorf("503 during shutdown lacks Retry-After or Connection: close: %v", res.Header)
	}
	if res.Header.Get("X-Request-Id") == "" {
		t.Error("503 during shutdown lacks a request id")
	}

	a := <-polled
	if a.err != nil {
		t.Fatalf("the in-flight long-poll lost its connection: %v", a.err)
	}
	if a.status != http.StatusNotModified && a.status != http.StatusOK {
		t.Errorf("in-flight long-poll answered %d", a.status)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve: %v", err)
	}

	// Nothing was consumed: after a restart the same token executes.
	s2 := serveApp(t, db)
	again := &agentClient{t: t, base: s2.base, key: creds.AgentKey}
	out := again.execute(p.ID, confirmed.Token.Compact)
	if out["status"] != "succeeded" {
		t.Errorf("execute after restart: %v", out)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(errors.New("timed out waiting for " + what))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
