package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/secret"
)

// serve starts countersign as the binary does, with demo data, on a free
// loopback port.
func serve(t *testing.T, db string) (string, app.DemoCredentials) {
	t.Helper()
	if db == "" {
		db = "sqlite://" + filepath.Join(t.TempDir(), "c.db")
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	a, err := app.Open(ctx, app.Config{DB: db, Addr: ln.Addr().String(),
		BaseURL: base, DefaultTenant: "demo", Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond,
		// The smallest argon2id cost: this test checks the agent, not the hash.
		PasswordHash: secret.PasswordParams{MemoryKiB: 64, Time: 1, Threads: 1}})
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

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var (
	consoleLink = regexp.MustCompile(`approve it at: (\S+/proposals/(prop_\w+))`)
	csrfMeta    = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`)
	csrfInput   = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)
	digestInput = regexp.MustCompile(`name="digest" value="([^"]+)"`)
	effectInput = regexp.MustCompile(`name="effect" value="([^"]+)"`)
)

// reviewer signs in to the console as alice and decides one proposal
// through its forms, as a browser would.
func decide(t *testing.T, base string, creds app.DemoCredentials, link, action, reason string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(u string) string {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Accept", "text/html")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", u, res.StatusCode)
		}
		return string(b)
	}
	post := func(u string, form url.Values) int {
		req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
		req.Header.Set("Accept", "text/html")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	login := get(base + "/login")
	m := csrfInput.FindStringSubmatch(login)
	if m == nil {
		t.Fatal("no CSRF token on the sign-in form")
	}
	if st := post(base+"/login", url.Values{"org": {"demo"}, "username": {creds.Reviewer}, "password": {creds.ReviewerPassword}, "csrf_token": {m[1]}}); st != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", st)
	}
	page := get(link)
	csrf, digest := csrfMeta.FindStringSubmatch(page), digestInput.FindStringSubmatch(page)
	if csrf == nil || digest == nil {
		t.Fatalf("the proposal page has no form to %s", action)
	}
	form := url.Values{"csrf_token": {csrf[1]}, "digest": {digest[1]}}
	if reason != "" {
		form.Set("reason", reason)
	}
	// The approve form carries the effect digest the page shows.
	if effect := effectInput.FindStringSubmatch(page); effect != nil && action == "approve" {
		form.Set("effect", effect[1])
	}
	if st := post(link+"/"+action, form); st != http.StatusSeeOther {
		t.Fatalf("%s: %d", action, st)
	}
}

// runAgent starts the example agent and returns its output, the console
// link it printed and a channel with its result.
func runAgent(t *testing.T, base, key string, args ...string) (*syncBuffer, string, <-chan error) {
	t.Helper()
	out := &syncBuffer{}
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	env := map[string]string{"COUNTERSIGN_AGENT_KEY": key}
	go func() {
		done <- run(ctx, append([]string{"--url", base}, args...), func(k string) string { return env[k] }, out)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := consoleLink.FindStringSubmatch(out.String()); m != nil {
			return out, m[1], done
		}
		select {
		case err := <-done:
			t.Fatalf("the agent ended before printing a console link: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no console link printed:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestExampleAgentRefundsAfterApproval(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { refundAfterApproval(t, "") })
	t.Run("postgres", func(t *testing.T) { refundAfterApproval(t, pgtest.DSN(t)) })
}

func refundAfterApproval(t *testing.T, db string) {
	base, creds := serve(t, db)
	out, link, done := runAgent(t, base, creds.AgentKey)
	if !strings.HasPrefix(link, base+"/proposals/prop_") {
		t.Fatalf("console link %q", link)
	}
	for _, want := range []string{"request_refund_order", "execute_confirmed", "Amount: ¥19.90"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out.String(), "receipt") {
		t.Fatal("executed before anyone approved")
	}
	decide(t, base, creds, link, "approve", "")
	if err := <-done; err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	s := out.String()
	i := strings.Index(s, "receipt:\n")
	if i < 0 || !strings.Contains(s, "execution succeeded") {
		t.Fatalf("no receipt:\n%s", s)
	}
	var receipt struct {
		ExecutionID string `json:"execution_id"`
		Status      string `json:"status"`
		ArgsDigest  string `json:"args_digest"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(s[i+len("receipt:\n"):])), &receipt); err != nil || receipt.ExecutionID == "" || receipt.Status != "succeeded" {
		t.Errorf("receipt %+v (%v) in:\n%s", receipt, err, s)
	}
}

func TestExampleAgentReportsADecline(t *testing.T) {
	base, creds := serve(t, "")
	out, link, done := runAgent(t, base, creds.AgentKey, "--order", "ord_1002")
	decide(t, base, creds, link, "decline", "customer already refunded by phone")
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "declined") {
		t.Fatalf("agent ended with %v, want a declined proposal", err)
	}
	if !strings.Contains(out.String(), "customer already refunded by phone") || strings.Contains(out.String(), "receipt") {
		t.Errorf("output:\n%s", out)
	}
}

func TestExampleAgentNeedsAKey(t *testing.T) {
	if err := run(context.Background(), nil, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("ran without a key")
	}
}
