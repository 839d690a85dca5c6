package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/net/html"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
)

// hookReceiver is a webhook endpoint on 127.0.0.1 that records what it
// gets and answers with status().
type hookReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []http.Header
	bodies [][]byte
	status func() int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{status: func() int { return http.StatusOK }}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req.Header.Clone())
		r.bodies = append(r.bodies, b)
		code := r.status()
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) snapshot() ([]http.Header, [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.got...), append([][]byte(nil), r.bodies...)
}

func (r *hookReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func agentCall(t *testing.T, c *console, key, method, path, body string, header ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, c.srv.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// sseMessage is one message of an event stream.
type sseMessage struct{ ID, Event, Data string }

// openStream connects to GET /api/v1/events and delivers its messages on
// the returned channel until the test ends.
func openStream(t *testing.T, c *console, key, lastEventID string) (<-chan sseMessage, int) {
	t.Helper()
	return openStreamAt(t, c.srv.URL, key, lastEventID)
}

// openStreamAt is openStream on the server at base.
func openStreamAt(t *testing.T, base, key, lastEventID string) (<-chan sseMessage, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		cancel()
		return nil, res.StatusCode
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	ch := make(chan sseMessage, 100)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); res.Body.Close(); <-done })
	go func() {
		defer close(done)
		sc := bufio.NewScanner(res.Body)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.ID != "" || m.Event != "" {
					ch <- m
				}
				m = sseMessage{}
			case strings.HasPrefix(line, "id: "):
				m.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				m.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				m.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return ch, res.StatusCode
}

func next(t *testing.T, ch <-chan sseMessage) sseMessage {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return sseMessage{}
	}
}

// allowLoopbackHooks lets webhooks reach the tests' receivers on
// 127.0.0.1 (the server refuses loopback destinations otherwise).
func allowLoopbackHooks(cfg *app.Config) {
	cfg.WebhookAllow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
}

