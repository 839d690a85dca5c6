// Package store persists countersign's domain on GORM, over SQLite (the
// embedded default) or PostgreSQL. Each exported method is one use case in
// one transaction; every step that must happen at most once is a conditional
// UPDATE or a unique constraint whose rows-affected count decides, never a
// read followed by a write.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/pressly/goose/v3"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

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
}

// Options tune Open.
type Options struct {
	// Logger receives slow-query and error logs; nil discards them.
	Logger *slog.Logger
	// Clock stamps creation times; nil means models.SystemClock. Operations
	// whose outcome depends on time take "now" explicitly instead.
	Clock models.Clock
}

// Open connects to a database named by url: "sqlite://PATH" (PATH may be
// ":memory:" only for single-connection use), "sqlite:PATH", or
// "postgres://…" / "postgresql://…". It does not migrate; call Migrate.
func Open(url string, opts Options) (*Store, error) {
	cfg := &gorm.Config{
		TranslateError:         true,
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
		NowFunc:                func() time.Time { return time.Now().UTC() },
	}
	var (
		dial    gorm.Dialector
		dialect Dialect
	)
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		dial, dialect = postgres.Open(url), Postgres
	case strings.HasPrefix(url, "sqlite://"), strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(url, "sqlite://"), "sqlite:")
		if path == "" {
			return nil, models.Errorf(models.EInvalidRequest, "sqlite URL needs a path, e.g. sqlite://./countersign.db")
		}
		dial, dialect = sqlite.Open(sqliteDSN(path)), SQLite
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
	return &Store{db: db, sqlDB: sqlDB, dialect: dialect, clock: clock}, nil
}

func sqliteDSN(path string) string {
	if path == ":memory:" {
		return "file::memory:?_pragma=foreign_keys(1)&_txlock=immediate"
	}
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

// Dialect reports which database the store uses.
func (s *Store) Dialect() Dialect { return s.dialect }

// Close closes the connection pool.
func (s *Store) Close() error { return s.sqlDB.Close() }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.sqlDB.PingContext(ctx); err != nil {
		return models.Wrap(models.EUnavailable, err, "database unavailable")
	}
	return nil
}

// Migrate applies every pending migration from migrations.FS and returns the
// versions it applied.
func (s *Store) Migrate(ctx context.Context) ([]int64, error) {
	dialect := goose.DialectSQLite3
	if s.dialect == Postgres {
		dialect = goose.DialectPostgres
	}
	sub, err := fs.Sub(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(dialect, s.sqlDB, sub)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var applied []int64
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	if err := s.appendOnly(ctx); err != nil {
		return applied, err
	}
	return applied, nil
}

// tx runs fn in one transaction. Domain errors returned by fn roll back and
// pass through unchanged; database errors become EUnavailable.
func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	err := s.db.WithContext(ctx).Transaction(fn)
	return dbErr(err)
}

// dbErr passes domain errors and nil through and turns anything else from
// the database into EUnavailable (nothing was committed).
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
		return models.Wrap(models.EUnavailable, err, "request cancelled")
	}
	return models.Wrap(models.EUnavailable, err, "database error")
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
