package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/countersign/countersign/models"
)

// BackupTo writes a consistent snapshot of an SQLite database to path with
// VACUUM INTO: one read transaction, so writers carry on and the copy holds
// exactly the transactions committed when it started. path must not exist.
// PostgreSQL is refused with EInvalidRequest: pg_dump does this job there.
func (s *Store) BackupTo(ctx context.Context, path string) error {
	if s.dialect != SQLite {
		return models.Errorf(models.EInvalidRequest, "%s", errBackupPostgres)
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("backup: %s exists; give a new file name", path)
	}
	if _, err := s.sqlDB.ExecContext(ctx, "VACUUM INTO ?", path); err != nil {
		return fmt.Errorf("backup: writing %s: %w", path, err)
	}
	return nil
}

// errBackupPostgres says what to do instead on PostgreSQL.
const errBackupPostgres = "countersign backup copies SQLite databases only; for PostgreSQL use pg_dump, " +
	"which takes a consistent snapshot while the servers run (pg_dump --format=custom --file FILE DATABASE_URL), " +
	"and pg_restore to restore it"

// SQLiteFileInfo is what CheckSQLiteFile found.
type SQLiteFileInfo struct {
	// SchemaVersion is the newest migration applied to the file.
	SchemaVersion int64
	// Proposals and Executions are row counts, for the operator to compare.
	Proposals, Executions int64
}

// CheckSQLiteFile opens the SQLite database at path read-only and checks
// that it is intact (PRAGMA integrity_check answers "ok") and that it is a
// countersign database (migrated). It never writes to the file.
func CheckSQLiteFile(ctx context.Context, path string) (SQLiteFileInfo, error) {
	var info SQLiteFileInfo
	if _, err := os.Stat(path); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	db, err := openReadOnly(path)
	if err != nil {
		return info, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return info, fmt.Errorf("%s is not a readable SQLite database: %w", path, err)
	}
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return info, err
		}
		problems = append(problems, line)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return info, fmt.Errorf("%s: integrity check failed: %w", path, err)
	}
	if len(problems) != 1 || problems[0] != "ok" {
		return info, fmt.Errorf("%s fails the integrity check: %s", path, strings.Join(problems, "; "))
	}
	err = db.QueryRowContext(ctx, "SELECT MAX(version_id) FROM goose_db_version WHERE is_applied").Scan(&info.SchemaVersion)
	if err != nil {
		return info, fmt.Errorf("%s is not a countersign database (no migrations recorded): %w", path, err)
	}
	for table, dst := range map[string]*int64{"proposals": &info.Proposals, "executions": &info.Executions} {
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(dst); err != nil {
			return info, fmt.Errorf("%s is not a countersign database: %w", path, err)
		}
	}
	return info, nil
}

// CopySQLiteFile writes a consistent copy of the SQLite database at from
// (read-only, which may be a live database in WAL mode) to the new file to.
func CopySQLiteFile(ctx context.Context, from, to string) error {
	if _, err := os.Stat(to); err == nil {
		return fmt.Errorf("%s exists", to)
	}
	db, err := openReadOnly(from)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", to); err != nil {
		return fmt.Errorf("copying %s to %s: %w", from, to, err)
	}
	return nil
}

func openReadOnly(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s is not a readable SQLite database: %w", path, err)
	}
	return db, nil
}

// SQLitePath is the file of an sqlite:// database URL, or "" for another
// database.
func SQLitePath(dbURL string) string {
	if !strings.HasPrefix(dbURL, "sqlite:") {
		return ""
	}
	return strings.TrimPrefix(strings.TrimPrefix(dbURL, "sqlite://"), "sqlite:")
}
