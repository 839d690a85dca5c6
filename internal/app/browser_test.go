package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/apitest"
	"github.com/countersign/countersign/internal/app"
)

// TestBrowserReviewerJourney drives the console in a real headless Chromium
// while an agent uses the API over real HTTP: the reviewer signs in, sees
// proposals appear live, opens one, checks machine and display values side
// by side and approves; the agent's long-poll sees the token, executes, and
// the history page shows the receipt. Screenshots go to the test's temp dir
// (and, with COUNTERSIGN_UPDATE_SCREENSHOTS=1, to docs/screenshots for the
// README).
func TestBrowserReviewerJourney(t *testing.T) {
	t.Parallel()
	j := newJourney(t)
	ctx, shot, step, text := j.ctx, j.shot, j.step, j.text
	base, creds := serveDemo(t)
	agent := &agentClient{t: t, base: base, key: creds.AgentKey}

	j.signIn(base, creds.Reviewer, creds.ReviewerPassword)
	shot("empty.png")

	// Proposals made while the page is open appear without a reload.
	refund := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":19900,"currency":"CNY","reason":"Parcel lost in transit"},"context":"Customer says the parcel never arrived; the carrier confirmed the loss."}`)
	agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_2001","amount_minor":50000,"currency":"CNY","reason":"Partial refund for a damaged item"}}`)
	agent.propose(`{"tool":"delete_logs","arguments":{"log_ids":["log_0003","log_0001","log_0002"],"reason":"Debug traces with customer data"}}`)
	step("live list", chromedp.WaitVisible(chromedp.CSS(`tr[data-testid=pending-row]:nth-child(3)`)))
	// The live list may be redrawn while it is read: look until it settles.
	var summary string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if summary = j.liveText(`[data-row-id="` + refund.ID + `"] [data-testid=summary]`); strings.Contains(summary, "¥199.00") {
			break
		}
	}
	if !strings.Contains(summary, "¥199.00") {
		t.Errorf("the first refund's summary = %q, want the amount ¥199.00", summary)
	}
	shot("pending.png")

	step("open proposal",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/proposals/%s"]`, refund.ID))),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)),
	)
	amount := `[data-testid=proposal-field][data-field=amount_minor] `
	if got, want := text(amount+`[data-testid=machine-value]`), "19900"; got != want {
		t.Errorf("machine value = %q, want %q", got, want)
	}
	if got, want := text(amount+`[data-testid=display-value]`), "¥199.00"; got != want {
		t.Errorf("display value = %q, want %q", got, want)
	}
	shot("proposal.png")

	// The agent waits for the decision with a long-poll.
	polled := make(chan map[string]any, 1)
	go func() { polled <- agent.waitChange(refund.ID, refund.ETag) }()

	step("approve",
		chromedp.Click(chromedp.CSS(`[data-testid=approve]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=decided-note]`)),
	)
	var p map[string]any
	select {
	case p = <-polled:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's long-poll did not see the confirmation")
	}
	tok, _ := p["confirmation_token"].(string)
	if p["status"] != "confirmed" || tok == "" {
		t.Fatalf("after approval the agent sees status %v, token %q", p["status"], tok)
	}
	exec := agent.execute(refund.ID, tok)
	if exec["status"] != "succeeded" {
		t.Fatalf("execution: %v", exec)
	}

	step("history",
		chromedp.Navigate(base+"/history"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=receipt]`)),
	)
	if got, want := text(`[data-testid=receipt] [data-testid=execution-id]`), exec["execution_id"].(string); !strings.Contains(got, want) {
		t.Errorf("receipt execution id = %q, want %q", got, want)
	}
	if got := text(`[data-testid=receipt] [data-testid=provider-ref]`); got == "" {
		t.Error("receipt shows no provider reference")
	}
	shot("history.png")

	// Narrow screens: the proposal page still reads as a table of values.
	step("mobile",
		chromedp.EmulateViewport(360, 780),
		chromedp.Navigate(base+"/proposals/"+refund.ID),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=proposal-field]`)),
	)
	shot("proposal-360.png")
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid=expires]').length`))
	if err != nil || n != 0 {
		t.Errorf("an executed proposal still shows %d countdowns (%v)", n, err)
	}
}

// serveDemo starts the application as the binary does, with demo data, on
// a free loopback port.
func serveDemo(t *testing.T, mutate ...func(*app.Config)) (string, app.DemoCredentials) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	cfg := app.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "c.db"), Addr: ln.Addr().String(),
		BaseURL: base, DefaultTenant: "demo", Logger: slog.New(slog.DiscardHandler), PollInterval: 100 * time.Millisecond,
		PasswordHash: cheapPasswordHash}
	for _, m := range mutate {
		m(&cfg)
	}
	a, err := app.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return base, creds
}

type agentClient struct {
	t         *testing.T
	base, key string
}

type created struct {
	ID   string
	ETag string
}

func (a *agentClient) do(method, path, body string, header map[string]string) (*http.Response, []byte) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, bytes.NewBufferString(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := apitest.Client(a.t).Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func (a *agentClient) propose(body string) created {
	a.t.Helper()
	res, b := a.do("POST", "/api/v1/proposals", body, nil)
	if res.StatusCode != http.StatusCreated {
		a.t.Fatalf("propose: %d %s", res.StatusCode, b)
	}
	var p struct{ ID string }
	json.Unmarshal(b, &p)
	return created{ID: p.ID, ETag: res.Header.Get("ETag")}
}

func (a *agentClient) waitChange(id, etag string) map[string]any {
	res, b := a.do("GET", "/api/v1/proposals/"+id+"?wait=30", "", map[string]string{"If-None-Match": etag})
	var out map[string]any
	if res.StatusCode == http.StatusOK {
		json.Unmarshal(b, &out)
	}
	return out
}

func (a *agentClient) execute(id, token string) map[string]any {
	a.t.Helper()
	body, _ := json.Marshal(map[string]string{"proposal_id": id, "token": token})
	res, b := a.do("POST", "/api/v1/executions", string(body), nil)
	if res.StatusCode != http.StatusOK {
		a.t.Fatalf("execute: %d %s", res.StatusCode, b)
	}
	var out map[string]any
	json.Unmarshal(b, &out)
	return out
}