func TestAgentWebhooksAndEventStream(t *testing.T) {
	t.Parallel()
	c := openConsole(t, allowLoopbackHooks)
	ctx := context.Background()
	key := c.creds.AgentKey
	r := newHookReceiver(t)

	code, body := agentCall(t, c, key, "POST", "/api/v1/webhooks", `{"url":"ftp://127.0.0.1/x"}`)
	if code != http.StatusBadRequest {
		t.Fatalf("ftp endpoint: %d %s", code, body)
	}
	// Only the operator's ranges are reachable beyond public addresses:
	// the cloud's metadata service is not.
	code, body = agentCall(t, c, key, "POST", "/api/v1/webhooks", `{"url":"http://169.254.169.254/latest/meta-data/"}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"code":"invalid_request"`) || !strings.Contains(string(body), "link-local") {
		t.Fatalf("metadata service endpoint: %d %s", code, body)
	}
	code, body = agentCall(t, c, key, "POST", "/api/v1/webhooks", `{"url":"`+r.URL+`/hook","description":"mine"}`)
	if code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	var ep struct{ ID, URL, Scope, Secret string }
	_ = json.Unmarshal(body, &ep)
	if !strings.HasPrefix(ep.Secret, "whsec_") || ep.Scope != "agent" {
		t.Fatalf("registration answer %s", body)
	}
	code, body = agentCall(t, c, key, "GET", "/api/v1/webhooks", "")
	if code != http.StatusOK || !strings.Contains(string(body), ep.ID) || strings.Contains(string(body), "whsec_") {
		t.Fatalf("list: %d %s", code, body)
	}

	// Another agent of the tenant sees neither the endpoint nor the events.
	otherKey, hash, _ := secret.NewAPIKey()
	tenant, _ := c.app.Store.TenantByName(ctx, "demo")
	if _, err := c.app.Store.CreateAgent(ctx, tenant.ID, "other", "", hash); err != nil {
		t.Fatal(err)
	}
	if code, _ := agentCall(t, c, otherKey, "DELETE", "/api/v1/webhooks/"+ep.ID, ""); code != http.StatusNotFound {
		t.Fatalf("other agent deleted the endpoint: %d", code)
	}
	otherStream, _ := openStream(t, c, otherKey, "")

	stream, code := openStream(t, c, key, "")
	if code != http.StatusOK {
		t.Fatalf("stream: %d", code)
	}
	p := c.propose("ord_1001", 100)
	first := next(t, stream)
	second := next(t, stream)
	if first.Event != "proposal.created" || second.Event != "proposal.awaiting_confirmation" {
		t.Fatalf("stream sent %+v then %+v", first, second)
	}
	var data events.EventData
	if err := json.Unmarshal([]byte(second.Data), &data); err != nil || data.ProposalID != p.ID || data.EventID != second.ID || data.Status != "awaiting_confirmation" {
		t.Fatalf("event data %s (%v)", second.Data, err)
	}
	agent, _ := c.app.Protocol.AuthenticateAgent(ctx, key)
	if _, err := c.app.Protocol.Cancel(ctx, agent, p.ID); err != nil {
		t.Fatal(err)
	}
	if m := next(t, stream); m.Event != "proposal.cancelled" {
		t.Fatalf("then %+v", m)
	}
	select {
	case m := <-otherStream:
		t.Fatalf("another agent's stream got %+v", m)
	default:
	}

	// A new stream starts with what happens next, not with the past
	// (the server clock here is fixed months before the event ids).
	fresh, _ := openStream(t, c, key, "")
	later := c.propose("ord_1003", 100)
	if m := next(t, fresh); m.Event != "proposal.created" || !strings.Contains(m.Data, later.ID) {
		t.Fatalf("a new stream began with %+v", m)
	}

	// Reconnecting with Last-Event-ID resumes right after that event.
	resumed, code := openStream(t, c, key, first.ID)
	if code != http.StatusOK {
		t.Fatalf("resume: %d", code)
	}
	if a, b := next(t, resumed), next(t, resumed); a.ID != second.ID || b.Event != "proposal.cancelled" {
		t.Fatalf("resumed with %+v, %+v", a, b)
	}
	if _, code := openStream(t, c, key, "evt_unknown"); code != http.StatusBadRequest {
		t.Errorf("unknown Last-Event-ID: %d", code)
	}
	if _, code := openStream(t, c, otherKey, first.ID); code != http.StatusBadRequest {
		t.Errorf("another agent resumed from this agent's event: %d", code)
	}

	// The webhooks of those five events, signed with the secret.
	for range 10 {
		if n, _ := c.app.Events.DispatchOnce(ctx); n == 0 {
			break
		}
	}
	if r.count() != 5 {
		t.Fatalf("receiver got %d messages, want 5", r.count())
	}
	got, bodies := r.snapshot()
	for i, h := range got {
		if err := events.Verify(ep.Secret, h, bodies[i], c.clock.Now(), 5*time.Minute); err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	if code, _ := agentCall(t, c, key, "DELETE", "/api/v1/webhooks/"+ep.ID, ""); code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	// A deleted endpoint leaves the list; asked for, it shows when.
	if code, body := agentCall(t, c, key, "GET", "/api/v1/webhooks", ""); code != http.StatusOK || strings.Contains(string(body), ep.ID) {
		t.Errorf("list after delete: %d %s", code, body)
	}
	if code, body := agentCall(t, c, key, "GET", "/api/v1/webhooks?include=disabled", ""); code != http.StatusOK ||
		!strings.Contains(string(body), ep.ID) || !strings.Contains(string(body), `"disabled_at":"`) {
		t.Errorf("list with disabled endpoints: %d %s", code, body)
	}
	if code, body := agentCall(t, c, key, "GET", "/api/v1/webhooks?include=everything", ""); code != http.StatusBadRequest || !strings.Contains(string(body), "invalid_request") {
		t.Errorf("list with a bad include: %d %s", code, body)
	}
	c.propose("ord_1002", 100)
	if n, _ := c.app.Events.DispatchOnce(ctx); n != 0 || r.count() != 5 {
		t.Errorf("a deleted endpoint still gets events (%d, %d)", n, r.count())
	}
	if code, _ := agentCall(t, c, "csk_nobody", "GET", "/api/v1/events", ""); code != http.StatusUnauthorized {
		t.Errorf("stream without a valid key: %d", code)
	}
}

func TestWebhookAdminPageAndRedeliver(t *testing.T) {
	t.Parallel()
	c := openConsole(t, allowLoopbackHooks)
	ctx := context.Background()
	r := newHookReceiver(t)
	fail := true
	r.status = func() int {
		if fail {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}

	alice := c.alice()
	if p := alice.get("/admin/webhooks"); p.status != http.StatusForbidden {
		t.Fatalf("a reviewer opened the webhook admin page: %d", p.status)
	}
	b := c.browser()
	b.mustLogin("demo", c.creds.Admin, c.creds.AdminPassword)
	p := b.get("/admin/webhooks")
	wantStatus(t, "webhooks page", p, http.StatusOK)
	if p := b.post("/admin/webhooks", url.Values{"url": {r.URL}}); p.status != http.StatusForbidden {
		t.Fatalf("create without CSRF: %d", p.status)
	}
	if p := b.postForm("/admin/webhooks", url.Values{"url": {"javascript:alert(1)"}}); p.status != http.StatusBadRequest || testid(p.doc, "form-error") == "" {
		t.Fatalf("javascript: URL: %d", p.status)
	}
	if p := b.postForm("/admin/webhooks", url.Values{"url": {"http://10.0.0.7/hook"}}); p.status != http.StatusBadRequest || !strings.Contains(testid(p.doc, "form-error"), "private") {
		t.Fatalf("a private address: %d %q", p.status, testid(p.doc, "form-error"))
	}
	p = b.postForm("/admin/webhooks", url.Values{"url": {r.URL}, "description": {"audit trail"}})
	wantStatus(t, "create", p, http.StatusOK)
	secretValue := ""
	if n := find(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "webhook-secret" }); n != nil {
		secretValue = attr(n, "value")
	}
	if !strings.HasPrefix(secretValue, "whsec_") || p.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("secret page: %q, Cache-Control %q", secretValue, p.header.Get("Cache-Control"))
	}

	c.propose("ord_1001", 100)
	if n, _ := c.app.Events.DispatchOnce(ctx); n != 2 {
		t.Fatalf("dispatched %d", n)
	}
	p = b.get("/admin/webhooks")
	rows := findAll(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "delivery-row" })
	if len(rows) != 2 || !strings.Contains(p.body, "500") {
		t.Fatalf("delivery log: %d rows", len(rows))
	}
	id := attr(rows[0], "data-delivery-id")
	if p := b.post("/admin/deliveries/"+id+"/redeliver", url.Values{}); p.status != http.StatusForbidden {
		t.Fatalf("redeliver without CSRF: %d", p.status)
	}
	r.mu.Lock()
	fail = false
	r.mu.Unlock()
	if p := b.postForm("/admin/deliveries/"+id+"/redeliver", nil); p.status != http.StatusSeeOther {
		t.Fatalf("redeliver: %d", p.status)
	}
	if n, _ := c.app.Events.DispatchOnce(ctx); n != 1 {
		t.Fatalf("redelivery dispatched %d", n)
	}
	got, bodies := r.snapshot()
	h := got[len(got)-1]
	if err := events.Verify(secretValue, h, bodies[len(bodies)-1], c.clock.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if h.Get("webhook-id") != attr(rows[0], "data-event-id") {
		t.Errorf("redelivery id %s, event %s", h.Get("webhook-id"), attr(rows[0], "data-event-id"))
	}
	p = b.get("/admin/deliveries/" + id)
	wantStatus(t, "delivery page", p, http.StatusOK)
	attempts := findAll(p.doc, func(n *html.Node) bool { return attr(n, "data-testid") == "attempt-row" })
	if len(attempts) != 2 || !strings.Contains(textOf(attempts[0]), "500") || !strings.Contains(textOf(attempts[1]), "200") {
		t.Errorf("attempt log: %d rows", len(attempts))
	}
	if !strings.Contains(testid(p.doc, "delivery-status"), "succeeded") {
		t.Errorf("status %q", testid(p.doc, "delivery-status"))
	}
	// Another tenant's administrator cannot redeliver it.
	c.user("globex", "gadmin", models.RoleAdmin, "globex-password-1")
	g := c.browser()
	g.mustLogin("globex", "gadmin", "globex-password-1")
	g.get("/admin/webhooks")
	if p := g.postForm("/admin/deliveries/"+id+"/redeliver", nil); p.status != http.StatusNotFound {
		t.Errorf("foreign redeliver: %d", p.status)
	}
	if p := g.get("/admin/deliveries/" + id); p.status != http.StatusNotFound {
		t.Errorf("foreign delivery page: %d", p.status)
	}
	if p := g.get("/admin/webhooks"); strings.Contains(p.body, id) || strings.Contains(p.body, r.URL) {
		t.Error("another tenant's admin page shows this tenant's deliveries or endpoints")
	}
}

