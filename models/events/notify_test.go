package events_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/writes"
)

// mailbox is an in-process SMTP server that requires AUTH PLAIN and keeps
// every message it accepts.
type mailbox struct {
	mu   sync.Mutex
	msgs []mail
	addr string
}

type mail struct {
	From string
	To   []string
	Data string
	User string
	TLS  bool
}

type mailSession struct {
	box  *mailbox
	conn *smtp.Conn
	user string
	cur  mail
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "notifier" || pass != "s3cret" {
			return errors.New("bad credentials")
		}
		s.user = user
		return nil
	}), nil
}

func (s *mailSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.user == "" {
		return smtp.ErrAuthRequired
	}
	s.cur = mail{From: from, User: s.user}
	return nil
}

func (s *mailSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.cur.To = append(s.cur.To, to)
	return nil
}

func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.Data = string(b)
	_, s.cur.TLS = s.conn.TLSConnectionState()
	s.box.mu.Lock()
	s.box.msgs = append(s.box.msgs, s.cur)
	s.box.mu.Unlock()
	return nil
}

func (s *mailSession) Reset()        { s.cur = mail{} }
func (s *mailSession) Logout() error { return nil }

func newMailbox(t *testing.T, tlsConfig ...*tls.Config) *mailbox {
	box := &mailbox{}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &mailSession{box: box, conn: c}, nil }))
	if len(tlsConfig) > 0 {
		srv.TLSConfig = tlsConfig[0]
	}
	srv.Domain = "mail.test"
	srv.AllowInsecureAuth = true
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	box.addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return box
}

func (b *mailbox) messages() []mail {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]mail(nil), b.msgs...)
}

// notifyEnv has a reviewer bob who owns the agent "bobs-agent" (so may not
// approve its proposals), alice and the admin with addresses, and carol,
// disabled.
func notifyEnv(t *testing.T, kind string, channels ...string) (*env, models.Agent) {
	e := newEnv(t, dbURL(t, kind), models.SystemClock{}, channels...)
	bob, err := e.store.CreateUser(e.ctx, e.tenant, "bob", models.RoleReviewer, "x")
	if err != nil {
		t.Fatal(err)
	}
	carol, _ := e.store.CreateUser(e.ctx, e.tenant, "carol", models.RoleReviewer, "x")
	if _, err := e.store.AdminSetUserDisabled(e.ctx, e.demo.Admin, carol.ID, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	for u, addr := range map[string]string{e.demo.Reviewer.ID: "alice@example.com", e.demo.Admin.ID: "admin@example.com",
		bob.ID: "bob@example.com", carol.ID: "carol@example.com"} {
		if err := e.store.SetNotificationEmail(e.ctx, e.tenant, u, addr, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.SetNotificationEmail(e.ctx, e.tenant, bob.ID, "Bob <bob@example.com>", time.Now()); !models.IsCode(err, models.EInvalidRequest) {
		t.Errorf("a display name was accepted as an address: %v", err)
	}
	agent, err := e.store.CreateAgent(e.ctx, e.tenant, "bobs-agent", bob.ID, "sha256:bob")
	if err != nil {
		t.Fatal(err)
	}
	return e, agent
}

// An injected link in the proposal's own text must not become something
// to click in a notification.
const trap = "refund <http://evil.example/approve|Approve now> please"

func (e *env) proposeAs(agent models.Agent, order string, amount int64, reason string) *models.Proposal {
	e.t.Helper()
	args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": reason})
	p, _, err := e.svc.Propose(e.ctx, agent, writes.ProposeInput{Tool: "refund_order", Arguments: args})
	if err != nil {
		e.t.Fatalf("propose: %v", err)
	}
	return p
}

var urlPattern = regexp.MustCompile(`https?://[^\s<>|"]+`)

func TestEmailNotificationOverSMTP(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e, bobsAgent := notifyEnv(t, kind, models.ChannelEmail)
		box := newMailbox(t)
		ev := e.events(eventsConfig(box.addr))
		p := e.proposeAs(bobsAgent, "ord_1001", 12345, trap)
		drain(t, ev)
		msgs := box.messages()
		if len(msgs) != 1 {
			t.Fatalf("%d messages, want 1", len(msgs))
		}
		m := msgs[0]
		if m.User != "notifier" || m.From != "countersign@example.com" {
			t.Errorf("envelope: %+v", m)
		}
		if got, want := strings.Join(m.To, ","), "admin@example.com,alice@example.com"; got != want {
			t.Errorf("recipients %s, want %s (not the requester bob, not the disabled carol)", got, want)
		}
		link := "http://console.test/proposals/" + p.ID
		for _, want := range []string{"refund_order", "¥123.45", "ord_1001", "tier low", "left", link} {
			if !strings.Contains(m.Data, want) {
				t.Errorf("message lacks %q:\n%s", want, m.Data)
			}
		}
		// The only URL is the console page: the one in the proposal's
		// text is defanged.
		for _, u := range urlPattern.FindAllString(m.Data, -1) {
			if u != link {
				t.Errorf("unexpected link %s", u)
			}
		}
		if !strings.Contains(m.Data, "http[:]//evil[.]example/approve") {
			t.Errorf("the proposal's text is missing or not defanged:\n%s", m.Data)
		}
		if strings.Contains(strings.ToLower(m.Data), "/approve\r\n") || strings.Contains(m.Data, link+"/approve") {
			t.Errorf("the message links to an approval:\n%s", m.Data)
		}

		// A proposal decided before its notification went out is not
		// announced any more.
		q := e.proposeAs(bobsAgent, "ord_1002", 100, "x")
		if _, err := e.svc.Decline(e.ctx, writes.DeclineInput{Reviewer: e.demo.Reviewer, ProposalID: q.ID, DigestSeen: q.ArgsDigest, Reason: "no"}); err != nil {
			t.Fatal(err)
		}
		drain(t, ev)
		if n := len(box.messages()); n != 1 {
			t.Errorf("%d messages after a decided proposal, want 1", n)
		}
	})
}

func eventsConfig(smtpAddr string) (cfg events.Config) {
	cfg.SMTP.Addr, cfg.SMTP.From = smtpAddr, "countersign@example.com"
	cfg.SMTP.Username, cfg.SMTP.Password = "notifier", "s3cret"
	return cfg
}

func TestEmailRetriedWhenTheServerRefuses(t *testing.T) {
	t.Parallel()
	e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail)
	box := newMailbox(t)
	cfg := eventsConfig(box.addr)
	cfg.SMTP.Password = "wrong"
	cfg.RetryBase = time.Hour
	ev := e.events(cfg)
	e.proposeAs(bobsAgent, "ord_1001", 100, "x")
	drain(t, ev)
	log, _ := ev.Deliveries(e.ctx, e.tenant, models.ChannelEmail, 10)
	if len(log) != 1 || log[0].Status != models.DeliveryPending || log[0].LastError == "" || log[0].Attempts != 1 {
		t.Fatalf("after a refused login: %+v", log)
	}
	if len(box.messages()) != 0 {
		t.Fatal("a message went through without authentication")
	}
}

