// Package events sends what the outbox holds: signed webhooks in the
// Standard Webhooks format, reviewer notifications by e-mail and to a
// Slack-compatible incoming webhook, and the agents' event stream. Events
// and their deliveries are written by the store in the transactions that
// change proposals; this package only reads them and reports outcomes, so a
// crash at any point loses nothing (at worst a delivery is sent twice, with
// the same webhook-id).
package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// Config assembles a Service.
type Config struct {
	Store *store.Store
	Clock models.Clock
	// Logger receives delivery failures; discarded when nil.
	Logger *slog.Logger
	// BaseURL is the console's public origin, for the links in
	// notifications, e.g. "https://countersign.example.com".
	BaseURL string
	// SMTP, when Addr is set, sends reviewer notifications by e-mail.
	SMTP SMTPConfig
	// SlackWebhookURL, when set, posts reviewer notifications to a
	// Slack-compatible incoming webhook.
	SlackWebhookURL string
	// Timeout bounds one attempt of a webhook or Slack delivery; 10s when
	// zero. (SMTPConfig.Timeout bounds an e-mail's.)
	Timeout time.Duration
	// RetryBase is the wait after the first failed attempt; each further
	// failure doubles it up to RetryMax. 5s and 1h when zero.
	RetryBase, RetryMax time.Duration
	// MaxAttempts is how many attempts a delivery gets before it is
	// failed; 12 when zero.
	MaxAttempts int
	// AllowAddresses are the ranges beyond public unicast addresses that
	// webhooks may be sent to (see Destinations). The Slack URL, the
	// operator's own, is not restricted.
	AllowAddresses []netip.Prefix
	// Retention is how long an event, its deliveries and their attempt
	// log are kept once no delivery is pending (Prune); zero keeps them
	// for ever.
	Retention time.Duration
	// Changes tells event streams when a proposal changed (the protocol,
	// *writes.Service), so that a stream reads the outbox when there may
	// be something new, not on a timer. Without it a stream reads the
	// outbox every StreamPoll.
	Changes Changes
}

// Changes announces proposal changes as they commit: WaitAny returns a
// channel closed at the next change of any of the tenant's proposals,
// made by this process or (through the protocol's change notifications)
// by another instance or process.
type Changes interface {
	WaitAny(tenantID string) <-chan struct{}
}

// Service registers webhook endpoints, dispatches deliveries and serves
// event streams. Several services (instances) over one database dispatch
// together without sending a delivery twice at once: claims are leases
// taken by conditional UPDATEs.
type Service struct {
	st       *store.Store
	clock    models.Clock
	log      *slog.Logger
	baseURL  string
	smtp     SMTPConfig
	slack    string
	timeout  time.Duration
	base     time.Duration
	max      time.Duration
	attempts int
	dest     Destinations
	hooks    *http.Client // webhooks: to the destinations dest permits
	client   *http.Client // the operator's Slack URL
	channels []string
	keep     time.Duration
	changes  Changes
	// smtpTimeout bounds one SMTP conversation (SMTPConfig.Timeout).
	smtpTimeout time.Duration
	flight      *inFlight
}

