package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/apitest"
	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/pgtest"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/models/writes"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// syncBuffer is a bytes.Buffer that a running server may write while the
// test reads it.
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

// envOf returns a getenv over m, so that tests never see the real
// environment. New password hashes take the smallest argon2id cost unless m
// says otherwise: the tests check the commands, not the hash's strength.
// cheapPasswordHash is the smallest argon2id cost, what envOf gives the
// commands as COUNTERSIGN_PASSWORD_HASH: these tests check the commands,
// not the hash's strength.
var cheapPasswordHash = secret.PasswordParams{MemoryKiB: 64, Time: 1, Threads: 1}

func envOf(m map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := m[k]; ok || k != "COUNTERSIGN_PASSWORD_HASH" {
			return v
		}
		return cheapPasswordHash.String()
	}
}

// result is what one run of the command produced.
type result struct {
	stdout, stderr string
	err            error
}

// invoke runs the command once with stdin and the environment env, and
// returns its output and error.
func invoke(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, envOf(env), strings.NewReader(stdin), &stdout, &stderr)
	return result{stdout.String(), stderr.String(), err}
}

// mustExec is invoke that fails the test on an error.
func mustExec(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	r := invoke(t, env, stdin, args...)
	if r.err != nil {
		t.Fatalf("countersign %s: %v\nstderr:\n%s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r
}

// tempDB returns the URL of a fresh SQLite database file.
func tempDB(t *testing.T) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "c.db")
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reported is what main would print for err, and its exit status.
func reported(err error) (string, int) {
	var b bytes.Buffer
	code := report(&b, err)
	return b.String(), code
}

// httpResult is a fully read HTTP response.
type httpResult struct {
	status int
	header http.Header
	body   []byte
}

func (r httpResult) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// call sends one request to the API with the agent key.
func call(t *testing.T, method, url, key, body string, header map[string]string) httpResult {
	t.Helper()
	r, err := send(t, method, url, key, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is call for goroutines other than the test's, which may not stop it.
func send(t testing.TB, method, url, key, body string, header map[string]string) (httpResult, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return httpResult{}, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := apitest.Client(t).Do(req)
	if err != nil {
		return httpResult{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{}, fmt.Errorf("%s %s: reading body: %w", method, url, err)
	}
	return httpResult{resp.StatusCode, resp.Header, b}, nil
}

// banner holds what countersign serve --demo printed.
type banner struct {
	url, reviewerPassword, adminPassword, agentKey string
}

var (
	bannerURL      = regexp.MustCompile(`countersign serving on (http://\S+)`)
	bannerReviewer = regexp.MustCompile(`reviewer\s+alice / (\S+)`)
	bannerAdmin    = regexp.MustCompile(`admin\s+admin / (\S+)`)
	bannerAgentKey = regexp.MustCompile(`agent key (csk_\S+)`)
)

func parseBanner(out string) (banner, bool) {
	var b banner
	for _, m := range []struct {
		re  *regexp.Regexp
		dst *string
	}{{bannerURL, &b.url}, {bannerReviewer, &b.reviewerPassword}, {bannerAdmin, &b.adminPassword}, {bannerAgentKey, &b.agentKey}} {
		sub := m.re.FindStringSubmatch(out)
		if sub == nil {
			return b, false
		}
		*m.dst = sub[1]
	}
	return b, true
}

// startServer runs "countersign serve" with args until the test ends, waits
// until it answers /healthz and returns what it printed and a function that
// stops it and returns serve's error.
func startServer(t *testing.T, env map[string]string, demo bool, args ...string) (banner, *syncBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), envOf(env), strings.NewReader(""), stdout, stderr)
	}()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			return errors.New("serve did not return within 20s of its context ending")
		}
	}
	t.Cleanup(func() { _ = stop() })

	waitFor(t, 30*time.Second, "the server's banner", func() bool {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("serve returned early: %v\nstderr:\n%s", err, stderr.String())
		default:
		}
		out := stdout.String()
		return bannerURL.MatchString(out) && (!demo || bannerAgentKey.MatchString(out))
	})
	var b banner
	if demo {
		var ok bool
		if b, ok = parseBanner(stdout.String()); !ok {
			t.Fatalf("cannot read the demo credentials from:\n%s", stdout.String())
		}
	} else {
		b.url = bannerURL.FindStringSubmatch(stdout.String())[1]
	}
	waitFor(t, 10*time.Second, "/healthz", func() bool {
		resp, err := apitest.Client(t).Get(b.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return b, stderr, stop
}

// TestServeDemoWalkthrough is the agent's whole journey over real HTTP
// against "countersign serve --demo", with the reviewer deciding through
// "countersign review approve" in between.
func TestServeDemoWalkthrough(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	env := map[string]string{}
	srv, serverLog, stop := startServer(t, env, true, "--demo", "--addr", "127.0.0.1:0", "--db", db)
	if strings.HasSuffix(srv.url, ":0") {
		t.Fatalf("printed URL %s does not name the real port", srv.url)
	}
	key := srv.agentKey
	proposals := srv.url + "/api/v1/proposals"

	// Propose a refund.
	r := call(t, "POST", proposals, key, `{"tool":"refund_order",
		"arguments":{"order_id":"ord_1001","amount_minor":19900,"currency":"CNY","reason":"parcel lost"},
		"context":"customer reported the parcel lost"}`, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("propose: status %d, want 201: %s", r.status, r.body)
	}
	p := r.json(t)
	id, _ := p["id"].(string)
	if got, want := p["status"], "awaiting_confirmation"; got != want {
		t.Fatalf("status = %v, want %v", got, want)
	}
	digest, _ := p["args_digest"].(string)

	// Read it back, then conditionally.
	r = call(t, "GET", proposals+"/"+id, key, "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("get: status %d: %s", r.status, r.body)
	}
	etag := r.header.Get("ETag")
	if etag == "" {
		t.Fatal("get: no ETag")
	}
	r = call(t, "GET", proposals+"/"+id, key, "", map[string]string{"If-None-Match": etag})
	if r.status != http.StatusNotModified {
		t.Fatalf("get If-None-Match: status %d, want 304", r.status)
	}

	// Long-poll for the decision while the reviewer decides.
	type pollResult struct {
		r   httpResult
		err error
	}
	polled := make(chan pollResult, 1)
	pollStart := time.Now()
	go func() {
		r, err := send(t, "GET", proposals+"/"+id+"?wait=30", key, "", map[string]string{"If-None-Match": etag})
		polled <- pollResult{r, err}
	}()

	select {
	case pr := <-polled:
		t.Fatalf("the long-poll returned before anything changed: %+v", pr)
	default:
	}
	rev := mustExec(t, nil, srv.reviewerPassword+"\n", "review", "approve", id, "--tenant", "demo", "--user", "alice", "--db", db,
		"--comment", "Carrier confirmed the loss")
	if got, want := rev.stdout, "confirmed\n"; got != want {
		t.Errorf("review approve stdout = %q, want %q", got, want)
	}
	for _, want := range []string{"Amount: ¥199.00  [19900]", "Order: ord_1001 · ", `["ord_1001"]`, digest, "risk tier:     low", "expires at:"} {
		if !strings.Contains(rev.stderr, want) {
			t.Errorf("review approve did not show %q; stderr:\n%s", want, rev.stderr)
		}
	}

	var poll httpResult
	select {
	case pr := <-polled:
		if pr.err != nil {
			t.Fatalf("long-poll: %v", pr.err)
		}
		poll = pr.r
	case <-time.After(20 * time.Second):
		t.Fatal("the long-poll did not return within 20s of the approval")
	}
	if took := time.Since(pollStart); took > 15*time.Second {
		t.Errorf("the long-poll took %s; it should return as soon as the status changes", took)
	}
	if poll.status != http.StatusOK {
		t.Fatalf("long-poll: status %d, want 200: %s", poll.status, poll.body)
	}
	p = poll.json(t)
	if got, want := p["status"], "confirmed"; got != want {
		t.Fatalf("long-poll status = %v, want %v", got, want)
	}
	// The reviewer's comment from the terminal reaches the agent.
	if !strings.Contains(string(poll.body), `"reason":"Carrier confirmed the loss"`) {
		t.Errorf("the agent does not see the approval's comment: %s", poll.body)
	}
	tok, _ := p["confirmation_token"].(string)
	if tok == "" {
		t.Fatalf("long-poll: no confirmation_token: %s", poll.body)
	}

	// Execute once.
	exe := call(t, "POST", srv.url+"/api/v1/executions", key, fmt.Sprintf(`{"proposal_id":%q,"token":%q}`, id, tok), nil)
	if exe.status != http.StatusOK {
		t.Fatalf("execute: status %d, want 200: %s", exe.status, exe.body)
	}
	e := exe.json(t)
	execID, _ := e["execution_id"].(string)
	if got, want := e["status"], "succeeded"; got != want {
		t.Errorf("execution status = %v, want %v", got, want)
	}
	receipt, _ := e["receipt"].(map[string]any)
	if receipt == nil || receipt["execution_id"] != execID || receipt["status"] != "succeeded" ||
		receipt["args_digest"] != digest || receipt["provider_ref"] == "" || receipt["completed_at"] == nil {
		t.Errorf("receipt = %v; want the execution's id, status succeeded, the digest, a provider_ref and completed_at", receipt)
	}

	// Execute again: refused, with the original execution.
	again := call(t, "POST", srv.url+"/api/v1/executions", key, fmt.Sprintf(`{"proposal_id":%q,"token":%q}`, id, tok), nil)
	if again.status != http.StatusConflict {
		t.Fatalf("second execute: status %d, want 409: %s", again.status, again.body)
	}
	errBody, _ := again.json(t)["error"].(map[string]any)
	details, _ := errBody["details"].(map[string]any)
	if errBody["code"] != "already_consumed" || details["execution_id"] != execID {
		t.Errorf("second execute: %s; want already_consumed with execution_id %s", again.body, execID)
	}

	// The proposal tells the whole story.
	r = call(t, "GET", proposals+"/"+id, key, "", nil)
	p = r.json(t)
	if p["status"] != "succeeded" || p["execution"] == nil || p["receipt"] == nil {
		t.Errorf("final proposal: status %v, execution %v, receipt %v", p["status"], p["execution"], p["receipt"])
	}
	if _, ok := p["confirmation_token"]; ok {
		t.Error("a consumed token is still shown")
	}

	// One signing key, and it verifies the token.
	r = call(t, "GET", srv.url+"/.well-known/jwks.json", "", "", nil)
	var jwks struct {
		Keys []struct {
			Kty, Crv, Kid, Alg, X string
		} `json:"keys"`
	}
	if err := json.Unmarshal(r.body, &jwks); err != nil {
		t.Fatalf("JWKS %s: %v", r.body, err)
	}
	if len(jwks.Keys) != 1 {
		t.Fatalf("JWKS has %d keys, want 1: %s", len(jwks.Keys), r.body)
	}
	verifyToken(t, tok, jwks.Keys[0].Kid, jwks.Keys[0].X, id, digest)

	if err := stop(); err != nil {
		t.Fatalf("serve returned %v after its context ended; want nil\nlog:\n%s", err, serverLog.String())
	}
}

// verifyToken checks a confirmation token the way a downstream system
// would: EdDSA signature with the JWKS key, then the claims.
func verifyToken(t *testing.T, tok, kid, x, proposalID, digest string) {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a compact JWS", tok)
	}
	dec := base64.RawURLEncoding
	hdr, err1 := dec.DecodeString(parts[0])
	payload, err2 := dec.DecodeString(parts[1])
	sig, err3 := dec.DecodeString(parts[2])
	pub, err4 := dec.DecodeString(x)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		t.Fatalf("token or key is not base64url: %v", err)
	}
	var h struct{ Alg, Kid, Typ string }
	if err := json.Unmarshal(hdr, &h); err != nil {
		t.Fatal(err)
	}
	if h.Alg != "EdDSA" || h.Kid != kid {
		t.Errorf("token header %s; want alg EdDSA and kid %s", hdr, kid)
	}
	if !ed25519.Verify(ed25519.PublicKey(pub), []byte(parts[0]+"."+parts[1]), sig) {
		t.Error("the token's signature does not verify with the JWKS key")
	}
	var c models.Claims
	if err := json.Unmarshal(payload, &c); err != nil {
		t.Fatal(err)
	}
	if c.ProposalID != proposalID || c.ArgsDigest != digest || c.Operation != "refund_order" || c.Resource != "ord_1001" ||
		c.Audience != defaultAudience || c.Issuer != defaultIssuer || len(c.Approvers) != 1 || strings.Join(c.AMR, ",") != "pwd" {
		t.Errorf("token claims %s do not bind the approved write", payload)
	}
}

