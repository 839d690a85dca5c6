package store

import (
	"context"
	"io/fs"

	"github.com/pressly/goose/v3"

	"github.com/countersign/countersign/migrations"
)

// MigrateTo applies migrations up to and including version, so that a test
// can write data in an older schema and then upgrade it.
func (s *Store) MigrateTo(ctx context.Context, version int64) error {
	dialect := goose.DialectSQLite3
	if s.dialect == Postgres {
		dialect = goose.DialectPostgres
	}
	sub, err := fs.Sub(migrations.FS, ".")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(dialect, s.sqlDB, sub)
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, version)
	return err
}

// Exec runs raw SQL, for tests that write rows of an older schema.
func (s *Store) Exec(ctx context.Context, sql string, args ...any) error {
	return s.db.WithContext(ctx).Exec(sql, args...).Error
}

// URLForTest is the URL the store was opened with.
func (s *Store) URLForTest() string { return s.url }
