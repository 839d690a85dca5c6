package store

import (
	"context"
	"database/sql"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/countersign/countersign/models"
)

type limitOverrideRow struct {
	TenantID           string `gorm:"primaryKey"`
	AgentID            string `gorm:"primaryKey"`
	ProposalsPerMinute *int
	OpenProposals      *int
	ConcurrentWaits    *int
	UpdatedAt          int64 `gorm:"autoUpdateTime:false"`
}

func (limitOverrideRow) TableName() string { return "limit_overrides" }

func (r limitOverrideRow) model() models.LimitOverride {
	return models.LimitOverride{ProposalsPerMinute: r.ProposalsPerMinute, OpenProposals: r.OpenProposals,
		ConcurrentWaits: r.ConcurrentWaits}
}

type agentUsageRow struct {
	AgentID   string `gorm:"primaryKey"`
	RateTatUs int64  `gorm:"column:rate_tat_us"`
}

func (agentUsageRow) TableName() string { return "agent_usage" }

type agentWaitRow struct {
	ID        string `gorm:"primaryKey"`
	AgentID   string
	ExpiresAt int64
}

func (agentWaitRow) TableName() string { return "agent_waits" }

// LimitOverrides returns what is set for the tenant and for one of its agents
// (agentID "" reads only the tenant's). Every create reads them first, so
// they are read on the reader pool: on SQLite they never wait for the one
// writer connection.
//
// The read is plain SQL: GORM's building and reflective scanning of it
// were a twentieth of a create's CPU.
func (s *Store) LimitOverrides(ctx context.Context, tenantID, agentID string) (tenant, agent models.LimitOverride, err error) {
	rows, err := s.readDB.QueryContext(ctx, `SELECT agent_id, proposals_per_minute, open_proposals, concurrent_waits
 FROM limit_overrides WHERE tenant_id = $1 AND agent_id IN ('', $2)`, tenantID, agentID)
	if err != nil {
		return tenant, agent, dbErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r                    limitOverrideRow
			perMinute, open, wts sql.NullInt64
		)
		if err := rows.Scan(&r.AgentID, &perMinute, &open, &wts); err != nil {
			return tenant, agent, dbErr(err)
		}
		r.ProposalsPerMinute, r.OpenProposals, r.ConcurrentWaits = intOrNil(perMinute), intOrNil(open), intOrNil(wts)
		if r.AgentID == "" {
			tenant = r.model()
		} else {
			agent = r.model()
		}
	}
	return tenant, agent, dbErr(rows.Err())
}

// intOrNil is a nullable column's value, nil for NULL.
func intOrNil(v sql.NullInt64) *int {
	if !v.Valid {
		return nil
	}
	n := int(v.Int64)
	return &n
}

// EffectiveLimits returns the limits that hold for the agent: defaults, then
// the tenant's overrides, then the agent's.
func (s *Store) EffectiveLimits(ctx context.Context, tenantID, agentID string, defaults models.Limits) (models.Limits, error) {
	tenant, agent, err := s.LimitOverrides(ctx, tenantID, agentID)
	if err != nil {
		return models.Limits{}, err
	}
	return defaults.Apply(tenant).Apply(agent), nil
}

// SetLimitOverride replaces what is set for the tenant (agentID "") or one of
// its agents; an override with no field set removes it. Negative values are
// EInvalidRequest; an agent of another tenant is ENotFound.
func (s *Store) SetLimitOverride(ctx context.Context, tenantID, agentID string, o models.LimitOverride, now time.Time) error {
	for _, v := range []*int{o.ProposalsPerMinute, o.OpenProposals, o.ConcurrentWaits} {
		if v != nil && *v < 0 {
			return models.Errorf(models.EInvalidRequest, "a limit is a number of 0 (no limit) or more")
		}
	}
	return s.tx(ctx, func(tx *gorm.DB) error {
		if agentID != "" {
			var a agentRow
			if err := tx.Select("id").Where("tenant_id = ? AND id = ?", tenantID, agentID).Take(&a).Error; err != nil {
				return notFound(err, "no agent %q in this tenant", agentID)
			}
		}
		if o.ProposalsPerMinute == nil && o.OpenProposals == nil && o.ConcurrentWaits == nil {
			return tx.Where("tenant_id = ? AND agent_id = ?", tenantID, agentID).Delete(&limitOverrideRow{}).Error
		}
		// One upsert: two administrators setting the same override at once
		// both succeed, the later write winning whole (a delete and an
		// insert would collide on the key).
		return tx.Clauses(clause.OnConflict{
			Columns:   []clause.Column{{Name: "tenant_id"}, {Name: "agent_id"}},
			DoUpdates: clause.AssignmentColumns([]string{"proposals_per_minute", "open_proposals", "concurrent_waits", "updated_at"}),
		}).Create(&limitOverrideRow{TenantID: tenantID, AgentID: agentID, ProposalsPerMinute: o.ProposalsPerMinute,
			OpenProposals: o.OpenProposals, ConcurrentWaits: o.ConcurrentWaits, UpdatedAt: ms(now)}).Error
	})
}

