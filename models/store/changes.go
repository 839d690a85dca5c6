package store

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/models"
)

// changeChannel is the PostgreSQL notification channel of proposal changes.
const changeChannel = "countersign_proposals"

// ListenerApplicationName is the application_name of the connection that
// listens for proposal changes, so that operators (and tests) can find it
// in pg_stat_activity.
const ListenerApplicationName = "countersign-listen"

// Change is one proposal change announced by an instance. On PostgreSQL
// the transaction that records a change's events announces it (see
// recordEvents), so every committed change is announced and no other is.
type Change struct {
	// Source is the announcing instance, so that it can skip its own.
	Source   string
	TenantID string
	ID       string
}

// payload is the change as NOTIFY carries it: "source tenant proposal".
// The ids never hold spaces.
func (c Change) payload() string { return c.Source + " " + c.TenantID + " " + c.ID }

// ForeignWriteInterval is how often, on SQLite, the store looks whether
// another process (the command line, e.g. `review approve`) wrote to the
// database file: one cheap PRAGMA per process, whatever the number of
// waiters.
const ForeignWriteInterval = 200 * time.Millisecond

// ListenChanges reports changes made by other instances until ctx ends or
// the connection fails, and returns why it stopped; the caller reconnects.
//
// On PostgreSQL it opens a connection of its own, LISTENs, calls resync once
// it listens (changes before may have been missed) and then fn for every
// change announced by any instance, the caller's own included.
//
// On SQLite, where one server process owns the file but the command line
// may write to it too, it calls resync whenever another process has
// committed a write since the last look (PRAGMA data_version); which
// proposals changed is not known.
func (s *Store) ListenChanges(ctx context.Context, resync func(), fn func(Change)) error {
	if s.dialect != Postgres {
		return s.watchForeignWrites(ctx, resync)
	}
	cfg, err := pgx.ParseConfig(s.url)
	if err != nil {
		return models.Wrap(models.EUnavailable, err, "change notifications: bad database URL")
	}
	cfg.RuntimeParams["application_name"] = ListenerApplicationName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return models.Wrap(models.EUnavailable, err, "change notifications: cannot connect")
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+changeChannel); err != nil {
		return models.Wrap(models.EUnavailable, err, "change notifications: LISTEN failed")
	}
	resync()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return models.Wrap(models.EUnavailable, err, "change notifications: connection lost")
		}
		parts := strings.SplitN(n.Payload, " ", 3)
		if len(parts) != 3 {
			continue // not ours
		}
		fn(Change{Source: parts[0], TenantID: parts[1], ID: parts[2]})
	}
}

// watchForeignWrites calls changed whenever SQLite's data_version moves:
// another connection, i.e. another process (this one has a single
// connection), committed a write.
func (s *Store) watchForeignWrites(ctx context.Context, changed func()) error {
	// The poll is the store's own, not a use case's: Options.OnStatement
	// does not count it.
	quiet := context.WithValue(ctx, unobserved{}, true)
	version := func() (int64, error) {
		var v int64
		err := s.sqlDB.QueryRowContext(quiet, "PRAGMA data_version").Scan(&v)
		return v, err
	}
	last, err := version()
	if err != nil {
		return dbErr(err)
	}
	t := time.NewTicker(ForeignWriteInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		v, err := version()
		if err != nil {
			return dbErr(err)
		}
		if v != last {
			last = v
			changed()
		}
	}
}
