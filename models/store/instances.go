package store

import (
	"context"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type instanceRow struct {
	ID          string `gorm:"primaryKey"`
	StartedAt   int64
	HeartbeatAt int64
}

func (instanceRow) TableName() string { return "instances" }

// instanceRetention is how long a silent instance stays registered.
const instanceRetention = 7 * 24 * time.Hour

// instance is the identity of the process using a store, and how old a
// heartbeat may be before its owner counts as dead.
type instance struct {
	id    string
	stale time.Duration
	// beat is the time (Unix milliseconds) of the newest heartbeat this
	// process saw committed: at registration, by Heartbeat or by vouch.
	beat atomic.Int64
}

// RegisterInstance records this process as a running instance with a fresh
// heartbeat at now and returns its id. From then on, executions this store
// consumes or claims name the instance as their owner, and the store treats
// an executing execution whose owner's heartbeat is older than staleAfter
// as abandoned: another instance may claim it before its lease runs out.
// The caller renews the heartbeat (Heartbeat) well within staleAfter.
//
// Instances silent for longer than instanceRetention are deleted on the way:
// every start adds one, and an execution whose owner is gone counts as
// abandoned all the same.
func (s *Store) RegisterInstance(ctx context.Context, now time.Time, staleAfter time.Duration) (string, error) {
	row := instanceRow{ID: models.NewID("ins"), StartedAt: ms(now), HeartbeatAt: ms(now)}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return "", dbErr(err)
	}
	if err := s.db.WithContext(ctx).Where("heartbeat_at < ?", ms(now.Add(-instanceRetention))).Delete(&instanceRow{}).Error; err != nil {
		return "", dbErr(err)
	}
	in := &instance{id: row.ID, stale: staleAfter}
	in.beat.Store(row.HeartbeatAt)
	s.inst.Store(in)
	return row.ID, nil
}

// Heartbeat renews this instance's heartbeat to now. It recreates the
// record if it was removed meanwhile.
func (s *Store) Heartbeat(ctx context.Context, now time.Time) error {
	in := s.inst.Load()
	if in == nil {
		return models.Errorf(models.EInternal, "heartbeat before RegisterInstance")
	}
	res := s.db.WithContext(ctx).Model(&instanceRow{}).Where("id = ?", in.id).Update("heartbeat_at", ms(now))
	if res.Error != nil {
		return dbErr(res.Error)
	}
	if res.RowsAffected == 0 {
		if _, err := insertOnce(s.db.WithContext(ctx), &instanceRow{ID: in.id, StartedAt: ms(now), HeartbeatAt: ms(now)}); err != nil {
			return dbErr(err)
		}
	}
	in.saw(ms(now))
	return nil
}

// saw records a heartbeat at t (Unix milliseconds) as committed, unless a
// newer one was.
func (in *instance) saw(t int64) {
	for {
		old := in.beat.Load()
		if t <= old || in.beat.CompareAndSwap(old, t) {
			return
		}
	}
}

// vouch renews, inside tx, this instance's heartbeat to now when the newest
// one this process saw committed is older than half the staleness limit.
// Every transaction that makes this instance the owner of an attempt in
// flight (a token's redemption, a claimed retry or reconciliation) calls
// it, so that an attempt never starts under a heartbeat that already reads
// as dead: after the database was out of reach for longer than the limit,
// every instance's heartbeat is stale until its next beat, and an attempt
// begun in that moment would be taken over at once by another instance's
// reconciler, which sends the same request to the business system while
// the first is on its way. While the heartbeat is fresh, as it is between
// beats, vouch runs no statement; its UPDATE leaves alone a heartbeat
// another transaction renewed meanwhile. The renewal commits, or is rolled
// back, with the attempt; the caller records it (seen) after the commit.
func (s *Store) vouch(tx *gorm.DB, now time.Time) (renewed bool, err error) {
	in := s.inst.Load()
	if in == nil || ms(now)-in.beat.Load() < in.stale.Milliseconds()/2 {
		return false, nil
	}
	err = tx.Model(&instanceRow{}).Where("id = ? AND heartbeat_at < ?", in.id, ms(now.Add(-in.stale/2))).
		Update("heartbeat_at", ms(now)).Error
	return err == nil, dbErr(err)
}

// seen records a heartbeat renewed by vouch in a transaction that
// committed.
func (s *Store) seen(now time.Time) {
	if in := s.inst.Load(); in != nil {
		in.saw(ms(now))
	}
}

// instanceID is the registered instance's id, or "" before RegisterInstance.
func (s *Store) instanceID() string {
	if in := s.inst.Load(); in != nil {
		return in.id
	}
	return ""
}

// lapsed is the condition under which no attempt holds an execution at now:
// its lease ran out, or it is executing for an instance whose heartbeat is
// older than the staleness limit (or that is not registered at all).
// Without a registered instance only the lease counts.
func (s *Store) lapsed(now time.Time) (string, []any) {
	in := s.inst.Load()
	if in == nil {
		return "lease_until <= ?", []any{ms(now)}
	}
	return "(lease_until <= ? OR (status = ? AND owner_instance <> '' AND NOT EXISTS " +
			"(SELECT 1 FROM instances WHERE instances.id = executions.owner_instance AND instances.heartbeat_at > ?)))",
		[]any{ms(now), string(models.StatusExecuting), ms(now.Add(-in.stale))}
}
