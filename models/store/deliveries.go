package store

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type webhookEndpointRow struct {
	ID          string `gorm:"primaryKey"`
	TenantID    string
	AgentID     *string
	URL         string `gorm:"column:url"`
	Secret      string
	Description string
	CreatedAt   int64 `gorm:"autoCreateTime:false"`
	DisabledAt  *int64
}

func (webhookEndpointRow) TableName() string { return "webhook_endpoints" }

// endpointData is what an audit entry records of an endpoint: its id, its
// URL's origin (scheme, host and port) and the URL's digest, and its scope
// — never its secret, and never the URL itself: receivers commonly carry a
// credential in the path or the query (a chat service's hook URL), and the
// chain keeps what it records for good. The digest tells which URL it was
// to anyone who has the URL.
func endpointData(r webhookEndpointRow) map[string]any {
	data := map[string]any{"endpoint_id": r.ID, "url_origin": urlOrigin(r.URL), "url_digest": models.CanonicalDigest([]byte(r.URL)),
		"scope": "tenant", "agent_id": ""}
	if r.AgentID != nil && *r.AgentID != "" {
		data["scope"], data["agent_id"] = "agent", *r.AgentID
	}
	return data
}

// urlOrigin is scheme://host[:port] of a URL ("" when it does not parse).
func urlOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

func (r webhookEndpointRow) model() models.WebhookEndpoint {
	return models.WebhookEndpoint{ID: r.ID, TenantID: r.TenantID, AgentID: deref(r.AgentID), URL: r.URL,
		Description: r.Description, CreatedAt: fromMS(r.CreatedAt), DisabledAt: fromMSPtr(r.DisabledAt)}
}

type deliveryAttemptRow struct {
	ID         string `gorm:"primaryKey"`
	DeliveryID string
	Attempt    int
	StatusCode int
	Error      string
	DurationMs int64 `gorm:"column:duration_ms"`
	CreatedAt  int64 `gorm:"autoCreateTime:false"`
}

func (deliveryAttemptRow) TableName() string { return "delivery_attempts" }

func scopeWhere(sc models.EndpointScope, q *gorm.DB) *gorm.DB {
	q = q.Where("tenant_id = ?", sc.TenantID)
	if sc.AgentID != "" {
		q = q.Where("agent_id = ?", sc.AgentID)
	}
	return q
}

// endpointsLock is the first key of the PostgreSQL advisory locks that
// order registrations of webhook endpoints in one scope (the second is the
// scope's hash), so that the count and the duplicate check of one
// registration see the endpoint another one just stored; no other lock of
// countersign's uses it. (SQLite has one writer and needs none.)
const endpointsLock = 0x63730010

