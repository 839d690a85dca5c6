package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type eventRow struct {
	ID         string `gorm:"primaryKey"`
	TenantID   string
	AgentID    string
	ProposalID string
	Type       string
	Status     string
	Revision   int64
	Payload    string
	CreatedAt  int64 `gorm:"autoCreateTime:false"`
}

func (eventRow) TableName() string { return "events" }

func (r eventRow) model() models.Event {
	return models.Event{ID: r.ID, TenantID: r.TenantID, AgentID: r.AgentID, ProposalID: r.ProposalID,
		Type: models.EventType(r.Type), Status: models.Status(r.Status), Revision: r.Revision,
		Data: json.RawMessage(r.Payload), CreatedAt: fromMS(r.CreatedAt)}
}

type deliveryRow struct {
	ID            string `gorm:"primaryKey"`
	TenantID      string
	EventID       string
	Channel       string
	Target        string
	Status        string
	Attempts      int
	NextAttemptAt int64
	LeaseUntil    int64
	LastCode      int
	LastError     string
	CreatedAt     int64 `gorm:"autoCreateTime:false"`
	UpdatedAt     int64 `gorm:"autoUpdateTime:false"`
	DeliveredAt   *int64
}

func (deliveryRow) TableName() string { return "deliveries" }

func (r deliveryRow) model(ev models.Event) models.Delivery {
	return models.Delivery{ID: r.ID, TenantID: r.TenantID, Event: ev, Channel: r.Channel, Target: r.Target,
		Status: models.DeliveryStatus(r.Status), Attempts: r.Attempts, NextAttemptAt: fromMS(r.NextAttemptAt),
		LastCode: r.LastCode, LastError: r.LastError, CreatedAt: fromMS(r.CreatedAt),
		DeliveredAt: fromMSPtr(r.DeliveredAt)}
}

// recordEvent appends to the outbox the event of a change the enclosing
// transaction just made to proposal id, and the deliveries it owes: one per
// enabled webhook endpoint that sees the proposal's agent and, when the
// proposal starts awaiting a person, one per notification channel. The
// event carries the proposal's status and revision as the transaction left
// them. Every state change calls it right after its conditional UPDATE
// matched, so the event commits if and only if the change does.
func (s *Store) recordEvent(tx *gorm.DB, tenantID, proposalID string, typ models.EventType, now time.Time, data map[string]any) error {
	return s.recordEvents(tx, tenantID, proposalID, now, outboxEvent{typ: typ, data: data})
}

// outboxEvent is one event recordEvents appends.
type outboxEvent struct {
	typ  models.EventType
	data map[string]any
	// For one of several changes that one statement made at once (an
	// execute that moved the proposal through executing to its outcome):
	// the status the event records instead of the proposal's, how many
	// revisions before the proposal's it was, and when it happened (the
	// zero time: recordEvents' now).
	status models.Status
	back   int64
	at     time.Time
}