// lockAgent makes sure the agent's usage row exists and locks it until the
// transaction ends (PostgreSQL row lock; SQLite has one writer anyway), so
// that counts taken after it cannot be raced by the agent's other requests
// on any instance.
func lockAgent(tx *gorm.DB, agentID string) error {
	if _, err := insertOnce(tx, &agentUsageRow{AgentID: agentID}); err != nil {
		return err
	}
	return tx.Exec("UPDATE agent_usage SET rate_tat_us = rate_tat_us WHERE agent_id = ?", agentID).Error
}

// rateWindowUS is the window of the proposal rate, in microseconds.
const rateWindowUS = int64(time.Minute / time.Microsecond)

// TakeProposal spends one of the agent's proposals per minute, or returns
// ERateLimited saying when the next one is free. The rate is a generic cell
// rate algorithm with a burst of the whole minute: perMinute proposals at
// once, then one every minute/perMinute. A single conditional UPDATE of the
// agent's row decides, so instances sharing the database share the rate.
func (s *Store) TakeProposal(ctx context.Context, agentID string, perMinute int, now time.Time) error {
	interval := max(rateWindowUS/int64(perMinute), 1)
	at := now.UnixMicro()
	return s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := insertOnce(tx, &agentUsageRow{AgentID: agentID}); err != nil {
			return err
		}
		res := tx.Exec(`UPDATE agent_usage
			SET rate_tat_us = (CASE WHEN rate_tat_us > ? THEN rate_tat_us ELSE ? END) + ?
			WHERE agent_id = ? AND (CASE WHEN rate_tat_us > ? THEN rate_tat_us ELSE ? END) + ? <= ?`,
			at, at, interval, agentID, at, at, interval, at+rateWindowUS)
		if res.Error != nil || res.RowsAffected == 1 {
			return res.Error
		}
		var row agentUsageRow
		if err := tx.Where("agent_id = ?", agentID).Take(&row).Error; err != nil {
			return err
		}
		wait := time.Duration(max(row.RateTatUs, at)+interval-rateWindowUS-at) * time.Microsecond
		return models.RateLimited("proposals_per_minute", wait,
			"this agent may create %d proposals a minute; try again in %d s", perMinute, models.RetrySeconds(wait))
	})
}

// openProposalsLimited returns ERateLimited when, within tx and after the
// agent's row was locked, the agent has more than maxOpen proposals
// awaiting confirmation at now (the one just inserted included).
func openProposalsLimited(tx *gorm.DB, agentID string, maxOpen int, now time.Time) error {
	var open struct {
		N       int64
		Soonest *int64
	}
	err := tx.Raw(`SELECT COUNT(*) AS n, MIN(expires_at) AS soonest FROM proposals
		WHERE agent_id = ? AND `+awaitingProposal+` AND expires_at > ?`,
		agentID, ms(now)).Scan(&open).Error
	if err != nil {
		return err
	}
	if open.N <= int64(maxOpen) {
		return nil
	}
	wait := time.Second
	if open.Soonest != nil {
		wait = fromMS(*open.Soonest).Sub(now)
	}
	return models.RateLimited("open_proposals", wait,
		"this agent may have %d proposals awaiting confirmation at once; wait for a decision or cancel one", maxOpen)
}

// WaitSlack keeps a long-poll's row a little longer than the long-poll, so
// that a slow release does not free the slot early; a row of a crashed
// instance lasts that much longer than its long-poll.
const WaitSlack = 10 * time.Second

// AcquireWait records a long-poll of the agent lasting up to d, unless the
// agent already holds maxWaits of them (ERateLimited). The count and the
// insert are one transaction under the lock of the agent's row, so the
// limit holds across instances. The caller ends it with ReleaseWait.
func (s *Store) AcquireWait(ctx context.Context, agentID string, maxWaits int, now time.Time, d time.Duration) (string, error) {
	id := models.NewID("wait")
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := lockAgent(tx, agentID); err != nil {
			return err
		}
		if err := tx.Where("agent_id = ? AND expires_at <= ?", agentID, ms(now)).Delete(&agentWaitRow{}).Error; err != nil {
			return err
		}
		var held struct {
			N       int64
			Soonest *int64
		}
		if err := tx.Raw("SELECT COUNT(*) AS n, MIN(expires_at) AS soonest FROM agent_waits WHERE agent_id = ?",
			agentID).Scan(&held).Error; err != nil {
			return err
		}
		if held.N >= int64(maxWaits) {
			wait := time.Second
			if held.Soonest != nil {
				wait = fromMS(*held.Soonest).Add(-WaitSlack).Sub(now)
			}
			return models.RateLimited("concurrent_waits", wait,
				"this agent may hold %d long-polls at once; wait for one to return", maxWaits)
		}
		return tx.Create(&agentWaitRow{ID: id, AgentID: agentID, ExpiresAt: ms(now.Add(d + WaitSlack))}).Error
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// ReleaseWait ends a long-poll recorded by AcquireWait.
func (s *Store) ReleaseWait(ctx context.Context, id string) error {
	return dbErr(s.db.WithContext(ctx).Where("id = ?", id).Delete(&agentWaitRow{}).Error)
}