// CreateWebhookEndpoint stores an endpoint with its signing secret. ep's
// AgentID empty makes it tenant-wide. The one INSERT stores it only while
// the scope (the agent, or the tenant's own endpoints) has fewer live
// endpoints than models.MaxAgentWebhookEndpoints (or
// MaxTenantWebhookEndpoints) and none for the same URL: EInvalidRequest on
// /url with details.limit "webhook_endpoints" when the scope is full,
// EAlreadyExists with details.endpoint_id when the URL has a live endpoint
// in the scope already (a second one would sign the same events, same
// webhook-id, with another secret). The same transaction appends an
// admin.webhook_created entry naming actor (the agent, or the
// administrator who registered a tenant-wide endpoint); a refused
// registration appends none.
func (s *Store) CreateWebhookEndpoint(ctx context.Context, actor string, ep models.WebhookEndpoint, secret string) (models.WebhookEndpoint, error) {
	id := models.NewID("whep")
	// The secret is key material: sealed under the KEK when there is one.
	row := webhookEndpointRow{ID: id, TenantID: ep.TenantID, AgentID: optional(ep.AgentID),
		URL: ep.URL, Secret: s.sealKey(column("webhook_endpoints", "secret"), id, []byte(secret)),
		Description: ep.Description, CreatedAt: ms(s.clock.Now())}
	limit := models.MaxAgentWebhookEndpoints
	if ep.AgentID == "" {
		limit = models.MaxTenantWebhookEndpoints
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ctx, c := raw(tx)
		if s.dialect == Postgres {
			// Taken before the INSERT, whose snapshot then holds what
			// the registration before this one stored.
			if _, err := c.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, endpointsLock,
				ep.TenantID+"/"+ep.AgentID); err != nil {
				return err
			}
		}
		n, err := execCount(ctx, c, `INSERT INTO webhook_endpoints (id, tenant_id, agent_id, url, secret, description, created_at)
			SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), CAST($3 AS TEXT), CAST($4 AS TEXT), CAST($5 AS TEXT), CAST($6 AS TEXT), CAST($7 AS BIGINT)
			WHERE (SELECT COUNT(*) FROM webhook_endpoints w WHERE w.tenant_id = $2 AND COALESCE(w.agent_id, '') = $8
			    AND w.disabled_at IS NULL) < $9
			  AND NOT EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.tenant_id = $2 AND COALESCE(w.agent_id, '') = $8
			    AND w.url = $4 AND w.disabled_at IS NULL)`,
			row.ID, row.TenantID, row.AgentID, row.URL, row.Secret, row.Description, row.CreatedAt, ep.AgentID, limit)
		if err != nil {
			return err
		}
		if n == 1 {
			return appendAudit(tx, row.TenantID, fromMS(row.CreatedAt), adminEvent(models.AuditWebhookCreated, actor, endpointData(row)))
		}
		var same []string
		if err := tx.Model(&webhookEndpointRow{}).Where("tenant_id = ? AND COALESCE(agent_id, '') = ? AND url = ? AND disabled_at IS NULL",
			ep.TenantID, ep.AgentID, ep.URL).Limit(1).Pluck("id", &same).Error; err != nil {
			return err
		}
		if len(same) > 0 {
			return &models.Error{Code: models.EAlreadyExists,
				Message: "an endpoint for this URL is registered already (" + same[0] + "); its secret was shown when it was registered. Delete it first to register the URL with a new secret",
				Fields:  []models.FieldProblem{{Pointer: "/url", Message: "registered already"}},
				Details: map[string]any{"endpoint_id": same[0]}}
		}
		who := "an agent"
		if ep.AgentID == "" {
			who = "an organization's own endpoints (for all its agents)"
		}
		return &models.Error{Code: models.EInvalidRequest,
			Message: fmt.Sprintf("%s may have at most %d live webhook endpoints; delete one before registering another", who, limit),
			Fields:  []models.FieldProblem{{Pointer: "/url", Message: fmt.Sprintf("at most %d endpoints", limit)}},
			Details: map[string]any{"limit": "webhook_endpoints", "max": limit}}
	})
	if err != nil {
		return models.WebhookEndpoint{}, err
	}
	return row.model(), nil
}

// WebhookEndpoints lists the endpoints in scope, disabled ones included,
// newest first.
func (s *Store) WebhookEndpoints(ctx context.Context, sc models.EndpointScope) ([]models.WebhookEndpoint, error) {
	var rows []webhookEndpointRow
	if err := scopeWhere(sc, s.db.WithContext(ctx)).Order("created_at DESC, id DESC").Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	out := make([]models.WebhookEndpoint, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// DisableWebhookEndpoint stops new deliveries to an endpoint in scope and
// cancels its pending ones (they become failed with the reason), and
// appends an admin.webhook_disabled entry naming actor (the agent or the
// administrator) in the same transaction. ENotFound for endpoints outside
// the scope or already disabled, which appends nothing.
func (s *Store) DisableWebhookEndpoint(ctx context.Context, actor string, sc models.EndpointScope, id string, now time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := scopeWhere(sc, tx.Model(&webhookEndpointRow{})).Where("id = ? AND disabled_at IS NULL", id).
			Update("disabled_at", ms(now))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return models.Errorf(models.ENotFound, "no webhook endpoint %q", id)
		}
		cancelled := tx.Model(&deliveryRow{}).
			Where("channel = ? AND target = ? AND status = ?", models.ChannelWebhook, id, string(models.DeliveryPending)).
			Updates(map[string]any{"status": string(models.DeliveryFailed), "last_error": "endpoint disabled",
				"updated_at": ms(now)})
		if cancelled.Error != nil {
			return cancelled.Error
		}
		var row webhookEndpointRow
		if err := tx.Select("id", "tenant_id", "agent_id", "url").Where("tenant_id = ? AND id = ?", sc.TenantID, id).
			Take(&row).Error; err != nil {
			return err
		}
		data := endpointData(row)
		data["cancelled_deliveries"] = cancelled.RowsAffected
		return appendAudit(tx, row.TenantID, now, adminEvent(models.AuditWebhookDisabled, actor, data))
	})
}

