// Package store persists countersign's domain on GORM, over SQLite (the
// embedded default) or PostgreSQL. Each exported method is one use case in
// one transaction; every step that must happen at most once is a conditional
// UPDATE or a unique constraint whose rows-affected count decides, never a
// read followed by a write.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/libtnb/sqlite"
	"github.com/pressly/goose/v3"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/countersign/countersign/internal/kek"
	"github.com/countersign/countersign/migrations"
	"github.com/countersign/countersign/models"
)

// Dialect names the database behind a Store.
type Dialect string

// Supported dialects.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Store is the GORM-backed persistence of every domain object.
type Store struct {
	db      *gorm.DB
	sqlDB   *sql.DB
	dialect Dialect
	clock   models.Clock
	url     string // for connections of their own (change notifications)
	// read serves reads that need no lock: on SQLite its own small pool of
	// query-only connections (WAL lets them read while the one writer
	// writes), so a slow list never queues the writes behind it; on
	// PostgreSQL the same pool as db.
	read   *gorm.DB
	readDB *sql.DB
	inst   atomic.Pointer[instance]
	notify []string // reviewer notification channels, see Options.Notify
	kek    *kek.KEK
	// group runs SQLite's write transactions (group.go); nil on PostgreSQL.
	group *grouper
	// ckpt checkpoints a SQLite file's WAL (walcheckpoint.go); nil on
	// PostgreSQL and in memory.
	ckpt *walCheckpointer
}

// Options tune Open.
type Options struct {
	// Logger receives slow-query and error logs; nil discards them.
	Logger *slog.Logger
	// Clock stamps creation times; nil means models.SystemClock. Operations
	// whose outcome depends on time take "now" explicitly instead.
	Clock models.Clock
	// OnStatement, when set, is called with the SQL of every statement the
	// store's connections run, as the driver receives it (placeholders, no
	// values), to count them, e.g. to show that an idle long-poll reads
	// nothing (SQLite's poll for other processes' writes is not counted:
	// it runs whether anyone waits or not). It is called from the connection's goroutine and must be
	// cheap and safe for concurrent use.
	OnStatement func(sql string)
	// onStatementArgs is OnStatement with the statement's arguments (tests
	// explain the plans of the statements the store runs).
	onStatementArgs statementHook
	// WrapDriver, when set, wraps the database/sql driver every connection
	// is opened with. Fault-injection tests use it to make a commit fail as
	// a dropped connection does (see internal/dbfault); nil in production.
	WrapDriver func(driver.Driver) driver.Driver
	// Notify lists the reviewer notification channels in use
	// (models.ChannelEmail, models.ChannelSlack): a proposal that starts
	// awaiting a person gets one delivery per channel, in the same
	// transaction.
	Notify []string
	// KEK, when set, encrypts key material at rest (token signing keys,
	// cookie keys); see CheckKeys and Rekey. Without it new keys are
	// stored unencrypted, and encrypted ones cannot be read.
	KEK *kek.KEK
}

// hook returns the statement hook opts ask for, nil for none.
func (opts Options) hook() statementHook {
	switch {
	case opts.onStatementArgs != nil:
		return opts.onStatementArgs
	case opts.OnStatement != nil:
		fn := opts.OnStatement
		return func(q string, _ []driver.NamedValue) { fn(q) }
	}
	return nil
}

// wrapper composes the driver wrappers of a pool: inner (the statement
// cache, on SQLite) first, then the statement hook, then the caller's
// WrapDriver. nil when there is nothing to wrap.
func (opts Options) wrapper(inner func(driver.Driver) driver.Driver) func(driver.Driver) driver.Driver {
	hook := opts.hook()
	if inner == nil && hook == nil && opts.WrapDriver == nil {
		return nil
	}
	return func(d driver.Driver) driver.Driver {
		if inner != nil {
			d = inner(d)
		}
		if hook != nil {
			d = hookDriver{d: d, hook: hook}
		}
		if opts.WrapDriver != nil {
			d = opts.WrapDriver(d)
		}
		return d
	}
}

func cacheStatements(d driver.Driver) driver.Driver { return stmtCache{d: d} }

