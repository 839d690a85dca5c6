package events_test

import (
	"io"
	"mime"
	netmail "net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
)

// pickyServer is a real SMTP server whose answers a test chooses: refuse
// recipients (rcpt answers a code per address, 0 to accept) or the first
// messages (data answers a code for the n-th, 0-based, 0 to accept). It
// keeps every message it is sent, accepted or not.
type pickyServer struct {
	addr string
	rcpt func(to string) int
	data func(n int) int

	mu   sync.Mutex
	sent []mail
}

type pickySession struct {
	srv *pickyServer
	cur mail
}

func (s *pickySession) Mail(from string, _ *smtp.MailOptions) error {
	s.cur = mail{From: from}
	return nil
}

func (s *pickySession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if s.srv.rcpt != nil {
		if code := s.srv.rcpt(to); code != 0 {
			return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{code / 100, 1, 1}, Message: "not for " + to}
		}
	}
	s.cur.To = append(s.cur.To, to)
	return nil
}

func (s *pickySession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.Data = string(b)
	s.srv.mu.Lock()
	n := len(s.srv.sent)
	s.srv.sent = append(s.srv.sent, s.cur)
	s.srv.mu.Unlock()
	if s.srv.data != nil {
		if code := s.srv.data(n); code != 0 {
			return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{code / 100, 3, 0}, Message: "try again"}
		}
	}
	return nil
}

func (s *pickySession) Reset()        { s.cur = mail{} }
func (s *pickySession) Logout() error { return nil }

func newPickyServer(t *testing.T) *pickyServer {
	p := &pickyServer{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &pickySession{srv: p}, nil }))
	srv.Domain = "mail.test"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	p.addr = newMailboxOn(t, srv)
	return p
}

func (p *pickyServer) messages() []mail {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]mail(nil), p.sent...)
}

func pickyConfig(p *pickyServer) events.Config {
	return events.Config{SMTP: events.SMTPConfig{Addr: p.addr, From: "countersign@example.com"}, RetryBase: time.Millisecond}
}

// One reviewer's address refused for good does not keep the message from
// the others; the delivery counts as sent.
func TestRefusedRecipientDoesNotBlockTheOthers(t *testing.T) {
	t.Parallel()
	e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail)
	p := newPickyServer(t)
	p.rcpt = func(to string) int {
		if to == "alice@example.com" {
			return 550
		}
		return 0
	}
	ev := e.events(pickyConfig(p))
	e.proposeAs(bobsAgent, "ord_1001", 100, "x")
	drain(t, ev)
	msgs := p.messages()
	if len(msgs) != 1 || strings.Join(msgs[0].To, ",") != "admin@example.com" {
		t.Fatalf("messages: %+v, want one to admin@example.com", msgs)
	}
	log, _ := ev.Deliveries(e.ctx, e.tenant, models.ChannelEmail, 10)
	if len(log) != 1 || log[0].Status != models.DeliverySucceeded || log[0].Attempts != 1 {
		t.Fatalf("delivery: %+v", log)
	}
}

// Every recipient refused: for good (5xx) the delivery fails at once;
// temporarily (4xx) it is retried.
func TestEveryRecipientRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code   int
		status models.DeliveryStatus
	}{{550, models.DeliveryFailed}, {450, models.DeliveryPending}} {
		e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail)
		p := newPickyServer(t)
		p.rcpt = func(string) int { return tc.code }
		cfg := pickyConfig(p)
		cfg.RetryBase = time.Hour
		ev := e.events(cfg)
		e.proposeAs(bobsAgent, "ord_1001", 100, "x")
		drain(t, ev)
		log, _ := ev.Deliveries(e.ctx, e.tenant, models.ChannelEmail, 10)
		if len(log) != 1 || log[0].Status != tc.status || log[0].Attempts != 1 ||
			!strings.Contains(log[0].LastError, "alice@example.com") {
			t.Errorf("%d for everyone: %+v, want %s", tc.code, log, tc.status)
		}
		if n := len(p.messages()); n != 0 {
			t.Errorf("%d for everyone: %d messages", tc.code, n)
		}
	}
}

// A retry sends the same message again, with the same Message-ID, so that
// a mail client shows it once.
func TestEmailRetryKeepsTheMessageID(t *testing.T) {
	t.Parallel()
	e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail)
	p := newPickyServer(t)
	p.data = func(n int) int {
		if n == 0 {
			return 451
		}
		return 0
	}
	ev := e.events(pickyConfig(p))
	e.proposeAs(bobsAgent, "ord_1001", 100, "x")
	drain(t, ev)
	time.Sleep(5 * time.Millisecond)
	drain(t, ev)
	msgs := p.messages()
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want the refused one and its retry", len(msgs))
	}
	var ids []string
	for _, m := range msgs {
		msg, err := netmail.ReadMessage(strings.NewReader(m.Data))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, msg.Header.Get("Message-ID"))
	}
	if ids[0] == "" || ids[0] != ids[1] {
		t.Errorf("Message-IDs %q, want one, the same twice", ids)
	}
}

// A long summary makes a long subject: no header line may pass RFC 5322's
// 998 characters, and folded none passes the 78 it asks for, and the
// subject still decodes.
func TestLongSubjectIsFolded(t *testing.T) {
	t.Parallel()
	e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail)
	p := newPickyServer(t)
	ev := e.events(pickyConfig(p))
	e.proposeAs(bobsAgent, "ord_1001", 100, strings.Repeat("退款😀", 40))
	drain(t, ev)
	msgs := p.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	head, _, _ := strings.Cut(msgs[0].Data, "\r\n\r\n")
	for _, line := range strings.Split(head, "\r\n") {
		if len(line) > 78 {
			t.Errorf("a header line of %d characters: %.80s…", len(line), line)
		}
	}
	msg, err := netmail.ReadMessage(strings.NewReader(msgs[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil || !strings.HasPrefix(subject, "Awaiting your review: refund_order") || !strings.Contains(subject, "退款😀") {
		t.Errorf("subject %q (%v)", subject, err)
	}
}

// Agent text shaped like an RFC 2047 encoded word reaches the subject as
// text: a mail reader decoding the header shows the characters the agent
// wrote, not what they encode.
func TestSubjectHoldsNoEncodedWordOfTheAgents(t *testing.T) {
	t.Parallel()
	for _, summary := range []string{"Refund =?utf-8?q?Approved_by_security?=", "=?UTF-8?B?QXBwcm92ZWQ=?= now"} {
		header := events.SubjectHeader(summary)
		msg, err := netmail.ReadMessage(strings.NewReader(header + "\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
		if want := strings.ReplaceAll(summary, "=?", "= ?"); err != nil || subject != want {
			t.Errorf("%q: the reader shows %q (%v), want %q", summary, subject, err, want)
		}
	}
}