// WebhookTarget returns where a webhook delivery goes: the endpoint's URL
// and its signing secret. It is the only place a secret is read back.
// EInvalidState when the endpoint was disabled.
func (s *Store) WebhookTarget(ctx context.Context, endpointID string) (url, secret string, err error) {
	var row webhookEndpointRow
	if err := s.db.WithContext(ctx).Select("id", "url", "secret", "disabled_at").Where("id = ?", endpointID).Take(&row).Error; err != nil {
		return "", "", notFound(err, "no webhook endpoint %q", endpointID)
	}
	if row.DisabledAt != nil {
		return "", "", models.Errorf(models.EInvalidState, "the endpoint was disabled")
	}
	plain, err := s.openKey(column("webhook_endpoints", "secret"), row.ID, row.Secret)
	if err != nil {
		return "", "", err
	}
	return row.URL, string(plain), nil
}

// DueFilter selects the deliveries DueDeliveries lists: those of one
// channel, except the ones to the targets, of the tenants and (webhooks)
// to the endpoint scopes a dispatcher already has as many attempts in
// flight for as it allows.
type DueFilter struct {
	Channel       string
	ExceptTargets []string
	ExceptTenants []string
	// ExceptScopes are endpoint scopes: an agent's own endpoints
	// (AgentID set) or a tenant's tenant-wide ones (AgentID empty). Only
	// the webhook channel has them.
	ExceptScopes []models.EndpointScope
}

// DueDelivery is a delivery that was due when listed; ClaimDelivery takes
// it, if no other dispatcher did first.
type DueDelivery struct {
	ID, TenantID, Target string
	// Agent is the agent whose own endpoint Target is; empty for a
	// tenant-wide endpoint and for a notification. With TenantID it is
	// the endpoint's scope.
	Agent string
}

// Scope is the endpoint scope of a webhook delivery.
func (d DueDelivery) Scope() models.EndpointScope {
	return models.EndpointScope{TenantID: d.TenantID, AgentID: d.Agent}
}