// Open connects to a database named by url: "sqlite://PATH" (PATH may be
// ":memory:" only for single-connection use), "sqlite:PATH", or
// "postgres://…" / "postgresql://…". It does not migrate; call Migrate.
func Open(url string, opts Options) (*Store, error) {
	cfg := gormConfig()
	var (
		dial    gorm.Dialector
		dialect Dialect
	)
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		dial, dialect = postgres.Open(url), Postgres
		if wrap := opts.wrapper(nil); wrap != nil {
			conn, err := wrappedDB("pgx", url, wrap)
			if err != nil {
				return nil, err
			}
			dial = postgres.New(postgres.Config{Conn: conn})
		}
	case strings.HasPrefix(url, "sqlite://"), strings.HasPrefix(url, "sqlite:"):
		path := sqlitePath(url)
		if path == "" {
			return nil, models.Errorf(models.EInvalidRequest, "sqlite URL needs a path, e.g. sqlite://./countersign.db")
		}
		if err := createPrivate(path); err != nil {
			return nil, models.Wrap(models.EUnavailable, err, "cannot create the database file")
		}
		// Every connection keeps its statements compiled (stmtcache.go).
		conn, err := wrappedDB(sqlite.DriverName, writerDSN(path), opts.wrapper(cacheStatements))
		if err != nil {
			return nil, err
		}
		dial, dialect = &sqlite.Dialector{DriverName: sqlite.DriverName, DSN: writerDSN(path), Conn: conn}, SQLite
	default:
		return nil, models.Errorf(models.EInvalidRequest, "database URL must start with sqlite:// or postgres://")
	}
	db, err := gorm.Open(dial, cfg)
	if err != nil {
		return nil, models.Wrap(models.EUnavailable, err, "cannot open the database")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, models.Wrap(models.EUnavailable, err, "cannot open the database")
	}
	if dialect == SQLite {
		// SQLite has one writer. With several connections, writers waiting
		// for the lock sleep in busy-timeout backoff and queue unfairly; one
		// connection queues them in order and never sees SQLITE_BUSY. Every
		// transaction is immediate (see sqliteDSN), so a transaction never
		// upgrades from reader to writer half-way.
		sqlDB.SetMaxOpenConns(1)
	} else {
		sqlDB.SetMaxOpenConns(20)
		sqlDB.SetMaxIdleConns(10)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	}
	if err := sqlDB.Ping(); err != nil {
		_ = sqlDB.Close()
		return nil, models.Wrap(models.EUnavailable, err, "cannot reach the database")
	}
	clock := opts.Clock
	if clock == nil {
		clock = models.SystemClock{}
	}
	st := &Store{db: db, sqlDB: sqlDB, dialect: dialect, clock: clock, url: url, read: db, readDB: sqlDB, notify: opts.Notify, kek: opts.KEK}
	// An in-memory database is private to its one connection: no readers.
	if dialect == SQLite && sqlitePath(url) != ":memory:" {
		reader := Options{onStatementArgs: opts.hook()}
		if st.read, st.readDB, err = openSQLiteReader(sqlitePath(url), gormConfig(), reader.wrapper(cacheStatements)); err != nil {
			_ = sqlDB.Close()
			return nil, err
		}
		if st.ckpt, err = startCheckpointer(sqlitePath(url)); err != nil {
			_ = st.readDB.Close()
			_ = sqlDB.Close()
			return nil, err
		}
	}
	if dialect == SQLite {
		st.group = newGrouper(st)
	}
	return st, nil
}

// gormConfig is the GORM configuration of one connection pool (each pool
// needs its own: GORM keeps the pool in it).
//
// GORM's prepared-statement mode is not used: it re-prepares every
// statement first seen inside a transaction. On SQLite each connection keeps
// its statements compiled below database/sql instead (stmtcache.go); on
// PostgreSQL pgx keeps prepared statements per connection.
func gormConfig() *gorm.Config {
	cfg := &gorm.Config{
		TranslateError:         true,
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	}
	return cfg
}