// New returns the service.
func New(cfg Config) *Service {
	s := &Service{st: cfg.Store, clock: cfg.Clock, log: cfg.Logger, baseURL: strings.TrimRight(cfg.BaseURL, "/"),
		smtp: cfg.SMTP, slack: cfg.SlackWebhookURL, timeout: cfg.Timeout, base: cfg.RetryBase, max: cfg.RetryMax,
		attempts: cfg.MaxAttempts, dest: Destinations{Allow: cfg.AllowAddresses}, keep: cfg.Retention,
		changes: cfg.Changes, smtpTimeout: cfg.SMTP.Timeout, flight: newInFlight()}
	if s.clock == nil {
		s.clock = models.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.timeout <= 0 {
		s.timeout = 10 * time.Second
	}
	if s.smtpTimeout <= 0 {
		s.smtpTimeout = 5 * time.Minute
	}
	if s.base <= 0 {
		s.base = 5 * time.Second
	}
	if s.max <= 0 {
		s.max = time.Hour
	}
	if s.attempts <= 0 {
		s.attempts = 12
	}
	s.hooks = s.dest.Client()
	s.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	s.channels = append([]string{models.ChannelWebhook}, NotifyChannels(cfg.SMTP, cfg.SlackWebhookURL)...)
	return s
}

// NotifyChannels lists the notification channels a configuration turns
// on; the store needs them (store.Options.Notify) to create the
// deliveries.
func NotifyChannels(smtp SMTPConfig, slackURL string) []string {
	var out []string
	if smtp.Addr != "" {
		out = append(out, models.ChannelEmail)
	}
	if slackURL != "" {
		out = append(out, models.ChannelSlack)
	}
	return out
}

// ---- Endpoints -----------------------------------------------------------

// MaxDescription bounds an endpoint's description, in characters.
const MaxDescription = 200

// CheckURL accepts an absolute http or https URL without credentials or
// fragment, whose port (when given) is 1 to 65535, and returns it;
// anything else is EInvalidRequest.
func CheckURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return "", &models.Error{Code: models.EInvalidRequest, Message: "the endpoint must be an absolute http:// or https:// URL without credentials or fragment",
			Fields: []models.FieldProblem{{Pointer: "/url", Message: "not an http(s) URL"}}}
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", &models.Error{Code: models.EInvalidRequest, Message: fmt.Sprintf("the endpoint's port %s is not a port (1 to 65535)", p),
				Fields: []models.FieldProblem{{Pointer: "/url", Message: "port out of range"}}}
		}
	}
	// One form for one destination, so that the same endpoint written
	// twice (another case in the host, its scheme's default port, no
	// path) is the same URL: a scope may hold a URL once.
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	switch {
	case port != "":
		u.Host = net.JoinHostPort(host, port)
	case strings.Contains(host, ":"):
		u.Host = "[" + host + "]"
	default:
		u.Host = host
	}
	if u.Path == "" && u.RawPath == "" {
		u.Path = "/"
	}
	if len(u.String()) > 2000 {
		return "", models.Errorf(models.EInvalidRequest, "the endpoint URL is longer than 2000 characters")
	}
	return u.String(), nil
}

// RegisterEndpoint registers an endpoint in scope (an agent's own, or with
// an empty AgentID a tenant-wide one) and returns it with its signing
// secret, which is shown this once. EInvalidRequest for a URL that is not
// http(s), one whose host is an address webhooks are not sent to (or
// localhost), a description that is too long, or a scope that has as many
// live endpoints as it may (models.MaxAgentWebhookEndpoints,
// MaxTenantWebhookEndpoints; details.limit is "webhook_endpoints");
// EAlreadyExists when the scope has a live endpoint for the same URL
// (details.endpoint_id names it). actor is who registers it (the agent, or
// the administrator of a tenant-wide one): the audit entry of the
// registration names it.
func (s *Service) RegisterEndpoint(ctx context.Context, actor string, sc models.EndpointScope, rawURL, description string) (models.WebhookEndpoint, string, error) {
	u, err := s.dest.checkEndpointURL(rawURL)
	if err != nil {
		return models.WebhookEndpoint{}, "", err
	}
	description = strings.TrimSpace(description)
	if utf8.RuneCountInString(description) > MaxDescription {
		return models.WebhookEndpoint{}, "", models.Errorf(models.EInvalidRequest, "the description is limited to %d characters", MaxDescription)
	}
	if err := models.StorableText("/description", description); err != nil {
		return models.WebhookEndpoint{}, "", err
	}
	secret, err := NewSecret()
	if err != nil {
		return models.WebhookEndpoint{}, "", models.Wrap(models.EInternal, err, "cannot create a secret")
	}
	ep, err := s.st.CreateWebhookEndpoint(ctx, actor, models.WebhookEndpoint{TenantID: sc.TenantID, AgentID: sc.AgentID,
		URL: u, Description: description}, secret)
	if err != nil {
		return models.WebhookEndpoint{}, "", err
	}
	return ep, secret, nil
}

// Endpoints lists the endpoints in scope.
func (s *Service) Endpoints(ctx context.Context, sc models.EndpointScope) ([]models.WebhookEndpoint, error) {
	return s.st.WebhookEndpoints(ctx, sc)
}

// DisableEndpoint stops deliveries to an endpoint in scope (ENotFound
// otherwise); the audit entry names actor as who did.
func (s *Service) DisableEndpoint(ctx context.Context, actor string, sc models.EndpointScope, id string) error {
	return s.st.DisableWebhookEndpoint(ctx, actor, sc, id, s.clock.Now())
}