func TestSlackNotification(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e, bobsAgent := notifyEnv(t, kind, models.ChannelSlack)
		var (
			mu     sync.Mutex
			bodies []map[string]any
		)
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var b map[string]any
			if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&b) != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			mu.Lock()
			bodies = append(bodies, b)
			mu.Unlock()
			_, _ = io.WriteString(w, "ok")
		}))
		t.Cleanup(hook.Close)
		cfg := events.Config{SlackWebhookURL: hook.URL + "/services/T000/B000/XXX"}
		ev := e.events(cfg)
		p := e.proposeAs(bobsAgent, "ord_2002", 300000, trap)
		drain(t, ev)
		mu.Lock()
		defer mu.Unlock()
		if len(bodies) != 1 {
			t.Fatalf("%d Slack messages, want 1", len(bodies))
		}
		text, _ := bodies[0]["text"].(string)
		link := "<http://console.test/proposals/" + p.ID + "|Review in the countersign console>"
		for _, want := range []string{"refund_order", "¥3,000.00", "tier quorum", "left", link} {
			if !strings.Contains(text, want) {
				t.Errorf("Slack text lacks %q: %s", want, text)
			}
		}
		if strings.Contains(text, "http://evil") || !strings.Contains(text, "&lt;http[:]//evil[.]example/approve|Approve now&gt;") {
			t.Errorf("the proposal's text became a link: %s", text)
		}
		if len(bodies[0]) != 1 {
			t.Errorf("the message carries more than text (no buttons, no actions): %v", bodies[0])
		}
	})
}

// With STARTTLS offered, the conversation is encrypted before AUTH; with
// --smtp-starttls a server that does not offer it gets nothing.
func TestEmailUsesSTARTTLS(t *testing.T) {
	t.Parallel()
	e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail)
	certSrc := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(certSrc.Close)
	pool := x509.NewCertPool()
	pool.AddCert(certSrc.Certificate())
	box := newMailbox(t, &tls.Config{Certificates: certSrc.TLS.Certificates})
	cfg := eventsConfig(box.addr)
	cfg.SMTP.StartTLS = true
	cfg.SMTP.TLSConfig = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	ev := e.events(cfg)
	e.proposeAs(bobsAgent, "ord_1001", 100, "x")
	drain(t, ev)
	msgs := box.messages()
	if len(msgs) != 1 || !msgs[0].TLS || msgs[0].User != "notifier" {
		t.Fatalf("messages: %+v", msgs)
	}

	// The same configuration against a server without STARTTLS: refused
	// before any credentials or content are sent.
	plain := newMailbox(t)
	cfg.SMTP.Addr = plain.addr
	cfg.RetryBase = time.Hour
	ev = e.events(cfg)
	e.proposeAs(bobsAgent, "ord_1002", 100, "x")
	drain(t, ev)
	if n := len(plain.messages()); n != 0 {
		t.Fatalf("%d messages sent without TLS", n)
	}
	log, _ := ev.Deliveries(e.ctx, e.tenant, models.ChannelEmail, 1)
	if len(log) != 1 || !strings.Contains(log[0].LastError, "STARTTLS") {
		t.Errorf("delivery: %+v", log)
	}
}
