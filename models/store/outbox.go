package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"gorm.io/gorm"
)

// OutboxPruned counts what one PruneOutbox call deleted.
type OutboxPruned struct {
	Events, Deliveries, Attempts int64
	// Considered is how many events no pending delivery held in the
	// batch; Through is the highest of their ids ("" when there was none).
	Considered int
	Through    string
}

// Add adds the counts of o to p and keeps the later Through.
func (p *OutboxPruned) Add(o OutboxPruned) {
	p.Events += o.Events
	p.Deliveries += o.Deliveries
	p.Attempts += o.Attempts
	p.Considered += o.Considered
	p.Through = max(p.Through, o.Through)
}

// PruneOutbox deletes, in one transaction, up to limit events whose ids
// sort after after and were minted before before (event ids are ULIDs of
// the wall clock: EventIDAt) and none of whose deliveries is still pending
// or changed at or after before (attempted, redelivered), with their
// deliveries and the deliveries' attempt log. An event a delivery still
// owes stays, however old, with all its deliveries. Through in the result
// is where the next call continues (its after); Considered below limit
// means there is nothing more to prune now. Every call raises the
// pruned-through mark (PrunedThrough) to the highest event id it
// considered.
//
// Several instances may prune at once, and people may redeliver meanwhile:
// a delivery made pending again before it is deleted keeps itself, its
// attempts and its event; one redelivered after is gone (Redeliver answers
// ENotFound). On PostgreSQL the settled deliveries are locked before their
// attempts are deleted, so that a redelivery cannot slip in between; any
// change to a delivery after that moves its updated_at past before, which
// keeps it out of the deletes.
func (s *Store) PruneOutbox(ctx context.Context, after string, before time.Time, limit int) (OutboxPruned, error) {
	var out OutboxPruned
	bound := EventIDAt(before)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		out = OutboxPruned{}
		ctx, c := raw(tx)
		// The batch: the next limit events in id order that no delivery
		// holds. The statements below take the id range (after, through],
		// so that their text is the same at every batch (the statement
		// cache keeps one of each), and skip, as this one does, what a
		// delivery holds.
		rows, err := c.QueryContext(ctx, `SELECT id FROM events e WHERE id > $1 AND id < $2
			AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND (d.status = 'pending' OR d.updated_at >= $3))
			ORDER BY id LIMIT $4`, after, bound, ms(before), limit)
		if err != nil {
			return err
		}
		var n int
		for rows.Next() {
			if err := rows.Scan(&out.Through); err != nil {
				rows.Close()
				return err
			}
			n++
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil || n == 0 {
			return err
		}
		out.Considered = n
		if s.dialect == Postgres {
			if _, err := c.ExecContext(ctx, `SELECT id FROM deliveries WHERE event_id > $1 AND event_id <= $2
				AND status <> 'pending' AND updated_at < $3 ORDER BY id FOR UPDATE`, after, out.Through, ms(before)); err != nil {
				return err
			}
		}
		if out.Attempts, err = execCount(ctx, c, `DELETE FROM delivery_attempts WHERE delivery_id IN
			(SELECT id FROM deliveries WHERE event_id > $1 AND event_id <= $2 AND status <> 'pending' AND updated_at < $3)`,
			after, out.Through, ms(before)); err != nil {
			return err
		}
		if out.Deliveries, err = execCount(ctx, c, `DELETE FROM deliveries WHERE event_id > $1 AND event_id <= $2
			AND status <> 'pending' AND updated_at < $3`, after, out.Through, ms(before)); err != nil {
			return err
		}
		if out.Events, err = execCount(ctx, c, `DELETE FROM events WHERE id > $1 AND id <= $2
			AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id)`, after, out.Through); err != nil {
			return err
		}
		_, err = c.ExecContext(ctx, `INSERT INTO outbox_pruned (singleton, through, updated_at) VALUES (1, $1, $2)
			ON CONFLICT (singleton) DO UPDATE SET through = CASE WHEN excluded.through > outbox_pruned.through
			  THEN excluded.through ELSE outbox_pruned.through END, updated_at = excluded.updated_at`,
			out.Through, ms(s.clock.Now()))
		return err
	})
	return out, err
}

// PrunedThrough returns the highest event id the outbox was pruned
// through ("" when it never was): an event at or below it that is not
// there any more may have been pruned.
func (s *Store) PrunedThrough(ctx context.Context) (string, error) {
	var through string
	err := s.db.WithContext(ctx).Raw(`SELECT through FROM outbox_pruned WHERE singleton = 1`).Row().Scan(&through)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return through, dbErr(err)
}
