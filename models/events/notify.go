package events

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// SMTPConfig is the mail server reviewer notifications go through.
type SMTPConfig struct {
	// Addr is host:port of the submission server; empty turns e-mail off.
	Addr string
	// From is the sender address.
	From string
	// Username and Password, when set, authenticate with PLAIN (which
	// net/smtp allows only over TLS or to localhost).
	Username, Password string
	// StartTLS requires the server to offer STARTTLS; without it STARTTLS
	// is still used whenever offered.
	StartTLS bool
	// TLSConfig is used for STARTTLS; one checking the host name when nil.
	TLSConfig *tls.Config
	// Timeout bounds one SMTP conversation, from connecting to the answer
	// to the message; 5 minutes when zero. A mail server may take minutes
	// to accept a message (RFC 5321 allows ten for the final reply), far
	// longer than a webhook is given.
	Timeout time.Duration
}

// Notification is what a reviewer is told about a proposal that awaits a
// person: the one-line summary and the link to its console page. It never
// holds a way to approve: deciding happens on that page only.
type Notification struct {
	ProposalID string
	Summary    string
	Link       string
	Agent      string
}

// errSkip marks a notification that has nothing left to say (the proposal
// was decided or ran out before the attempt); the delivery succeeds.
var errSkip = errors.New("no longer awaiting a person")

// notification loads the proposal of a notification delivery.
func (s *Service) notification(ctx context.Context, d models.Delivery) (Notification, []store.Recipient, error) {
	p, err := s.st.GetProposal(ctx, d.TenantID, d.Event.ProposalID)
	if err != nil {
		return Notification{}, nil, err
	}
	now := s.clock.Now()
	if p.Status != models.StatusAwaitingConfirmation || p.Expired(now) {
		return Notification{}, nil, errSkip
	}
	rs, err := s.st.NotificationRecipients(ctx, d.TenantID, p.ID)
	if err != nil {
		return Notification{}, nil, err
	}
	return Notification{ProposalID: p.ID, Summary: p.Summary(now), Agent: models.NotificationText(p.AgentName, 60),
		Link: s.baseURL + "/proposals/" + p.ID}, rs, nil
}

// sendEmail mails the notification to every eligible reviewer with an
// address, one message with each of them as an envelope recipient.
func (s *Service) sendEmail(ctx context.Context, d models.Delivery) error {
	n, rs, err := s.notification(ctx, d)
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		return err
	}
	var to []string
	for _, r := range rs {
		if r.Email != "" {
			to = append(to, r.Email)
		}
	}
	if len(to) == 0 {
		return nil
	}
	return s.mail(ctx, d.ID, to, emailMessage(s.smtp.From, d.ID, n, s.clock.Now()))
}

// maxSubject bounds the summary in a subject, in characters, so that the
// header stays far below RFC 5322's 998 octets a line (the body carries the
// whole summary).
const maxSubject = 140

// subjectHeader is the Subject header field for subject, shortened to
// maxSubject characters, with no "=?" left to read as an encoded word, encoded as RFC 2047 words when it is not ASCII,
// and folded (CRLF and a space) before any word that would take its line
// past 78 characters (encoded words are at most 75), even the first.
func subjectHeader(subject string) string {
	if utf8.RuneCountInString(subject) > maxSubject {
		subject = string([]rune(subject)[:maxSubject-1]) + "…"
	}
	// ASCII text is written as it is, and a mail reader decodes any "=?…?="
	// in it as an encoded word: text an agent wrote could then show as
	// whatever it encodes. Its "=?" is split so that nothing decodes.
	subject = strings.ReplaceAll(subject, "=?", "= ?")
	var b strings.Builder
	line := len("Subject:")
	b.WriteString("Subject:")
	for _, w := range strings.Fields(mime.QEncoding.Encode("utf-8", subject)) {
		if line+1+len(w) > 78 {
			b.WriteString("\r\n")
			line = 0
		}
		b.WriteString(" ")
		b.WriteString(w)
		line += 1 + len(w)
	}
	b.WriteString("\r\n")
	return b.String()
}