// demoFixture is a migrated, seeded database with proposals to decide.
type demoFixture struct {
	db    string
	creds app.DemoCredentials
	a     *app.App
	agent models.Agent
}

func newDemoFixture(t *testing.T) *demoFixture {
	t.Helper()
	ctx := context.Background()
	db := tempDB(t)
	a, err := app.Open(ctx, app.Config{DB: db, PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := a.Protocol.AuthenticateAgent(ctx, creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	return &demoFixture{db: db, creds: creds, a: a, agent: agent}
}

// refund proposes a refund and returns its id.
func (f *demoFixture) refund(t *testing.T, order string, amount int) string {
	t.Helper()
	args := fmt.Sprintf(`{"order_id":%q,"amount_minor":%d,"currency":"CNY","reason":"test"}`, order, amount)
	p, _, err := f.a.Protocol.Propose(context.Background(), f.agent, writes.ProposeInput{Tool: "refund_order", Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
}

func (f *demoFixture) status(t *testing.T, id string) models.Status {
	t.Helper()
	p, err := f.a.Protocol.Get(context.Background(), f.agent.TenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	return p.Status
}

func TestReview(t *testing.T) {
	t.Parallel()
	f := newDemoFixture(t)
	alice := f.creds.ReviewerPassword + "\n"
	review := func(stdin string, args ...string) result {
		return invoke(t, nil, stdin, append(append([]string{"review"}, args...), "--db", f.db, "--tenant", "demo")...)
	}

	t.Run("wrong password and unknown user get the same answer", func(t *testing.T) {
		t.Parallel()
		id := f.refund(t, "ord_1002", 100)
		for _, tc := range []struct{ user, stdin string }{
			{"alice", "not-alices-password\n"},
			{"mallory", alice},
		} {
			r := review(tc.stdin, "approve", id, "--user", tc.user)
			out, code := reported(r.err)
			if got, want := out, "error: unauthenticated: wrong user or password\n"; got != want || code != exitError {
				t.Errorf("user %s: reported %q (exit %d), want %q (exit 1)", tc.user, got, code, want)
			}
			if r.stdout != "" {
				t.Errorf("user %s: stdout %q, want nothing", tc.user, r.stdout)
			}
		}
		if r := review("", "approve", id, "--user", "alice"); !models.IsCode(r.err, models.EUnauthenticated) {
			t.Errorf("empty stdin: err %v, want unauthenticated", r.err)
		}
		if got, want := f.status(t, id), models.StatusAwaitingConfirmation; got != want {
			t.Errorf("status after refused approvals = %s, want %s", got, want)
		}
	})

	t.Run("decline needs a reason", func(t *testing.T) {
		t.Parallel()
		id := f.refund(t, "ord_1003", 100)
		for _, extra := range [][]string{nil, {"--reason", "   "}} {
			r := review(alice, append([]string{"decline", id, "--user", "alice"}, extra...)...)
			if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "--reason") {
				t.Errorf("decline %v: err %v (exit %d), want a usage error about --reason", extra, r.err, code)
			}
		}
		if got, want := f.status(t, id), models.StatusAwaitingConfirmation; got != want {
			t.Fatalf("status = %s, want %s", got, want)
		}
		r := review(alice, "decline", id, "--user", "alice", "--reason", "refund the shipping only")
		if r.err != nil {
			t.Fatalf("decline: %v\n%s", r.err, r.stderr)
		}
		if got, want := r.stdout, "declined\n"; got != want {
			t.Errorf("stdout = %q, want %q", got, want)
		}
		p, err := f.a.Protocol.Get(context.Background(), f.agent.TenantID, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Decisions) != 1 || p.Decisions[0].Reason != "refund the shipping only" || p.Decisions[0].DigestSeen != p.ArgsDigest {
			t.Errorf("decisions = %+v; want one decline with the reason, bound to the digest", p.Decisions)
		}
	})

	t.Run("security-key tiers are refused", func(t *testing.T) {
		t.Parallel()
		id := f.refund(t, "ord_2001", 50000) // tier high: webauthn
		r := review(alice, "approve", id, "--user", "alice")
		if !models.IsCode(r.err, models.EStepUpRequired) {
			t.Fatalf("err = %v, want step_up_required", r.err)
		}
		if !strings.Contains(r.stderr, "security-key") {
			t.Errorf("stderr does not explain the refusal:\n%s", r.stderr)
		}
		if got, want := f.status(t, id), models.StatusAwaitingConfirmation; got != want {
			t.Errorf("status = %s, want %s", got, want)
		}
	})

	t.Run("list and show", func(t *testing.T) {
		t.Parallel()
		id := f.refund(t, "ord_1004", 100)
		r := review(alice, "list", "--user", "alice")
		if r.err != nil || !strings.Contains(r.stdout, id) || !strings.HasPrefix(r.stdout, "ID ") {
			t.Errorf("list: err %v, stdout:\n%s", r.err, r.stdout)
		}
		r = review(alice, "show", id, "--user", "alice")
		if r.err != nil || !strings.Contains(r.stdout, "Amount: ¥1.00  [100]") {
			t.Errorf("show: err %v, stdout:\n%s", r.err, r.stdout)
		}
	})

	t.Run("approve, then only an administrator revokes", func(t *testing.T) {
		t.Parallel()
		id := f.refund(t, "ord_1005", 100)
		r := review(alice, "approve", id, "--user", "alice")
		if r.err != nil || r.stdout != "confirmed\n" {
			t.Fatalf("approve: err %v, stdout %q\n%s", r.err, r.stdout, r.stderr)
		}
		r = invoke(t, nil, alice, "revoke", id, "--tenant", "demo", "--user", "alice", "--db", f.db)
		if !models.IsCode(r.err, models.EForbidden) {
			t.Errorf("revoke by a reviewer: err %v, want forbidden", r.err)
		}
		r = invoke(t, nil, f.creds.AdminPassword+"\n", "revoke", id, "--tenant", "demo", "--user", "admin", "--db", f.db)
		if r.err != nil || r.stdout != "revoked\n" {
			t.Fatalf("revoke by the admin: err %v, stdout %q", r.err, r.stdout)
		}
		if got, want := f.status(t, id), models.StatusRevoked; got != want {
			t.Errorf("status = %s, want %s", got, want)
		}
	})

	t.Run("disabled users are refused", func(t *testing.T) {
		t.Parallel()
		mustExec(t, nil, "dave's long password\n", "user", "create", "--tenant", "demo", "--name", "dave", "--db", f.db)
		sqlDB, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(f.db, "sqlite://")+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer sqlDB.Close()
		if _, err := sqlDB.Exec(`UPDATE users SET disabled = true WHERE name = 'dave'`); err != nil {
			t.Fatal(err)
		}
		id := f.refund(t, "ord_1008", 100)
		r := review("dave's long password\n", "approve", id, "--user", "dave")
		if !models.IsCode(r.err, models.EForbidden) || !strings.Contains(r.err.Error(), "disabled") {
			t.Errorf("err = %v, want forbidden: disabled", r.err)
		}
		if got, want := f.status(t, id), models.StatusAwaitingConfirmation; got != want {
			t.Errorf("status = %s, want %s", got, want)
		}
	})

	t.Run("agent-supplied text cannot drive the terminal", func(t *testing.T) {
		t.Parallel()
		args := `{"order_id":"ord_1006","amount_minor":100,"currency":"CNY","reason":"ok\u001b[2K\rAmount: ¥0.01 \u202etxt"}`
		p, _, err := f.a.Protocol.Propose(context.Background(), f.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: json.RawMessage(args), Context: "line one\ndigest: sha256:forged"})
		if err != nil {
			t.Fatal(err)
		}
		r := review(alice, "show", p.ID, "--user", "alice")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if strings.ContainsAny(r.stdout, "\x1b\r\u202e") {
			t.Errorf("control characters reached the terminal: %q", r.stdout)
		}
		if !strings.Contains(r.stdout, `ok⟨U+001B⟩[2K⟨U+000D⟩Amount`) || !strings.Contains(r.stdout, "    | digest: sha256:forged") {
			t.Errorf("escaped text not shown as expected:\n%s", r.stdout)
		}
	})

	t.Run("invisible and direction-changing characters are shown as escapes, with a warning", func(t *testing.T) {
		t.Parallel()
		reason := "Refund of \u202e00.991¥\u202c ord\u200b_1001 cafe\u0301"
		args, _ := json.Marshal(map[string]any{"order_id": "ord_1009", "amount_minor": 100, "currency": "CNY", "reason": reason})
		p, _, err := f.a.Protocol.Propose(context.Background(), f.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: args, Context: "see\u2066 attached"})
		if err != nil {
			t.Fatal(err)
		}
		r := review(alice, "show", p.ID, "--user", "alice")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if strings.ContainsAny(r.stdout, "\u202e\u202c\u200b\u0301\u2066") {
			t.Errorf("hidden code points reached the terminal: %q", r.stdout)
		}
		// The console shows the same escapes: one rule for both.
		shown := visible.Reveal(reason, visible.Strict).Shown
		for _, want := range []string{shown, "see⟨U+2066⟩ attached", "WARNING:", "direction control", "U+200B", "non-NFC"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("review show lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	t.Run("a hidden character JSON writes as an escape is shown as one in the machine value", func(t *testing.T) {
		t.Parallel()
		args, _ := json.Marshal(map[string]any{"order_id": "ord_1010", "amount_minor": 100, "currency": "CNY", "reason": "late\u0007"})
		p, _, err := f.a.Protocol.Propose(context.Background(), f.agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		r := review(alice, "show", p.ID, "--user", "alice")
		if r.err != nil {
			t.Fatal(r.err)
		}
		// The console shows the machine value by the same rule.
		if want := `["late⟨U+0007⟩"]`; !strings.Contains(r.stdout, `[`+visible.RevealJSON(`"late\u0007"`, visible.Strict).Shown+`]`) ||
			!strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "WARNING:") {
			t.Errorf("review show lacks %s and a warning:\n%s", want, r.stdout)
		}
	})
}

func TestTenantUserAgentCreate(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	tenantID := strings.TrimSpace(mustExec(t, nil, "", "tenant", "create", "acme", "--db", db).stdout)
	if !strings.HasPrefix(tenantID, "ten_") {
		t.Fatalf("tenant create printed %q, want a tenant id", tenantID)
	}
	userID := strings.TrimSpace(mustExec(t, nil, "correct horse battery\n", "user", "create", "--tenant", "acme", "--name", "bob", "--role", "admin", "--db", db).stdout)
	if !strings.HasPrefix(userID, "usr_") {
		t.Fatalf("user create printed %q, want a user id", userID)
	}
	r := mustExec(t, nil, "", "agent", "create", "--tenant", "acme", "--name", "support-bot", "--owner", "bob", "--db", db)
	if !regexp.MustCompile(`^csk_[A-Za-z0-9_-]{43}\n$`).MatchString(r.stdout) {
		t.Fatalf("agent create stdout = %q, want the key alone on one line", r.stdout)
	}
	key := strings.TrimSuffix(r.stdout, "\n")
	if strings.Contains(r.stderr, key) {
		t.Error("the key also went to stderr")
	}

	ctx := context.Background()
	a, err := app.Open(ctx, app.Config{DB: db, PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	agent, err := a.Protocol.AuthenticateAgent(ctx, key)
	if err != nil {
		t.Fatalf("the printed key does not authenticate: %v", err)
	}
	if agent.Name != "support-bot" || agent.TenantID != tenantID || agent.OwnerUserID != userID {
		t.Errorf("agent = %+v; want support-bot of %s owned by %s", agent, tenantID, userID)
	}
	if agent.ReadAll {
		t.Error("an agent reads the tenant's proposals without --read-all")
	}
	reader := strings.TrimSpace(mustExec(t, nil, "", "agent", "create", "--tenant", "acme", "--name", "auditor", "--read-all", "--db", db).stdout)
	if got, err := a.Protocol.AuthenticateAgent(ctx, reader); err != nil || !got.ReadAll {
		t.Errorf("agent created with --read-all: %+v %v", got, err)
	}
	mustExec(t, nil, "", "agent", "read-all", "--tenant", "acme", "--name", "auditor", "--withdraw", "--db", db)
	if got, err := a.Protocol.AuthenticateAgent(ctx, reader); err != nil || got.ReadAll {
		t.Errorf("after --withdraw: %+v %v", got, err)
	}
	mustExec(t, nil, "", "agent", "read-all", "--tenant", "acme", "--name", "support-bot", "--db", db)
	if got, err := a.Protocol.AuthenticateAgent(ctx, key); err != nil || !got.ReadAll {
		t.Errorf("after agent read-all: %+v %v", got, err)
	}
	if r := invoke(t, nil, "", "agent", "read-all", "--tenant", "acme", "--name", "nobody", "--db", db); !models.IsCode(r.err, models.ENotFound) {
		t.Errorf("unknown agent: %v", r.err)
	}
	u, hash, err := a.Store.UserCredentials(ctx, tenantID, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if u.Role != models.RoleAdmin || !secret.VerifyPassword(hash, "correct horse battery") {
		t.Errorf("user bob: role %s, password stored correctly: %v", u.Role, secret.VerifyPassword(hash, "correct horse battery"))
	}

	t.Run("empty and short passwords are refused", func(t *testing.T) {
		for _, stdin := range []string{"", "\n", "short\n"} {
			r := invoke(t, nil, stdin, "user", "create", "--tenant", "acme", "--name", "carol", "--db", db)
			if !errors.Is(r.err, secret.ErrPasswordLength) {
				t.Errorf("stdin %q: err %v, want %v", stdin, r.err, secret.ErrPasswordLength)
			}
		}
		if _, _, err := a.Store.UserCredentials(ctx, tenantID, "carol"); !models.IsCode(err, models.ENotFound) {
			t.Errorf("carol was created anyway (err %v)", err)
		}
	})

	t.Run("duplicate tenant", func(t *testing.T) {
		r := invoke(t, nil, "", "tenant", "create", "acme", "--db", db)
		if !models.IsCode(r.err, models.EAlreadyExists) {
			t.Fatalf("err = %v, want already_exists", r.err)
		}
		out, code := reported(r.err)
		if want := "error: already_exists: tenant \"acme\" already exists\n"; out != want || code != exitError {
			t.Errorf("reported %q (exit %d), want %q (exit 1)", out, code, want)
		}
	})

	t.Run("unknown owner and tenant", func(t *testing.T) {
		r := invoke(t, nil, "", "agent", "create", "--tenant", "acme", "--name", "x", "--owner", "nobody", "--db", db)
		if !models.IsCode(r.err, models.ENotFound) || r.stdout != "" {
			t.Errorf("unknown owner: err %v, stdout %q", r.err, r.stdout)
		}
		r = invoke(t, nil, "", "agent", "create", "--tenant", "nope", "--name", "x", "--db", db)
		if !models.IsCode(r.err, models.ENotFound) || r.stdout != "" {
			t.Errorf("unknown tenant: err %v, stdout %q", r.err, r.stdout)
		}
	})
}

func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	first := mustExec(t, nil, "", "migrate", "--db", db)
	if !regexp.MustCompile(`^(applied \d+\n)+$`).MatchString(first.stdout) {
		t.Errorf("first migrate printed %q, want the versions applied", first.stdout)
	}
	if got, want := mustExec(t, nil, "", "migrate", "--db", db).stdout, "up to date\n"; got != want {
		t.Errorf("second migrate printed %q, want %q", got, want)
	}
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	envDB := "sqlite://" + filepath.Join(dir, "env.db")
	flagDB := "sqlite://" + filepath.Join(dir, "flag.db")

	t.Run("the variable is used when the flag is absent", func(t *testing.T) {
		mustExec(t, map[string]string{"COUNTERSIGN_DB": envDB}, "", "tenant", "create", "from-env")
		r := invoke(t, nil, "", "tenant", "create", "from-env", "--db", envDB)
		if !models.IsCode(r.err, models.EAlreadyExists) {
			t.Errorf("the tenant is not in %s (err %v)", envDB, r.err)
		}
	})
	t.Run("the flag wins over the variable", func(t *testing.T) {
		env := map[string]string{"COUNTERSIGN_DB": "sqlite://" + filepath.Join(dir, "never.db")}
		mustExec(t, env, "", "tenant", "create", "from-flag", "--db", flagDB)
		if _, err := os.Stat(filepath.Join(dir, "never.db")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the database named by the variable was opened (stat: %v)", err)
		}
		r := invoke(t, nil, "", "tenant", "create", "from-flag", "--db", flagDB)
		if !models.IsCode(r.err, models.EAlreadyExists) {
			t.Errorf("the tenant is not in %s (err %v)", flagDB, r.err)
		}
	})
	t.Run("a bad value in the environment is a usage error", func(t *testing.T) {
		r := invoke(t, map[string]string{"COUNTERSIGN_DEMO": "perhaps"}, "", "serve", "--db", flagDB)
		if _, code := reported(r.err); code != exitUsage || !strings.Contains(r.err.Error(), "COUNTERSIGN_DEMO") {
			t.Errorf("err %v (exit %d), want a usage error naming COUNTERSIGN_DEMO", r.err, code)
		}
	})
}

func TestKeysRotate(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	ctx := context.Background()
	a, err := app.Open(ctx, app.Config{DB: db, PasswordHash: cheapPasswordHash}) // creates the first key
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	kid := strings.TrimSpace(mustExec(t, nil, "", "keys", "rotate", "--db", db).stdout)
	if !strings.HasPrefix(kid, "k_") {
		t.Fatalf("keys rotate printed %q, want a key id", kid)
	}
	jwks, err := a.Protocol.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var set struct{ Keys []struct{ Kid string } }
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0].Kid != kid {
		t.Errorf("JWKS = %s; want two keys, the new %s first", jwks, kid)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"frobnicate"},
		{"tenant"},
		{"tenant", "delete", "x"},
		{"tenant", "create"},
		{"tenant", "create", "a", "b"},
		{"tenant", "create", "a", "--nope"},
		{"user", "create", "--tenant", "t"},
		{"user", "create", "--tenant", "t", "--name", "n", "--role", "owner"},
		{"review", "approve", "--tenant", "t", "--user", "u"},
		{"serve", "extra"},
		{"serve", "--base-url", "ftp://x"},
		{"version", "x"},
	} {
		r := invoke(t, nil, "", args...)
		out, code := reported(r.err)
		if code != exitUsage {
			t.Errorf("%q: err %v (exit %d), want a usage error (exit 2)", args, r.err, code)
			continue
		}
		if !strings.HasPrefix(out, "error: ") || strings.Contains(out, "goroutine") {
			t.Errorf("%q: reported %q", args, out)
		}
	}

	r := mustExec(t, nil, "", "serve", "-h")
	for _, want := range []string{"--addr", "COUNTERSIGN_ADDR", "--db", "COUNTERSIGN_DB", "COUNTERSIGN_BASE_URL", "default 127.0.0.1:8080"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve -h does not mention %q:\n%s", want, r.stdout)
		}
	}
	r = mustExec(t, nil, "", "help")
	if !strings.Contains(r.stdout, "countersign review approve") {
		t.Errorf("help:\n%s", r.stdout)
	}
	r = mustExec(t, nil, "", "help", "review", "approve")
	if !strings.Contains(r.stdout, "step_up_required") {
		t.Errorf("help review approve does not explain the security-key limit:\n%s", r.stdout)
	}
	r = mustExec(t, nil, "", "version")
	if !strings.HasPrefix(r.stdout, "countersign ") {
		t.Errorf("version printed %q", r.stdout)
	}
}

func TestReport(t *testing.T) {
	t.Parallel()
	err := &models.Error{Code: models.ESchemaViolation, Message: "arguments do not match",
		Fields: []models.FieldProblem{{Pointer: "/amount_minor", Message: "got string, want integer"}, {Message: "order is closed"}}}
	out, code := reported(fmt.Errorf("context: %w", err))
	want := "error: schema_violation: arguments do not match\n  /amount_minor: got string, want integer\n  - order is closed\n"
	if out != want || code != exitError {
		t.Errorf("reported %q (exit %d), want %q (exit 1)", out, code, want)
	}
	out, code = reported(models.Wrap(models.EUnavailable, errors.New("dial tcp: refused"), "cannot reach the database"))
	if want := "error: unavailable: cannot reach the database\n  cause: dial tcp: refused\n"; out != want || code != exitError {
		t.Errorf("reported %q (exit %d), want %q", out, code, want)
	}
	// Errors the domain gave no code still print one, for scripts to match.
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("open x.jsonl: %w", fs.ErrNotExist), "error: not_found: open x.jsonl: file does not exist\n"},
		{fmt.Errorf("backup: %w", fs.ErrExist), "error: already_exists: backup: file already exists\n"},
		{errors.New("password must be 8 to 1024 bytes long"), "error: invalid_request: password must be 8 to 1024 bytes long\n"},
		{&store.KeyError{What: "token signing key", ID: "k_1", Err: errors.New("altered")}, "error: unauthenticated: token signing key k_1: altered\n"},
		{models.Wrap(models.EInternal, &store.KeyError{What: "token signing key", ID: "k_1", Err: errors.New("altered")}, "database error"),
			"error: unauthenticated: token signing key k_1: altered\n"},
	} {
		if out, code := reported(c.err); out != c.want || code != exitError {
			t.Errorf("reported %q (exit %d), want %q", out, code, c.want)
		}
	}
	if out, code := reported(nil); out != "" || code != exitOK {
		t.Errorf("nil: reported %q (exit %d)", out, code)
	}
}

func TestServeWithoutDemo(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	srv, _, stop := startServer(t, map[string]string{"COUNTERSIGN_ADDR": "127.0.0.1:0"}, false, "--db", db)
	r := call(t, "GET", srv.url+"/api/v1/proposals", "csk_nope", "", nil)
	if r.status != http.StatusUnauthorized {
		t.Errorf("unknown key: status %d, want 401", r.status)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	// Nothing was seeded.
	r2 := invoke(t, nil, "", "tenant", "create", "demo", "--db", db)
	if r2.err != nil {
		t.Errorf("tenant demo exists without --demo: %v", r2.err)
	}
}

// TestTwoServersOnPostgres runs two servers on one PostgreSQL database: a
// proposal made on one is approved from the terminal, executed on the
// other, and a second redemption on the first is refused.
func TestTwoServersOnPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.DSN(t)
	a, _, stopA := startServer(t, nil, true, "--demo", "--addr", "127.0.0.1:0", "--db", db)
	// Only one server seeds: seeding replaces the demo credentials.
	b, _, stopB := startServer(t, nil, false, "--addr", "127.0.0.1:0", "--db", db)
	key := a.agentKey

	r := call(t, "POST", a.url+"/api/v1/proposals", key,
		`{"tool":"refund_order","arguments":{"order_id":"ord_1007","amount_minor":5000,"currency":"CNY","reason":"late"}}`, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("propose on A: status %d: %s", r.status, r.body)
	}
	id, _ := r.json(t)["id"].(string)
	mustExec(t, nil, a.reviewerPassword+"\n", "review", "approve", id, "--tenant", "demo", "--user", "alice", "--db", db)

	r = call(t, "GET", b.url+"/api/v1/proposals/"+id, key, "", nil)
	tok, _ := r.json(t)["confirmation_token"].(string)
	if tok == "" {
		t.Fatalf("B does not show the confirmation token: %s", r.body)
	}
	body := fmt.Sprintf(`{"proposal_id":%q,"token":%q}`, id, tok)
	if r := call(t, "POST", b.url+"/api/v1/executions", key, body, nil); r.status != http.StatusOK {
		t.Fatalf("execute on B: status %d: %s", r.status, r.body)
	}
	r = call(t, "POST", a.url+"/api/v1/executions", key, body, nil)
	if code, _ := r.json(t)["error"].(map[string]any); r.status != http.StatusConflict || code["code"] != "already_consumed" {
		t.Fatalf("second execute on A: status %d: %s; want 409 already_consumed", r.status, r.body)
	}
	for name, stop := range map[string]func() error{"A": stopA, "B": stopB} {
		if err := stop(); err != nil {
			t.Errorf("server %s: %v", name, err)
		}
	}
}