// Deliveries returns the tenant's latest deliveries (optionally to one
// target), newest first.
func (s *Service) Deliveries(ctx context.Context, tenantID, target string, limit int) ([]models.Delivery, error) {
	return s.st.DeliveryLog(ctx, store.DeliveryFilter{TenantID: tenantID, Target: target, Limit: limit})
}

// Delivery returns one delivery of the tenant (ENotFound otherwise).
func (s *Service) Delivery(ctx context.Context, tenantID, deliveryID string) (models.Delivery, error) {
	return s.st.Delivery(ctx, tenantID, deliveryID)
}

// Attempts returns the attempts of one delivery of the tenant.
func (s *Service) Attempts(ctx context.Context, tenantID, deliveryID string) ([]models.DeliveryAttempt, error) {
	return s.st.DeliveryAttempts(ctx, tenantID, deliveryID)
}

// Redeliver makes a delivery of the tenant due again now; the audit entry
// names actor (the administrator) as who did.
func (s *Service) Redeliver(ctx context.Context, actor, tenantID, deliveryID string) error {
	return s.st.Redeliver(ctx, actor, tenantID, deliveryID, s.clock.Now())
}

// Backlog counts pending deliveries per channel.
func (s *Service) Backlog(ctx context.Context) (map[string]int64, error) {
	return s.st.DeliveryBacklog(ctx)
}

// ---- Retention -----------------------------------------------------------

// pruneBatch bounds the events one pruning transaction deletes, so that it
// holds SQLite's writer only briefly.
const pruneBatch = 200

// Prune deletes the events older than the retention none of whose
// deliveries is pending or changed within it, with those deliveries and
// their attempt log, in transactions of up to pruneBatch events, and
// returns what went. Age is the wall clock's, as event ids are (see
// Stream). Zero retention prunes nothing. Several instances may prune at
// once.
func (s *Service) Prune(ctx context.Context) (store.OutboxPruned, error) {
	var total store.OutboxPruned
	if s.keep <= 0 {
		return total, nil
	}
	before := time.Now().Add(-s.keep)
	after := ""
	for {
		got, err := s.st.PruneOutbox(ctx, after, before, pruneBatch)
		total.Add(got)
		if err != nil || got.Considered < pruneBatch {
			return total, err
		}
		after = got.Through
	}
}

// ---- Dispatch ------------------------------------------------------------

// The bounds of one dispatcher (one process). Each channel has its own
// attempts in flight, so that a slow mail server holds back no webhook and
// slow webhook receivers hold back no notification. Within the webhook
// channel one endpoint has at most targetSlots attempts in flight (one
// while its last attempt failed, until one succeeds), one tenant half the
// channel's, and within the tenant one endpoint scope (an agent's own
// endpoints, or the tenant-wide ones) half of what the tenant's other
// scopes leave: a receiver that answers slowly, or never, takes its share
// of the dispatcher and no more, and the dispatcher goes on claiming for
// everyone else as attempts finish.
const (
	webhookSlots = 64 // webhook attempts in flight at once
	notifySlots  = 8  // attempts in flight per notification channel
	targetSlots  = 3  // attempts in flight to one webhook endpoint
	// failingFor is how long an endpoint's failure keeps it to one
	// attempt at a time when no attempt to it has ended since: as long as
	// the longest wait between two retries, after which what the
	// dispatcher knows of it is forgotten.
	failingFor = time.Hour
)

// slots is how many attempts of channel ch may be in flight at once.
func slots(ch string) int {
	if ch == models.ChannelWebhook {
		return webhookSlots
	}
	return notifySlots
}

// targetCap is how many attempts to one target of channel ch may be in
// flight; a notification channel's target is the channel itself.
func targetCap(ch string) int {
	if ch == models.ChannelWebhook {
		return targetSlots
	}
	return notifySlots
}

// tenantCap is how many attempts of one tenant's deliveries on channel ch
// may be in flight.
func tenantCap(ch string) int { return max(slots(ch)/2, 1) }