// mailCatcher is an in-process SMTP server (emersion/go-smtp) that keeps
// every message.
type mailCatcher struct {
	mu   sync.Mutex
	msgs []caught
}

type caught struct {
	to   []string
	data string
}

type catcherSession struct {
	c   *mailCatcher
	cur caught
}

func (s *catcherSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *catcherSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.cur.to = append(s.cur.to, to)
	return nil
}
func (s *catcherSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	s.cur.data = string(b)
	s.c.mu.Lock()
	s.c.msgs = append(s.c.msgs, s.cur)
	s.c.mu.Unlock()
	return err
}
func (s *catcherSession) Reset()        { s.cur = caught{} }
func (s *catcherSession) Logout() error { return nil }

func startMailCatcher(t *testing.T) (*mailCatcher, string) {
	c := &mailCatcher{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &catcherSession{c: c}, nil }))
	srv.Domain = "mail.test"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return c, ln.Addr().String()
}

// The server as assembled by app.Open e-mails reviewers with a link to the
// console page, and a delivery pending at a restart goes out afterwards.
func TestServerNotifiesReviewersAndDeliversAfterRestart(t *testing.T) {
	t.Parallel()
	box, addr := startMailCatcher(t)
	c := openConsole(t, allowLoopbackHooks, func(cfg *app.Config) {
		cfg.BaseURL = "http://countersign.test"
		cfg.SMTP = events.SMTPConfig{Addr: addr, From: "countersign@example.com"}
	})
	ctx := context.Background()
	tenant, _ := c.app.Store.TenantByName(ctx, "demo")
	alice, _, err := c.app.Store.UserCredentials(ctx, tenant.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.app.Store.SetNotificationEmail(ctx, tenant.ID, alice.ID, "alice@example.com", c.clock.Now()); err != nil {
		t.Fatal(err)
	}
	r := newHookReceiver(t)
	code, body := agentCall(t, c, c.creds.AgentKey, "POST", "/api/v1/webhooks", `{"url":"`+r.URL+`"}`)
	if code != http.StatusCreated {
		t.Fatalf("register: %d %s", code, body)
	}
	p := c.propose("ord_1001", 100)

	// Stopped before anything was sent; a new process over the same
	// database sends it all.
	c.restart()
	for range 10 {
		if n, _ := c.app.Events.DispatchOnce(ctx); n == 0 {
			break
		}
	}
	if r.count() != 2 {
		t.Errorf("after the restart the receiver got %d webhooks, want 2", r.count())
	}
	box.mu.Lock()
	defer box.mu.Unlock()
	if len(box.msgs) != 1 || strings.Join(box.msgs[0].to, ",") != "alice@example.com" {
		t.Fatalf("mail: %+v", box.msgs)
	}
	m := box.msgs[0].data
	if !strings.Contains(m, "http://countersign.test/proposals/"+p.ID+"\r\n") || !strings.Contains(m, "refund_order") ||
		!strings.Contains(m, "tier low") {
		t.Errorf("message:\n%s", m)
	}
	if strings.Contains(m, "/approve") {
		t.Errorf("the message links to an approval:\n%s", m)
	}
}

func TestEventStreamSaysWhenItsResumePointWasPruned(t *testing.T) {
	t.Parallel()
	c := openConsole(t, func(cfg *app.Config) { cfg.OutboxRetention = 50 * time.Millisecond })
	key := c.creds.AgentKey
	stream, _ := openStream(t, c, key, "")
	c.propose("ord_1001", 100)
	first := next(t, stream)
	_ = next(t, stream)
	time.Sleep(60 * time.Millisecond)
	got, err := c.app.Events.Prune(context.Background())
	if err != nil || got.Events < 2 {
		t.Fatalf("pruned %+v (%v)", got, err)
	}
	later := c.propose("ord_1002", 100)

	// The agent was away while its last event was pruned: the stream says
	// so first, with no id (a reconnect resumes from the same point), then
	// goes on with what the outbox still holds.
	resumed, code := openStream(t, c, key, first.ID)
	if code != http.StatusOK {
		t.Fatalf("resume after a pruned event: %d", code)
	}
	m := next(t, resumed)
	var notice struct {
		Code        string `json:"code"`
		LastEventID string `json:"last_event_id"`
	}
	if err := json.Unmarshal([]byte(m.Data), &notice); err != nil || m.Event != "stream.pruned" || m.ID != "" ||
		notice.Code != "events_pruned" || notice.LastEventID != first.ID {
		t.Fatalf("first message %+v (%v)", m, err)
	}
	if m := next(t, resumed); m.Event != "proposal.created" || !strings.Contains(m.Data, later.ID) {
		t.Fatalf("then %+v", m)
	}
	if _, code := openStream(t, c, key, "evt_unknown"); code != http.StatusBadRequest {
		t.Errorf("an id that is no event's: %d", code)
	}
}
