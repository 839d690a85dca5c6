package store

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/libtnb/sqlite"

	"github.com/countersign/countersign/models"
)

// Checkpoints off the write path, on SQLite.
//
// In WAL mode every commit appends the pages it changed to the WAL, and a
// checkpoint copies them back into the database file and syncs it to disk.
// By default the committing connection does that itself once the WAL holds
// 1,000 pages: with some thirty pages per execute, one request in about
// thirty copied a thousand pages and waited for two fsyncs (the p99 of an
// execute was ten times its median). A connection of its own now does it
// instead, in the background, once the WAL holds checkpointPages pages not
// yet copied, without blocking the writer (a PASSIVE checkpoint copies what
// no reader still needs and never waits for a lock). The writer checkpoints
// itself only when the WAL grows past writerCheckpointPages, which happens
// when this goroutine cannot keep up or is not running (another process's
// store, a command that exits at once).
//
// The threshold stays SQLite's default, so the WAL restarts from its start
// (which the first write after a complete checkpoint does) as seldom as
// before: each restart rewrites the WAL's header before that write
// commits, and another process's store watching PRAGMA data_version for
// foreign writes (changes.go) may take it for the write itself, wake its
// long-polls early and have each of them look again.

const (
	// checkpointPages is how many WAL pages not yet copied make a
	// checkpoint worth it: SQLite's own default.
	checkpointPages = 1000
	// checkpointEvery is the least time between two looks at the WAL.
	checkpointEvery = 100 * time.Millisecond
	// checkpointIdle is how often the WAL is checkpointed without being
	// told of a commit (writes outside the store's transactions).
	checkpointIdle = 10 * time.Second
	// writerCheckpointPages is the writer's own automatic checkpoint
	// threshold (wal_autocheckpoint), about 40 MB of WAL: a safety net.
	writerCheckpointPages = 10000
)

type walCheckpointer struct {
	db   *sql.DB
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startCheckpointer opens the checkpointing connection to the SQLite file
// at path and starts its goroutine.
func startCheckpointer(path string) (*walCheckpointer, error) {
	db, err := sql.Open(sqlite.DriverName, "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, models.Wrap(models.EUnavailable, err, "cannot open the database for checkpoints")
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		_ = db.Close()
		return nil, models.Wrap(models.EUnavailable, err, "cannot open the database for checkpoints")
	}
	c := &walCheckpointer{db: db, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c, nil
}

// committed tells the checkpointer that the WAL grew; it never blocks.
func (c *walCheckpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *walCheckpointer) loop() {
	defer close(c.done)
	idle := time.NewTicker(checkpointIdle)
	defer idle.Stop()
	for {
		select {
		case <-c.kick:
		case <-idle.C:
		case <-c.stop:
			return
		}
		c.checkpoint()
		select {
		case <-time.After(checkpointEvery):
		case <-c.stop:
			return
		}
	}
}

// checkpoint copies the WAL into the database file once it holds
// checkpointPages pages not yet copied. NOOP only reads how many it holds.
// PASSIVE never waits for the writer or a reader; what it could not copy
// now, the next one copies. An error (another process's checkpoint under
// way) is the same: the next look tries again.
func (c *walCheckpointer) checkpoint() {
	ctx := context.Background()
	var busy, frames, copied int
	if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(NOOP)").Scan(&busy, &frames, &copied); err != nil ||
		frames-copied < checkpointPages {
		return
	}
	_, _ = c.db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
}

// close stops the goroutine and closes its connection; again, nothing.
func (c *walCheckpointer) close() error {
	var err error
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		err = c.db.Close()
	})
	return err
}