// scopeCap is how many attempts to the endpoints of one scope (an agent's
// own, or a tenant's tenant-wide ones) may be in flight while the tenant's
// other scopes hold others: half of what they leave of the tenant's, and
// at least one while any is left. One agent's stalled endpoints leave the
// rest of its tenant half; a second stalled scope takes half of that half,
// and so on, so that each stalled scope halves what the healthy ones keep
// instead of two of them taking it all. A notification's scope is its
// tenant, which tenantCap bounds already.
func scopeCap(ch string, others int) int {
	if ch == models.ChannelWebhook {
		return max((tenantCap(ch)-others)/2, 1)
	}
	return tenantCap(ch)
}

// scopeKey names an endpoint scope on a channel: channel, tenant, agent
// ("" for the tenant-wide endpoints and for notifications).
type scopeKey [3]string

func keyOf(ch string, d store.DueDelivery) scopeKey { return scopeKey{ch, d.TenantID, d.Agent} }

// inFlight counts a dispatcher's running attempts per channel, per target,
// per tenant and per endpoint scope.
type inFlight struct {
	mu      sync.Mutex
	channel map[string]int
	target  map[[2]string]int
	tenant  map[[2]string]int
	scope   map[scopeKey]int
	// failing holds the webhook endpoints whose last attempt failed, and
	// when; each may have one attempt in flight until one succeeds.
	failing map[[2]string]time.Time
	// forgotten is when failing was last rid of what is older than
	// failingFor.
	forgotten time.Time
	// freed is signalled when an attempt ends, so that Run claims again
	// at once.
	freed chan struct{}
	// running is every attempt in flight, for Run to wait for at the end.
	running sync.WaitGroup
}

func newInFlight() *inFlight {
	return &inFlight{channel: map[string]int{}, target: map[[2]string]int{}, tenant: map[[2]string]int{},
		scope: map[scopeKey]int{}, failing: map[[2]string]time.Time{}, freed: make(chan struct{}, 1)}
}

// targetRoom is how many attempts to target tg may be in flight: one
// while its last attempt failed, so that a receiver that stopped
// answering holds one slot while it is probed, not targetCap's. Called
// with f.mu held.
func (f *inFlight) targetRoom(ch string, tg [2]string) int {
	if _, failed := f.failing[tg]; failed {
		return 1
	}
	return targetCap(ch)
}

// settle records how an attempt to d's target ended: a failure keeps the
// target to one attempt at a time, a success lifts that. Attempts cut off
// by a shutdown say nothing of the receiver and are not settled.
func (f *inFlight) settle(ch string, d store.DueDelivery, ok bool, now time.Time) {
	if ch != models.ChannelWebhook {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tg := [2]string{ch, d.Target}
	if ok {
		delete(f.failing, tg)
		return
	}
	f.failing[tg] = now
	if now.Sub(f.forgotten) >= time.Minute {
		f.forgotten = now
		for k, at := range f.failing {
			if now.Sub(at) >= failingFor {
				delete(f.failing, k)
			}
		}
	}
}

// reserve takes a slot for an attempt of d on ch, unless a bound is reached.
func (f *inFlight) reserve(ch string, d store.DueDelivery) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	tg, tn, sc := [2]string{ch, d.Target}, [2]string{ch, d.TenantID}, keyOf(ch, d)
	if f.channel[ch] >= slots(ch) || f.target[tg] >= f.targetRoom(ch, tg) || f.tenant[tn] >= tenantCap(ch) ||
		f.scope[sc] >= scopeCap(ch, f.tenant[tn]-f.scope[sc]) {
		return false
	}
	f.channel[ch]++
	f.target[tg]++
	f.tenant[tn]++
	f.scope[sc]++
	return true
}

func (f *inFlight) release(ch string, d store.DueDelivery) {
	f.mu.Lock()
	tg, tn, sc := [2]string{ch, d.Target}, [2]string{ch, d.TenantID}, keyOf(ch, d)
	f.channel[ch]--
	if f.target[tg]--; f.target[tg] <= 0 {
		delete(f.target, tg)
	}
	if f.tenant[tn]--; f.tenant[tn] <= 0 {
		delete(f.tenant, tn)
	}
	if f.scope[sc]--; f.scope[sc] <= 0 {
		delete(f.scope, sc)
	}
	f.mu.Unlock()
	select {
	case f.freed <- struct{}{}:
	default:
	}
}