// emailMessage is a plain-text message: the summary as the subject and the
// body, and the console link. Its Message-ID is the delivery's, the same
// at every attempt, so that a message a retry sends again is recognised as
// the same one.
func emailMessage(from, deliveryID string, n Notification, now time.Time) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: %s\r\n", from)
	b.WriteString("To: undisclosed-recipients:;\r\n")
	b.WriteString(subjectHeader("Awaiting your review: " + n.Summary))
	fmt.Fprintf(&b, "Date: %s\r\n", now.Format(time.RFC1123Z))
	fmt.Fprintf(&b, "Message-ID: <%s@countersign>\r\n", deliveryID)
	b.WriteString("MIME-Version: 1.0\r\n")
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	b.WriteString("Content-Transfer-Encoding: 8bit\r\n\r\n")
	fmt.Fprintf(&b, "Agent %s proposes a write that awaits a reviewer:\r\n\r\n", n.Agent)
	fmt.Fprintf(&b, "  %s\r\n\r\n", n.Summary)
	fmt.Fprintf(&b, "Review it, and decide, in the countersign console:\r\n%s\r\n\r\n", n.Link)
	b.WriteString("This message cannot approve anything; only the console can.\r\n")
	return b.Bytes()
}

// mail runs one SMTP conversation: EHLO, STARTTLS when offered (required
// with SMTPConfig.StartTLS), AUTH when configured, then the message to
// every recipient the server accepts. A refused recipient is logged and
// left out: the others still get the message, and the delivery succeeds
// when one did. With none accepted the attempt fails, and is retried only
// when a refusal was temporary (4xx) or the conversation broke.
func (s *Service) mail(ctx context.Context, deliveryID string, to []string, msg []byte) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", s.smtp.Addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The deadline bounds the conversation; closing the connection when
	// ctx ends (shutdown) stops it sooner.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	host, _, _ := net.SplitHostPort(s.smtp.Addr)
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hello("countersign"); err != nil {
		return err
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		cfg := s.smtp.TLSConfig
		if cfg == nil {
			cfg = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
		}
		if err := c.StartTLS(cfg); err != nil {
			return err
		}
	} else if s.smtp.StartTLS {
		return errors.New("the mail server does not offer STARTTLS")
	}
	if s.smtp.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", s.smtp.Username, s.smtp.Password, host)); err != nil {
			return err
		}
	}
	if err := c.Mail(s.smtp.From); err != nil {
		return err
	}
	accepted, temporary := 0, false
	var refused []string
	for _, r := range to {
		err := c.Rcpt(r)
		if err == nil {
			accepted++
			continue
		}
		var te *textproto.Error
		if !errors.As(err, &te) {
			return err // not an answer: the conversation broke
		}
		temporary = temporary || te.Code < 500
		refused = append(refused, fmt.Sprintf("%s: %d %s", r, te.Code, te.Msg))
		s.log.LogAttrs(ctx, slog.LevelWarn, "the mail server refused a recipient", slog.String("delivery", deliveryID),
			slog.String("recipient", r), slog.Int("code", te.Code), slog.String("answer", te.Msg))
	}
	if accepted == 0 {
		err := fmt.Errorf("the mail server refused every recipient (%s)", strings.Join(refused, "; "))
		if !temporary {
			return fmt.Errorf("%w: %w", errGone, err)
		}
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// sendSlack posts the notification to the incoming webhook as a text
// message (Slack's mrkdwn, with &, < and > escaped so that the proposal's
// own text can make no link or mention).
func (s *Service) sendSlack(ctx context.Context, d models.Delivery) (int, error) {
	n, _, err := s.notification(ctx, d)
	if errors.Is(err, errSkip) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	body, err := json.Marshal(map[string]any{"text": SlackText(n)})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.slack, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	return s.post(s.client, req)
}

var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// SlackText is the notification as one Slack message: the summary and a
// link to the console page, nothing to click that decides.
func SlackText(n Notification) string {
	return fmt.Sprintf("Awaiting review (agent %s): %s\n<%s|Review in the countersign console>",
		slackEscaper.Replace(n.Agent), slackEscaper.Replace(n.Summary), slackEscaper.Replace(n.Link))
}