// DueDeliveries lists up to limit deliveries of f's channel that are due at
// now, oldest due first: pending, their next attempt time come and no lease
// held on them. It claims nothing: a dispatcher picks from the list what
// its bounds allow and claims each with ClaimDelivery.
func (s *Store) DueDeliveries(ctx context.Context, f DueFilter, now time.Time, limit int) ([]DueDelivery, error) {
	q := s.db.WithContext(ctx).Table("deliveries AS d").
		Where("d.status = ? AND d.next_attempt_at <= ? AND d.lease_until <= ? AND d.channel = ?",
			string(models.DeliveryPending), ms(now), ms(now), f.Channel)
	if f.Channel == models.ChannelWebhook {
		// A webhook's target is its endpoint, whose agent (none for a
		// tenant-wide one) never changes: the scope is read with the
		// delivery, in the same statement.
		q = q.Select("d.id, d.tenant_id, d.target, COALESCE(w.agent_id, '') AS agent").
			Joins("LEFT JOIN webhook_endpoints w ON w.id = d.target")
		var agents, tenants []string
		for _, sc := range f.ExceptScopes {
			if sc.AgentID != "" {
				agents = append(agents, sc.AgentID)
			} else {
				tenants = append(tenants, sc.TenantID)
			}
		}
		// Agent ids are unique across tenants, and none is empty.
		if len(agents) > 0 {
			q = q.Where("COALESCE(w.agent_id, '') NOT IN ?", agents)
		}
		if len(tenants) > 0 {
			q = q.Where("(COALESCE(w.agent_id, '') <> '' OR d.tenant_id NOT IN ?)", tenants)
		}
	} else {
		q = q.Select("d.id, d.tenant_id, d.target, '' AS agent")
	}
	if len(f.ExceptTargets) > 0 {
		q = q.Where("d.target NOT IN ?", f.ExceptTargets)
	}
	if len(f.ExceptTenants) > 0 {
		q = q.Where("d.tenant_id NOT IN ?", f.ExceptTenants)
	}
	var out []DueDelivery
	if err := q.Order("d.next_attempt_at, d.id").Limit(limit).Scan(&out).Error; err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// ClaimDelivery takes a due delivery for one attempt and returns it with
// its event and the new attempt number in Attempts; nil when it is not due
// any more (another dispatcher claimed it, a person disabled its endpoint).
// The claim is a conditional UPDATE that sets the lease and counts the
// attempt, so of several dispatchers over one database exactly one gets the
// row.
func (s *Store) ClaimDelivery(ctx context.Context, id string, now time.Time, lease time.Duration) (*models.Delivery, error) {
	var got *models.Delivery
	err := s.tx(ctx, func(tx *gorm.DB) error {
		got = nil
		res := tx.Model(&deliveryRow{}).
			Where("id = ? AND status = ? AND next_attempt_at <= ? AND lease_until <= ?",
				id, string(models.DeliveryPending), ms(now), ms(now)).
			Updates(map[string]any{"lease_until": ms(now.Add(lease)), "attempts": gorm.Expr("attempts + 1"),
				"updated_at": ms(now)})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		var row deliveryRow
		if err := tx.Where("id = ?", id).Take(&row).Error; err != nil {
			return err
		}
		var ev eventRow
		if err := tx.Where("id = ?", row.EventID).Take(&ev).Error; err != nil {
			return err
		}
		m := row.model(ev.model())
		got = &m
		return nil
	})
	return got, err
}

// AttemptResult is the outcome of one delivery attempt.
type AttemptResult struct {
	OK         bool
	StatusCode int
	Error      string
	Duration   time.Duration
	// RetryAt is when to try again after a failure; zero gives up (the
	// delivery becomes failed).
	RetryAt time.Time
}

// FinishDelivery records attempt number attempt of a delivery and its
// outcome, and releases the lease: succeeded, pending again at RetryAt, or
// failed. A result for an attempt that no longer owns the delivery (its
// lease ran out and another attempt began, or a person redelivered it) is
// logged but changes nothing else; ok reports whether it applied.
func (s *Store) FinishDelivery(ctx context.Context, id string, attempt int, r AttemptResult, now time.Time) (ok bool, err error) {
	err = s.tx(ctx, func(tx *gorm.DB) error {
		ok = false
		set := map[string]any{"lease_until": 0, "last_code": r.StatusCode, "last_error": r.Error, "updated_at": ms(now)}
		switch {
		case r.OK:
			set["status"] = string(models.DeliverySucceeded)
			set["delivered_at"] = ms(now)
		case !r.RetryAt.IsZero():
			set["next_attempt_at"] = ms(r.RetryAt)
		default:
			set["status"] = string(models.DeliveryFailed)
		}
		res := tx.Model(&deliveryRow{}).Where("id = ? AND status = ? AND attempts = ?", id, string(models.DeliveryPending), attempt).
			Updates(set)
		if res.Error != nil {
			return res.Error
		}
		ok = res.RowsAffected == 1
		_, err := insertOnce(tx, &deliveryAttemptRow{ID: models.NewID("dla"), DeliveryID: id, Attempt: attempt,
			StatusCode: r.StatusCode, Error: r.Error, DurationMs: r.Duration.Milliseconds(), CreatedAt: ms(now)})
		return err
	})
	return ok, err
}

// Redeliver makes a delivery of the tenant due again now, whatever its
// outcome so far, unless an attempt holds it at this moment
// (EInvalidState). The attempt count goes on. The same transaction
// appends an admin.delivery_redelivered entry naming actor, the
// administrator; a refused redelivery appends none. ENotFound for other
// tenants' deliveries.
func (s *Store) Redeliver(ctx context.Context, actor, tenantID, id string, now time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&deliveryRow{}).Where("tenant_id = ? AND id = ? AND lease_until <= ?", tenantID, id, ms(now)).
			Updates(map[string]any{"status": string(models.DeliveryPending), "next_attempt_at": ms(now),
				"delivered_at": nil, "updated_at": ms(now)})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 1 {
			data, err := redeliveryData(tx, tenantID, id)
			if err != nil {
				return err
			}
			return appendAudit(tx, tenantID, now, adminEvent(models.AuditDeliveryRedelivered, actor, data))
		}
		var row deliveryRow
		if err := tx.Select("id").Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
			return notFound(err, "no delivery %q", id)
		}
		return models.Errorf(models.EInvalidState, "the delivery is being attempted right now")
	})
}

