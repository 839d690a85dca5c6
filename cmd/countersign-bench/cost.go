package main

import (
	"context"
	"database/sql"
	"fmt"
	"syscall"
	"time"
)

// walMeter reads how far a PostgreSQL server's write-ahead log has got;
// nil on SQLite, where it measures nothing. The log is the whole server's:
// what it grows by during a batch is the batch's, the bench running one at
// a time, plus whatever countersign's background work (its instance's
// heartbeat, the sweeps) writes meanwhile, which falls on the floor's
// batches as on the product's.
type walMeter struct{ db *sql.DB }

// position is the log's current position, in bytes.
func (m *walMeter) position(ctx context.Context) (float64, error) {
	var at float64
	err := m.db.QueryRowContext(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8").Scan(&at)
	return at, err
}

// around returns run, adding the bytes the log grew by while it ran to
// into.
func (m *walMeter) around(ctx context.Context, into *float64, run func() error) func() error {
	if m == nil {
		return run
	}
	return func() error {
		at0, err := m.position(ctx)
		if err != nil {
			return err
		}
		if err := run(); err != nil {
			return err
		}
		at1, err := m.position(ctx)
		*into += at1 - at0
		return err
	}
}

// processCPU is the CPU time, user and system, the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// costNote says what one operation cost beyond its time: the CPU of the
// bench's process (the client and the server, and on SQLite the
// database's work too; PostgreSQL's own is not in it) for countersign, the
// floor and HTTP alone, and on PostgreSQL the write-ahead log each wrote,
// n operations of each measured.
func costNote(op string, srv *server, c int, product, floor, bare summary, walProduct, walFloor float64, n int) string {
	s := fmt.Sprintf("Per %s, %s, c=%d: CPU of the bench's process, countersign %s, floor %s, HTTP alone %s",
		op, srv.kind, c, ms(product.cpu), ms(floor.cpu), ms(bare.cpu))
	if srv.wal != nil {
		s += fmt.Sprintf("; write-ahead log written, countersign %.0f B, floor %.0f B", walProduct/float64(n), walFloor/float64(n))
	}
	return s + "."
}
