package store

import (
	"database/sql"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// Gorm is the store's write handle, for a business system that keeps its
// tables in the same database (the demo ledger): its statements go through
// the same connection, pragmas and statement hook as the store's own.
func (s *Store) Gorm() *gorm.DB { return s.db }

// ReadDB is the store's read handle, for a business system's reads outside
// its transactions: on SQLite the pool of read-only connections beside the
// one writer (a read there does not queue behind writes), on PostgreSQL
// the same pool as Gorm's. Statements on it are hooked and counted like the
// store's own.
func (s *Store) ReadDB() *sql.DB { return s.readDB }

// Clock is the clock the store stamps creation times with.
func (s *Store) Clock() models.Clock { return s.clock }

// InsertOnce inserts row unless its key exists and reports whether it did.
func InsertOnce(tx *gorm.DB, row any) (bool, error) { return insertOnce(tx, row) }

// DBError maps a database error to a models error code (not found,
// unavailable, internal), as the store's own methods answer.
func DBError(err error) error { return dbErr(err) }

// Exec runs one statement as plain SQL on tx's connection (inside a
// transaction, that transaction; numbered placeholders serve both
// databases) and returns the rows it changed: for a business write on a
// hot path, where GORM's statement building would be most of its CPU.
func Exec(tx *gorm.DB, query string, args ...any) (int64, error) {
	ctx, c := raw(tx)
	return execCount(ctx, c, query, args...)
}