// redeliveryData is what an admin.delivery_redelivered entry records: the
// delivery, its event and proposal, its channel and, for a webhook, the
// endpoint (as endpointData).
func redeliveryData(tx *gorm.DB, tenantID, id string) (map[string]any, error) {
	var d deliveryRow
	if err := tx.Select("id", "event_id", "channel", "target").Where("tenant_id = ? AND id = ?", tenantID, id).Take(&d).Error; err != nil {
		return nil, err
	}
	var ev eventRow
	if err := tx.Select("id", "proposal_id").Where("tenant_id = ? AND id = ?", tenantID, d.EventID).Take(&ev).Error; err != nil {
		return nil, err
	}
	data := map[string]any{"delivery_id": d.ID, "event_id": d.EventID, "proposal_id": ev.ProposalID, "channel": d.Channel}
	if d.Channel != models.ChannelWebhook {
		return data, nil
	}
	var ep webhookEndpointRow
	if err := tx.Select("id", "tenant_id", "agent_id", "url").Where("tenant_id = ? AND id = ?", tenantID, d.Target).Take(&ep).Error; err != nil {
		return nil, err
	}
	for k, v := range endpointData(ep) {
		data[k] = v
	}
	return data, nil
}

// DeliveryFilter selects deliveries for DeliveryLog.
type DeliveryFilter struct {
	TenantID string
	Channel  string // "" = every channel
	Target   string // "" = every target
	Limit    int
}

// DeliveryLog returns the tenant's most recent deliveries, newest first,
// with their events.
func (s *Store) DeliveryLog(ctx context.Context, f DeliveryFilter) ([]models.Delivery, error) {
	limit := f.Limit
	if limit <= 0 || limit > 200 {
		limit = 50
	}
	q := s.db.WithContext(ctx).Where("tenant_id = ?", f.TenantID)
	if f.Channel != "" {
		q = q.Where("channel = ?", f.Channel)
	}
	if f.Target != "" {
		q = q.Where("target = ?", f.Target)
	}
	var rows []deliveryRow
	if err := q.Order("created_at DESC, id DESC").Limit(limit).Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.EventID
	}
	var evs []eventRow
	if len(ids) > 0 {
		if err := s.db.WithContext(ctx).Where("id IN ?", ids).Find(&evs).Error; err != nil {
			return nil, dbErr(err)
		}
	}
	byID := make(map[string]models.Event, len(evs))
	for _, e := range evs {
		byID[e.ID] = e.model()
	}
	out := make([]models.Delivery, len(rows))
	for i, r := range rows {
		out[i] = r.model(byID[r.EventID])
	}
	return out, nil
}

// Delivery returns one delivery of the tenant with its event; ENotFound
// for other tenants' deliveries.
func (s *Store) Delivery(ctx context.Context, tenantID, id string) (models.Delivery, error) {
	var row deliveryRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
		return models.Delivery{}, notFound(err, "no delivery %q", id)
	}
	var ev eventRow
	if err := s.db.WithContext(ctx).Where("id = ?", row.EventID).Take(&ev).Error; err != nil {
		return models.Delivery{}, dbErr(err)
	}
	return row.model(ev.model()), nil
}

// DeliveryAttempts returns the attempts of a delivery of the tenant, oldest
// first; ENotFound for other tenants' deliveries.
func (s *Store) DeliveryAttempts(ctx context.Context, tenantID, id string) ([]models.DeliveryAttempt, error) {
	var d deliveryRow
	if err := s.db.WithContext(ctx).Select("id").Where("tenant_id = ? AND id = ?", tenantID, id).Take(&d).Error; err != nil {
		return nil, notFound(err, "no delivery %q", id)
	}
	var rows []deliveryAttemptRow
	if err := s.db.WithContext(ctx).Where("delivery_id = ?", id).Order("attempt").Find(&rows).Error; err != nil {
		return nil, dbErr(err)
	}
	out := make([]models.DeliveryAttempt, len(rows))
	for i, r := range rows {
		out[i] = models.DeliveryAttempt{Attempt: r.Attempt, StatusCode: r.StatusCode, Error: r.Error,
			Duration: time.Duration(r.DurationMs) * time.Millisecond, At: fromMS(r.CreatedAt)}
	}
	return out, nil
}

// DeliveryBacklog counts the deliveries still pending, per channel: what
// the dispatchers have yet to send (including those waiting for a retry).
func (s *Store) DeliveryBacklog(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Channel string
		N       int64
	}
	err := s.db.WithContext(ctx).Model(&deliveryRow{}).Select("channel, COUNT(*) AS n").
		Where("status = ?", string(models.DeliveryPending)).Group("channel").Scan(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		out[r.Channel] = r.N
	}
	return out, nil
}