// createPrivate creates the SQLite database file, when it does not exist
// yet, readable and writable by its owner only (0600): it holds password
// hashes, token signing keys and every proposal. SQLite creates the -wal
// and -shm files with the database file's permissions, so they are 0600
// too. An existing file keeps the permissions it has.
func createPrivate(path string) error {
	if path == ":memory:" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// readerConns is the size of SQLite's reader pool: reads run in parallel
// with each other and with the writer, a few at a time.
const readerConns = 4

// openSQLiteReader opens the query-only reader pool over the file the writer
// opened (and put in WAL mode).
func openSQLiteReader(path string, cfg *gorm.Config, wrap func(driver.Driver) driver.Driver) (*gorm.DB, *sql.DB, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=foreign_keys(1)&_pragma=query_only(1)"
	conn, err := wrappedDB(sqlite.DriverName, dsn, wrap)
	if err != nil {
		return nil, nil, err
	}
	db, err := gorm.Open(&sqlite.Dialector{DriverName: sqlite.DriverName, DSN: dsn, Conn: conn}, cfg)
	if err != nil {
		return nil, nil, models.Wrap(models.EUnavailable, err, "cannot open the database for reading")
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, models.Wrap(models.EUnavailable, err, "cannot open the database for reading")
	}
	sqlDB.SetMaxOpenConns(readerConns)
	sqlDB.SetMaxIdleConns(readerConns)
	if err := sqlDB.Ping(); err != nil {
		_ = sqlDB.Close()
		return nil, nil, models.Wrap(models.EUnavailable, err, "cannot reach the database for reading")
	}
	return db, sqlDB, nil
}

func sqlitePath(url string) string {
	return strings.TrimPrefix(strings.TrimPrefix(url, "sqlite://"), "sqlite:")
}

// wrappedDB opens a pool whose connections come from the registered
// driver name, wrapped by wrap.
func wrappedDB(name, dsn string, wrap func(driver.Driver) driver.Driver) (*sql.DB, error) {
	probe, err := sql.Open(name, dsn)
	if err != nil {
		return nil, models.Wrap(models.EUnavailable, err, "cannot open the database")
	}
	d := probe.Driver()
	probe.Close()
	return sql.OpenDB(connector{d: wrap(d), dsn: dsn}), nil
}

// connector opens connections of a driver to one data source.
type connector struct {
	d   driver.Driver
	dsn string
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.d }

// SQLiteDSN is the data source name the store's writer opens a SQLite file
// with: its journal mode, synchronous level, busy timeout, foreign keys,
// temporary storage and immediate transactions. countersign-bench opens its
// floor with it.
//
// Temporary storage is in memory: inside a transaction, each statement
// that may fail half-way (an INSERT into a table with unique indexes and
// foreign keys) keeps the pages it changes in a statement journal, which
// SQLite spills to a new temporary file once a transaction's statements
// journaled 64 KiB — every create (a proposal with its ten indexes, its
// events and its audit entry) did, and paid for creating, writing and
// deleting a file. VACUUM INTO writes the backup file directly and does not
// sort into temporary storage.
func SQLiteDSN(path string) string { return sqliteDSN(path) }

func sqliteDSN(path string) string {
	if path == ":memory:" {
		return "file::memory:?_pragma=foreign_keys(1)&_txlock=immediate"
	}
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_pragma=temp_store(MEMORY)&_txlock=immediate"
}

// writerDSN is SQLiteDSN with the writer's own checkpoints moved out of the
// way of commits (walcheckpoint.go); in memory there is no WAL.
func writerDSN(path string) string {
	if path == ":memory:" {
		return sqliteDSN(path)
	}
	return sqliteDSN(path) + fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", writerCheckpointPages)
}

// Dialect reports which database the store uses.
func (s *Store) Dialect() Dialect { return s.dialect }

// Close closes the connection pools.
func (s *Store) Close() error {
	if s.group != nil {
		s.group.close()
	}
	var err error
	if s.ckpt != nil {
		err = s.ckpt.close()
	}
	if s.readDB != s.sqlDB {
		err = errors.Join(err, s.readDB.Close())
	}
	return errors.Join(err, s.sqlDB.Close())
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.sqlDB.PingContext(ctx); err != nil {
		return models.Wrap(models.EUnavailable, err, "database unavailable")
	}
	return nil
}

// Migrate applies every pending migration from migrations.FS, installs the
// append-only triggers and returns the versions it applied. Servers started
// together may all call it: on PostgreSQL they take turns under an advisory
// lock; on SQLite, which has none, a server whose migration lost the race
// to another (and rolled back whole, as SQLite's DDL is transactional)
// starts again from the version the other reached.
func (s *Store) Migrate(ctx context.Context) ([]int64, error) {
	p, err := s.migrations()
	if err != nil {
		return nil, err
	}
	unlock, err := s.migrationTurn(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := newerSchema(ctx, p); err != nil {
		return nil, err
	}
	var applied []int64
	for attempt := 0; ; attempt++ {
		reached, err := p.GetDBVersion(ctx)
		if err != nil {
			return applied, fmt.Errorf("migrate: %w", err)
		}
		res, err := p.Up(ctx)
		for _, r := range res {
			if r.Error == nil {
				applied = append(applied, r.Source.Version)
				reached = r.Source.Version
			}
		}
		if err == nil {
			break
		}
		if s.dialect == SQLite && attempt < len(p.ListSources()) {
			if now, verr := p.GetDBVersion(ctx); verr == nil && now > reached {
				continue // another process migrated meanwhile
			}
		}
		return applied, fmt.Errorf("migrate: %w", err)
	}
	if err := s.appendOnly(ctx); err != nil {
		return applied, err
	}
	return applied, nil
}

// migrationLock is the PostgreSQL advisory lock servers migrating one
// database take turns under.
const migrationLock = 0x63730020

// migrationTurn waits until no other server migrates the database (on
// PostgreSQL) and returns the function that lets the next one. The lock is
// the session's, held on a connection of its own: a server that dies while
// migrating releases it with its connection.
func (s *Store) migrationTurn(ctx context.Context) (func(), error) {
	if s.dialect != Postgres {
		return func() {}, nil
	}
	conn, err := s.sqlDB.Conn(ctx)
	if err != nil {
		return nil, dbErr(err)
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1, 0)`, migrationLock); err != nil {
		conn.Close()
		return nil, dbErr(err)
	}
	return func() {
		// Closing a connection that still holds the lock would hand it back
		// to the pool, still held: unlock first, and drop the connection
		// if that fails.
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1, 0)`, migrationLock); err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}, nil
}