// room is how many more attempts of a channel may start, and the targets,
// tenants and endpoint scopes that may start none.
type room struct {
	free    int
	targets []string
	tenants []string
	scopes  []models.EndpointScope
}

// free is the room channel ch has.
func (f *inFlight) free(ch string) room {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := room{free: slots(ch) - f.channel[ch]}
	for k, v := range f.target {
		if k[0] == ch && v >= f.targetRoom(ch, k) {
			out.targets = append(out.targets, k[1])
		}
	}
	for k, v := range f.tenant {
		if k[0] == ch && v >= tenantCap(ch) {
			out.tenants = append(out.tenants, k[1])
		}
	}
	for k, v := range f.scope {
		if k[0] == ch && ch == models.ChannelWebhook && v >= scopeCap(ch, f.tenant[[2]string{ch, k[1]}]-v) {
			out.scopes = append(out.scopes, models.EndpointScope{TenantID: k[1], AgentID: k[2]})
		}
	}
	return out
}

// timeoutOf bounds one attempt on channel ch.
func (s *Service) timeoutOf(ch string) time.Duration {
	if ch == models.ChannelEmail {
		return s.smtpTimeout
	}
	return s.timeout
}

// lease is how long a claim holds a delivery of channel ch: the attempt's
// timeout plus a margin, so that a live attempt is never taken over.
func (s *Service) lease(ch string) time.Duration { return s.timeoutOf(ch) + 20*time.Second }

// Run dispatches due deliveries until ctx ends: it claims what is due
// every interval and whenever an attempt ends, as far as the bounds allow,
// and never waits for one attempt to claim the next. When ctx ends it
// returns after the attempts in flight have recorded their outcome.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	defer s.flight.running.Wait()
	for {
		if _, err := s.claim(ctx, nil); err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "dispatching deliveries failed", slog.String("err", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.flight.freed:
		}
	}
}

// DispatchOnce claims the deliveries due now, as far as the bounds allow
// beside the attempts already in flight, attempts them concurrently and
// waits for those attempts (not for any other) to record their outcome.
// It returns how many it attempted.
func (s *Service) DispatchOnce(ctx context.Context) (int, error) {
	var wg sync.WaitGroup
	n, err := s.claim(ctx, &wg)
	wg.Wait()
	return n, err
}

// claim starts an attempt of every due delivery the bounds allow, channel
// by channel, and returns how many it started; each started attempt is
// added to wg too when wg is not nil. Each round lists the due deliveries
// but for the targets, tenants and endpoint scopes that are full, so that a
// backlog of one endpoint (or agent) does not hide the others', and claims
// each delivery on its own (a conditional UPDATE: several processes share
// the queue).
func (s *Service) claim(ctx context.Context, wg *sync.WaitGroup) (int, error) {
	started := 0
	for _, ch := range s.channels {
		for ctx.Err() == nil {
			f := s.flight.free(ch)
			if f.free <= 0 {
				break
			}
			limit := min(2*f.free, 128)
			due, err := s.st.DueDeliveries(ctx, store.DueFilter{Channel: ch, ExceptTargets: f.targets,
				ExceptTenants: f.tenants, ExceptScopes: f.scopes}, s.clock.Now(), limit)
			if err != nil {
				return started, err
			}
			progress := false
			for _, dd := range due {
				if !s.flight.reserve(ch, dd) {
					continue
				}
				d, err := s.st.ClaimDelivery(ctx, dd.ID, s.clock.Now(), s.lease(ch))
				if err != nil || d == nil {
					s.flight.release(ch, dd)
					if err != nil {
						return started, err
					}
					continue
				}
				progress = true
				started++
				s.flight.running.Add(1)
				if wg != nil {
					wg.Add(1)
				}
				go func() {
					defer func() {
						s.flight.release(ch, dd)
						s.flight.running.Done()
						if wg != nil {
							wg.Done()
						}
					}()
					ok, said := s.attempt(ctx, *d)
					if said {
						s.flight.settle(ch, dd, ok, s.clock.Now())
					}
				}()
			}
			if !progress || len(due) < limit {
				break
			}
		}
	}
	return started, nil
}