// recordEvents is recordEvent for several events of one change (a new
// proposal is created and awaits a person), in one statement.
func (s *Store) recordEvents(tx *gorm.DB, tenantID, proposalID string, now time.Time, evs ...outboxEvent) error {
	// The events take the proposal's agent, status and revision as this
	// transaction sees them, and name the webhook endpoints that see that
	// agent, in the one statement that records them: an INSERT … SELECT of
	// the proposal joined with the events' own values.
	ids := make([]string, len(evs))
	values := make([]string, len(evs))
	args := make([]any, 0, 4+6*len(evs)) // $1 tenant, $2 proposal, six per event, the announcement's two
	args = append(args, tenantID, proposalID)
	for i, ev := range evs {
		payload := []byte("{}")
		if len(ev.data) > 0 {
			b, err := json.Marshal(ev.data)
			if err != nil {
				return models.Wrap(models.EInternal, err, "cannot encode event")
			}
			payload = b
		}
		ids[i] = models.NewID("evt")
		n := len(args)
		p := func(k int) string { return "$" + strconv.Itoa(n+k) }
		values[i] = "SELECT CAST(" + p(1) + " AS TEXT) AS id, CAST(" + p(2) + " AS TEXT) AS type, CAST(" + p(3) +
			" AS TEXT) AS payload, CAST(" + p(4) + " AS TEXT) AS status, CAST(" + p(5) + " AS BIGINT) AS back, CAST(" +
			p(6) + " AS BIGINT) AS created_at"
		at := now
		if !ev.at.IsZero() {
			at = ev.at
		}
		args = append(args, ids[i], string(ev.typ), string(payload), string(ev.status), ev.back, ms(at))
	}
	// On PostgreSQL the same statement announces the change to every
	// instance (NOTIFY, delivered when the transaction commits, and only
	// then; the events of one change share one notification): every change
	// records its events here, so none goes unannounced, and announcing
	// costs no round trip of its own.
	agg, announce := "group_concat(id, ',')", "''"
	if s.dialect == Postgres {
		agg = "string_agg(id, ',')"
		args = append(args, changeChannel, Change{Source: s.instanceID(), TenantID: tenantID, ID: proposalID}.payload())
		announce = "CAST(pg_notify($" + strconv.Itoa(len(args)-1) + ", $" + strconv.Itoa(len(args)) + ") AS TEXT)"
	}
	ctx, c := raw(tx)
	rows, err := c.QueryContext(ctx, `INSERT INTO events (id, tenant_id, agent_id, proposal_id, type, status, revision, payload, created_at)
		SELECT v.id, p.tenant_id, p.agent_id, p.id, v.type, CASE WHEN v.status = '' THEN p.status ELSE v.status END,
		  p.revision - v.back, v.payload, v.created_at
		FROM proposals p CROSS JOIN (`+strings.Join(values, " UNION ALL ")+`) AS v WHERE p.tenant_id = $1 AND p.id = $2
		RETURNING (SELECT `+agg+` FROM webhook_endpoints w WHERE w.tenant_id = $1 AND w.disabled_at IS NULL
		  AND (w.agent_id IS NULL OR w.agent_id = (SELECT agent_id FROM proposals WHERE tenant_id = $1 AND id = $2))) AS endpoints,
		  `+announce+` AS announced`,
		args...)
	if err != nil {
		return err
	}
	var (
		got       int
		list      sql.NullString
		announced string
	)
	for rows.Next() {
		if err := rows.Scan(&list, &announced); err != nil {
			rows.Close()
			return err
		}
		got++
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	if got != len(evs) {
		return gorm.ErrRecordNotFound
	}
	var endpoints []string
	if list.String != "" {
		endpoints = strings.Split(list.String, ",")
		slices.Sort(endpoints)
	}
	var (
		dvals []string
		dargs []any
	)
	for i, ev := range evs {
		add := func(channel, target string) {
			n := len(dargs)
			// id, tenant, event, channel, target, status, next attempt,
			// created and updated (all now).
			dvals = append(dvals, "($"+strconv.Itoa(n+1)+", $"+strconv.Itoa(n+2)+", $"+strconv.Itoa(n+3)+", $"+
				strconv.Itoa(n+4)+", $"+strconv.Itoa(n+5)+", $"+strconv.Itoa(n+6)+", 0, $"+strconv.Itoa(n+7)+
				", 0, 0, '', $"+strconv.Itoa(n+7)+", $"+strconv.Itoa(n+7)+", NULL)")
			dargs = append(dargs, models.NewID("dlv"), tenantID, ids[i], channel, target, string(models.DeliveryPending), ms(now))
		}
		for _, id := range endpoints {
			add(models.ChannelWebhook, id)
		}
		if ev.typ == models.StatusEvent(models.StatusAwaitingConfirmation) {
			for _, ch := range s.notify {
				add(ch, ch)
			}
		}
	}
	if len(dvals) == 0 {
		return nil
	}
	_, err = c.ExecContext(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, channel, target, status, attempts,
		next_attempt_at, lease_until, last_code, last_error, created_at, updated_at, delivered_at) VALUES `+
		strings.Join(dvals, ", "), dargs...)
	return err
}

// EventsAfter returns up to limit events of one agent's proposals whose id
// sorts after afterID ("" = from the oldest), oldest first. It is the SSE
// stream's source and its resume point.
func (s *Store) EventsAfter(ctx context.Context, tenantID, agentID, afterID string, limit int) ([]models.Event, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	var rows []eventRow
	err := s.db.WithContext(ctx).
		Where("tenant_id = ? AND agent_id = ? AND id > ?", tenantID, agentID, afterID).
		Order("id").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	out := make([]models.Event, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// LatestAgentEventID returns the highest id among the agent's events
// committed so far, or "" when there is none.
func (s *Store) LatestAgentEventID(ctx context.Context, tenantID, agentID string) (string, error) {
	var ids []string
	err := s.db.WithContext(ctx).Model(&eventRow{}).
		Where("tenant_id = ? AND agent_id = ?", tenantID, agentID).
		Order("id DESC").Limit(1).Pluck("id", &ids).Error
	if err != nil || len(ids) == 0 {
		return "", dbErr(err)
	}
	return ids[0], nil
}

// AgentEvent returns one event of the agent's proposals, or ENotFound (also
// for other agents' and tenants' events).
func (s *Store) AgentEvent(ctx context.Context, tenantID, agentID, id string) (models.Event, error) {
	var row eventRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND agent_id = ? AND id = ?", tenantID, agentID, id).Take(&row).Error
	if err != nil {
		return models.Event{}, notFound(err, "no event %q", id)
	}
	return row.model(), nil
}

// EventIDAt is the smallest event id that an event created at t or later
// can have: a lower bound for EventsAfter when looking back in time.
func EventIDAt(t time.Time) string {
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(t))
	return "evt_" + strings.ToLower(id.String())
}
