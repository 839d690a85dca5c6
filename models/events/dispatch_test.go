package events_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/events"
	"github.com/countersign/countersign/models/store"
)

// stallingReceiver is a real HTTP endpoint that holds every request until
// released (or the request is abandoned), counting how many it holds at
// once.
type stallingReceiver struct {
	*httptest.Server
	release chan struct{}
	mu      sync.Mutex
	now     int
	most    int
	total   int
}

func newStallingReceiver(t *testing.T) *stallingReceiver {
	r := &stallingReceiver{release: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.now++
		r.total++
		r.most = max(r.most, r.now)
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.now--
			r.mu.Unlock()
		}()
		select {
		case <-r.release:
		case <-req.Context().Done():
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *stallingReceiver) counts() (now, most, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now, r.most, r.total
}

// waitFor polls cond until it holds or d has passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// run starts ev.Run and returns a function that stops it and waits for it.
func run(ev *events.Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ev.Run(ctx, 10*time.Millisecond)
	}()
	return func() {
		cancel()
		<-done
	}
}

// A receiver that holds every request takes a few of the dispatcher's
// attempts and no more: another endpoint gets the events of later
// proposals at once, not after the slow one's attempts end.
func TestSlowEndpointDoesNotHoldBackOthers(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, kind string) {
		e := newEnv(t, dbURL(t, kind), models.SystemClock{})
		ev := e.events(events.Config{Timeout: time.Minute})
		slow := newStallingReceiver(t)
		if _, _, err := ev.RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, slow.URL+"/slow", ""); err != nil {
			t.Fatal(err)
		}
		healthy := e.receiving(ev, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant})
		// Three proposals: six deliveries to each endpoint.
		for i := range 3 {
			e.propose("ord_1001", int64(100+i))
		}
		stop := run(ev)
		defer stop()
		defer close(slow.release)

		waitFor(t, 5*time.Second, "the healthy endpoint did not get the first six events", func() bool { return len(healthy.messages()) == 6 })
		waitFor(t, 5*time.Second, "the slow endpoint was not attempted", func() bool { n, _, _ := slow.counts(); return n > 0 })
		// A proposal made while the slow endpoint holds its attempts.
		e.propose("ord_1002", 100)
		waitFor(t, 5*time.Second, "a later proposal's events waited for the slow endpoint", func() bool { return len(healthy.messages()) == 8 })
		if _, most, total := slow.counts(); most > 3 || total > 3 {
			t.Errorf("the slow endpoint held %d attempts at once (%d in all), want at most 3", most, total)
		}
		for i, m := range healthy.messages() {
			if m.Verified != nil {
				t.Errorf("message %d: %v", i, m.Verified)
			}
		}
	})
}

// stallingSession accepts a message only when released.
type stallingSession struct{ release <-chan struct{} }

func (s stallingSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s stallingSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s stallingSession) Data(r io.Reader) error {
	_, _ = io.Copy(io.Discard, r)
	<-s.release
	return nil
}
func (s stallingSession) Reset()        {}
func (s stallingSession) Logout() error { return nil }

// A mail server that takes its time holds back no webhook.
func TestSlowMailServerDoesNotHoldBackWebhooks(t *testing.T) {
	t.Parallel()
	e, bobsAgent := notifyEnv(t, "sqlite", models.ChannelEmail)
	release := make(chan struct{})
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return stallingSession{release}, nil }))
	srv.Domain = "mail.test"
	srv.ReadTimeout, srv.WriteTimeout = time.Minute, time.Minute
	box := newMailboxOn(t, srv)
	ev := e.events(events.Config{SMTP: events.SMTPConfig{Addr: box, From: "countersign@example.com"}})
	healthy := e.receiving(ev, e.demo.Admin.ID, models.EndpointScope{TenantID: e.tenant})
	stop := run(ev)
	defer stop()
	defer close(release)
	e.proposeAs(bobsAgent, "ord_1001", 100, "x")
	waitFor(t, 5*time.Second, "the first proposal's webhooks", func() bool { return len(healthy.messages()) == 2 })
	// The e-mail for it is now held by the mail server.
	log, _ := ev.Deliveries(e.ctx, e.tenant, models.ChannelEmail, 1)
	if len(log) != 1 || log[0].Status != models.DeliveryPending {
		t.Fatalf("e-mail delivery: %+v", log)
	}
	e.proposeAs(bobsAgent, "ord_1002", 100, "y")
	waitFor(t, 5*time.Second, "a webhook waited for the mail server", func() bool { return len(healthy.messages()) == 4 })
}

// newMailboxOn serves srv on a loopback port and returns its address.
func newMailboxOn(t *testing.T, srv *smtp.Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// An attempt cut off by a shutdown does not end its delivery, even when
// it was the last attempt allowed: the delivery is due again at once, and
// a restarted dispatcher sends it.
func TestShutdownDoesNotUseUpTheLastAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dbURL(t, "sqlite"), models.SystemClock{})
	ev := e.events(events.Config{Timeout: time.Minute, MaxAttempts: 1})
	slow := newStallingReceiver(t)
	if _, _, err := ev.RegisterEndpoint(e.ctx, e.agent.ID, models.EndpointScope{TenantID: e.tenant, AgentID: e.agent.ID}, slow.URL+"/slow", ""); err != nil {
		t.Fatal(err)
	}
	e.propose("ord_1001", 100)
	stop := run(ev)
	waitFor(t, 5*time.Second, "the endpoint was not attempted", func() bool { n, _, _ := slow.counts(); return n > 0 })
	stop()
	log, err := e.store.DeliveryLog(e.ctx, store.DeliveryFilter{TenantID: e.tenant, Channel: models.ChannelWebhook})
	if err != nil || len(log) == 0 {
		t.Fatalf("deliveries: %v %v", log, err)
	}
	for _, d := range log {
		if d.Status == models.DeliveryFailed {
			t.Errorf("delivery %s ended failed by the shutdown (attempt %d)", d.ID, d.Attempts)
		}
	}
	close(slow.release)
}