// attempt sends one delivery and records the outcome. It reports whether
// the receiver took it, and whether the receiver said anything either way
// (an attempt cut off by the shutdown says nothing of it).
func (s *Service) attempt(ctx context.Context, d models.Delivery) (ok, said bool) {
	actx, cancel := context.WithTimeout(ctx, s.timeoutOf(d.Channel))
	defer cancel()
	began := time.Now()
	var (
		code int
		err  error
	)
	switch d.Channel {
	case models.ChannelWebhook:
		code, err = s.sendWebhook(actx, d)
	case models.ChannelEmail:
		err = s.sendEmail(actx, d)
	case models.ChannelSlack:
		code, err = s.sendSlack(actx, d)
	default:
		err = fmt.Errorf("unknown channel %q", d.Channel)
	}
	r := store.AttemptResult{OK: err == nil, StatusCode: code, Duration: time.Since(began)}
	now := s.clock.Now()
	if err != nil {
		r.Error = truncate(err.Error(), 500)
		switch {
		case ctx.Err() != nil && !errors.Is(err, errGone):
			// Cut off by the shutdown, not refused by the receiver: the
			// delivery is due again at once, even after its last attempt,
			// so that a restart never ends one for good.
			r.RetryAt = now
		case d.Attempts < s.attempts && !errors.Is(err, errGone):
			r.RetryAt = now.Add(s.backoff(d.Attempts))
		}
		s.log.LogAttrs(ctx, slog.LevelInfo, "delivery attempt failed", slog.String("delivery", d.ID),
			slog.String("channel", d.Channel), slog.Int("attempt", d.Attempts), slog.String("err", r.Error))
	}
	// Record even when ctx ended (shutdown): the outcome happened.
	if _, ferr := s.st.FinishDelivery(context.WithoutCancel(ctx), d.ID, d.Attempts, r, now); ferr != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "recording a delivery attempt failed", slog.String("delivery", d.ID),
			slog.String("err", ferr.Error()))
	}
	return err == nil, err == nil || ctx.Err() == nil
}

// backoff is the wait after failed attempt n (1-based): RetryBase doubled
// n-1 times, at most RetryMax.
func (s *Service) backoff(n int) time.Duration {
	d := s.base
	for i := 1; i < n && d < s.max; i++ {
		d *= 2
	}
	return min(d, s.max)
}

// Body is the JSON a webhook delivers: Standard Webhooks' type, timestamp
// and data.
type Body struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      EventData `json:"data"`
}

// EventData is an event as webhooks and the event stream carry it.
type EventData struct {
	EventID    string          `json:"event_id"`
	TenantID   string          `json:"tenant_id"`
	AgentID    string          `json:"agent_id"`
	ProposalID string          `json:"proposal_id"`
	Status     string          `json:"status"`
	Revision   int64           `json:"revision"`
	CreatedAt  time.Time       `json:"created_at"`
	Details    json.RawMessage `json:"details"`
}

// Data returns the public form of an event.
func Data(ev models.Event) EventData {
	det := ev.Data
	if len(det) == 0 {
		det = json.RawMessage("{}")
	}
	return EventData{EventID: ev.ID, TenantID: ev.TenantID, AgentID: ev.AgentID, ProposalID: ev.ProposalID,
		Status: string(ev.Status), Revision: ev.Revision, CreatedAt: ev.CreatedAt, Details: det}
}

// sendWebhook posts the event, signed, to the delivery's endpoint. Any
// answer but 2xx is a failure.
func (s *Service) sendWebhook(ctx context.Context, d models.Delivery) (int, error) {
	target, secret, err := s.st.WebhookTarget(ctx, d.Target)
	if models.IsCode(err, models.EInvalidState) {
		// Disabled while this delivery was being created.
		return 0, fmt.Errorf("%w: %s", errGone, models.ErrorMessage(err))
	}
	if err != nil {
		return 0, err
	}
	body, err := json.Marshal(Body{Type: string(d.Event.Type), Timestamp: d.Event.CreatedAt, Data: Data(d.Event)})
	if err != nil {
		return 0, err
	}
	now := s.clock.Now()
	sig, err := Sign(secret, d.Event.ID, now, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "countersign-webhooks")
	req.Header.Set("webhook-id", d.Event.ID)
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", sig)
	return s.post(s.hooks, req)
}

// errGone marks a failure that no retry can cure.
var errGone = errors.New("not retried")

func (s *Service) post(client *http.Client, req *http.Request) (int, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