// newerSchema refuses a database that a later release migrated further
// than this one knows: goose would report it up to date, and this
// release would then write rows the later one's rules do not expect (an
// audit chain it appends to without the entries the later release
// records), so that a downgrade corrupts quietly instead of failing.
func newerSchema(ctx context.Context, p *goose.Provider) error {
	srcs := p.ListSources()
	if len(srcs) == 0 {
		return nil
	}
	known := srcs[len(srcs)-1].Version
	have, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if have > known {
		return models.Errorf(models.EInvalidState,
			"the database's schema is at version %d, newer than this release of countersign knows (%d): "+
				"a later release migrated it; run that release, or restore the backup taken before the upgrade", have, known)
	}
	return nil
}

// migrations returns the goose provider of every migration: the SQL files
// of migrations.FS and those written in Go (migrations.Go).
func (s *Store) migrations() (*goose.Provider, error) {
	dialect := goose.DialectSQLite3
	if s.dialect == Postgres {
		dialect = goose.DialectPostgres
	}
	sub, err := fs.Sub(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(dialect, s.sqlDB, sub, goose.WithGoMigrations(migrations.Go(string(dialect))...))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// ErrCommitUncertain is in the chain of an EUnavailable error when the
// database failed while committing: the connection dropped after COMMIT was
// sent, so the transaction may or may not have been applied. Methods whose
// callers need to know (CreateProposal, ConsumeToken) resolve it by reading
// back what is stored, or return EOutcomeUncertain.
var ErrCommitUncertain = errors.New("the outcome of the commit is unknown")

// tx runs fn in one transaction. Domain errors returned by fn roll back and
// pass through unchanged; database errors become EUnavailable, and a failed
// commit also carries ErrCommitUncertain. On SQLite, transactions queued
// behind the writer commit together, each in a savepoint (group.go), with
// the same guarantees.
func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	if s.group != nil {
		return s.group.do(ctx, fn)
	}
	return s.txAlone(ctx, fn)
}

// txAlone runs fn in a transaction of its own.
func (s *Store) txAlone(ctx context.Context, fn func(tx *gorm.DB) error) (err error) {
	tx := s.begin(ctx)
	if tx.Error != nil {
		return dbErr(tx.Error)
	}
	done := false
	defer func() {
		if !done {
			// fn failed or panicked: nothing of it may stay.
			tx.Rollback()
		}
	}()
	run := tx
	if s.dialect == SQLite {
		// See quiet.
		run = tx.WithContext(quiet(ctx))
	}
	if err := fn(run); err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, sql.ErrTxDone) {
			// database/sql rolled the transaction back when ctx ended.
			return dbErr(cerr)
		}
		return dbErr(err)
	}
	if err := ctx.Err(); err != nil {
		// Given up on while fn ran: rolled back, certainly not committed.
		return dbErr(err)
	}
	done = true
	if err := tx.Commit().Error; err != nil {
		return failedCommit(err)
	}
	return nil
}

