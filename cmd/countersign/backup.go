package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

const backupAbout = `
Writes a consistent snapshot of an SQLite database to a new file while
servers keep running (SQLite's VACUUM INTO: one read transaction, writers
are not stopped), then checks the copy (PRAGMA integrity_check) and prints
what it holds.

For PostgreSQL it refuses and names the tool for the job: pg_dump takes a
consistent snapshot while the servers run:
  pg_dump --format=custom --file countersign.dump "$DATABASE_URL"
  pg_restore --clean --if-exists --dbname "$DATABASE_URL" countersign.dump

Token signing keys and cookie keys are part of the copy: keep backups as
secret as the database (with --kek-file they are encrypted in it).`

func (c *cli) backup(ctx context.Context, args []string) error {
	var db, to string
	cmd := newCommand("backup", "countersign backup --to FILE [flags]", backupAbout, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&to, "to", "", "write the snapshot to this new `FILE`")
	if err := cmd.parseFlags(args, c.getenv, "db", "to"); err != nil {
		return err
	}
	if store.SQLitePath(db) == "" {
		return usagef(cmd.synopsis, "countersign backup copies SQLite databases only; for PostgreSQL use\n"+
			"  pg_dump --format=custom --file %s DATABASE_URL\nwhich takes a consistent snapshot while the servers run, and pg_restore to restore it", shellQuote(to))
	}
	st, err := c.openStore(ctx, db)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.BackupTo(ctx, to); err != nil {
		return err
	}
	info, err := store.CheckSQLiteFile(ctx, to)
	if err != nil {
		return fmt.Errorf("the backup was written but does not check out: %w", err)
	}
	fmt.Fprintf(c.stdout, "backup written to %s (schema version %d, %d proposals, %d executions, integrity ok)\n",
		to, info.SchemaVersion, info.Proposals, info.Executions)
	return nil
}

const restoreAbout = `
Replaces an SQLite database with a backup made by "countersign backup".
The backup is checked first (integrity and schema); the copy is written
beside the target and renamed over it, so the target is never half-written.
Stop every server using the target first: a target another process has open
is refused, even with --force. A target that exists and is not empty is
kept unless --force is given.

For PostgreSQL, use pg_restore (see "countersign backup -h").`

func (c *cli) restore(ctx context.Context, args []string) error {
	var db, from string
	var force bool
	cmd := newCommand("restore", "countersign restore --from FILE --db sqlite://PATH [--force]", restoreAbout, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&from, "from", "", "the backup `FILE` to restore")
	cmd.fs.BoolVar(&force, "force", false, "replace a target database that is not empty")
	if err := cmd.parseFlags(args, c.getenv, "db", "from"); err != nil {
		return err
	}
	target := store.SQLitePath(db)
	if target == "" {
		return usagef(cmd.synopsis, "countersign restore writes SQLite databases only; for PostgreSQL use\n"+
			"  pg_restore --clean --if-exists --dbname DATABASE_URL %s", shellQuote(from))
	}
	info, err := store.CheckSQLiteFile(ctx, from)
	if err != nil {
		return fmt.Errorf("refusing to restore: %w", err)
	}
	if fi, err := os.Stat(target); err == nil && fi.Size() > 0 && !force {
		return fmt.Errorf("refusing to restore: %s exists and is not empty; stop the servers using it and give --force to replace it", target)
	}
	if used, err := store.SQLiteInUse(target); err != nil {
		return err
	} else if used {
		// Renamed over, the file a server has open would live on under it:
		// the server would go on writing to the old database, and lose it.
		return models.Errorf(models.EInvalidState, "refusing to restore: another process (a server?) has %s open; stop it first, --force or not", target)
	}
	suffix, err := secret.RandomToken(6)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".restore-"+strings.ToLower(suffix))
	defer os.Remove(tmp)
	if err := store.CopySQLiteFile(ctx, from, tmp); err != nil {
		return err
	}
	if _, err := store.CheckSQLiteFile(ctx, tmp); err != nil {
		return fmt.Errorf("refusing to restore: the copy does not check out: %w", err)
	}
	// The old database's write-ahead log belongs to the old file: left
	// beside the new one, SQLite would replay it into the restored data.
	// It is moved aside first and put back if the new file cannot take
	// the old one's place, so a failed restore loses nothing.
	aside, err := moveAside(target, suffix)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, target); err != nil {
		return errors.Join(err, putBack(aside))
	}
	for _, moved := range aside {
		os.Remove(moved.to)
	}
	fmt.Fprintf(c.stdout, "restored %s into %s (schema version %d, %d proposals, %d executions)\n",
		from, target, info.SchemaVersion, info.Proposals, info.Executions)
	return nil
}

// movedFile is a file renamed from one path to another.
type movedFile struct{ from, to string }

// moveAside renames the write-ahead log and shared-memory files of the
// SQLite database at target out of the way (to names ending in suffix)
// and returns what it moved; on failure it puts back what it had moved.
func moveAside(target, suffix string) ([]movedFile, error) {
	var moved []movedFile
	for _, side := range []string{"-wal", "-shm"} {
		m := movedFile{from: target + side, to: target + side + ".restore-" + strings.ToLower(suffix)}
		if err := os.Rename(m.from, m.to); err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, errors.Join(err, putBack(moved))
		}
		moved = append(moved, m)
	}
	return moved, nil
}

// putBack undoes moveAside.
func putBack(moved []movedFile) error {
	var errs []error
	for _, m := range moved {
		errs = append(errs, os.Rename(m.to, m.from))
	}
	return errors.Join(errs...)
}