// quiet is the context the statements of a SQLite write transaction run
// on: ctx without its cancellation. The SQLite driver watches a cancellable
// context with a goroutine of its own for every statement, to interrupt it
// (4% of an execute's CPU, and a wake-up of another thread each time), but
// a statement inside a write transaction waits for no lock (the
// transaction took the write lock at BEGIN, which still ends its wait when
// ctx does) and runs for well under a millisecond. The transaction still
// ends with ctx: database/sql rolls it back once ctx is done, so the
// statement after that fails and COMMIT refuses.
func quiet(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// failedCommit is the error of a transaction whose COMMIT failed with err.
func failedCommit(err error) error {
	return models.Wrap(models.EUnavailable, errors.Join(ErrCommitUncertain, err), "the database failed while committing")
}

// beginBusyTries bounds how often a transaction's BEGIN is tried while
// another process holds SQLite's write lock, each try waiting up to the
// busy timeout (5 s).
const beginBusyTries = 6

// begin starts a transaction on ctx. On SQLite a BEGIN that found the write
// lock held by another process for the whole busy timeout is tried again
// (nothing ran yet): a process that commits back to back, as a store
// committing its queued transactions does, leaves others only short
// moments to take the lock in, and one busy timeout may pass without one.
func (s *Store) begin(ctx context.Context) *gorm.DB {
	for try := 1; ; try++ {
		tx := s.db.WithContext(ctx).Begin()
		if tx.Error == nil || try == beginBusyTries || !sqliteBusy(tx.Error) || ctx.Err() != nil {
			return tx
		}
	}
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY.
func sqliteBusy(err error) bool {
	var lite interface{ Code() int }
	return errors.As(err, &lite) && lite.Code()&0xff == 5
}

// commitUncertain reports whether err is a failed commit.
func commitUncertain(err error) bool { return errors.Is(err, ErrCommitUncertain) }

// dbErr passes domain errors and nil through and classifies anything else
// from the database (nothing was committed either way):
//   - EUnavailable when the database could not be reached or asked in time,
//     or refused for now (connection lost or refused, timeout, cancelled
//     request, busy or locked, out of resources, serialization conflict):
//     trying again later may work;
//   - EInternal for everything else — above all a violated constraint,
//     which means a bug or a rule the code failed to check first, not an
//     outage, and is logged as such by the error handler.
func dbErr(err error) error {
	if err == nil {
		return nil
	}
	var de *models.Error
	if errors.As(err, &de) {
		return err
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return models.Wrap(models.ENotFound, err, "not found")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return models.Wrap(models.EUnavailable, err, "request cancelled or timed out")
	}
	if transient(err) {
		return models.Wrap(models.EUnavailable, err, "database unavailable")
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) && (pg.SQLState() == "22021" || pg.SQLState() == "22P05") {
		// Text PostgreSQL cannot store (U+0000): the input is refused,
		// for any field models.StorableText does not check first.
		return models.Wrap(models.EInvalidRequest, err, "the text holds a character that cannot be stored (U+0000)")
	}
	return models.Wrap(models.EInternal, err, "database error")
}

// transient reports whether err says the database could not be reached or
// refused the work for now, as opposed to refusing the work itself.
func transient(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, gorm.ErrInvalidDB) || strings.Contains(err.Error(), "sql: database is closed") {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	// PostgreSQL: SQLSTATE class 08 connection exception, 53 insufficient
	// resources, 57 operator intervention (shutdown, cancel); serialization
	// failure, deadlock and lock timeout are worth a retry too.
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		st := pg.SQLState()
		switch {
		case strings.HasPrefix(st, "08"), strings.HasPrefix(st, "53"), strings.HasPrefix(st, "57"),
			st == "40001", st == "40P01", st == "55P03":
			return true
		}
		return false
	}
	// SQLite result codes (primary code in the low byte): BUSY, LOCKED,
	// IOERR, FULL, CANTOPEN.
	var lite interface{ Code() int }
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case 5, 6, 10, 13, 14:
			return true
		}
	}
	return false
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func fromMSPtr(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := fromMS(*v)
	return &t
}

func statusStrings(ss []models.Status) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
