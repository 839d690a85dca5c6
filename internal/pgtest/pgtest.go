// Package pgtest gives tests a throwaway PostgreSQL: a cluster private to the
// test binary, started on first use from the server binaries installed on the
// machine, and a fresh, empty database per call to DSN.
//
// Use it from a package's tests as
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		dsn := pgtest.DSN(t)
//		…
//	}
//
// Without PostgreSQL server binaries DSN skips the test, or fails it when
// COUNTERSIGN_REQUIRE_E2E=1 (see package testenv).
package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testenv"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// BinEnv names the environment variable that points at a directory holding
// initdb, pg_ctl and postgres, overriding the search under /usr/lib/postgresql.
const BinEnv = "COUNTERSIGN_PG_BIN"

// dirPrefix starts the name of every cluster directory, so that clusters
// left behind by a killed test binary can be found and removed.
const dirPrefix = "countersign-pgtest-"

var (
	mu      sync.Mutex
	current *cluster // nil until the first DSN call and after Stop
	failed  error    // a start failure, kept so later tests fail fast
	seq     atomic.Int64
)

// cluster is one running PostgreSQL server.
type cluster struct {
	bin   string // directory with initdb, pg_ctl, postgres
	dir   string // temp dir: data/, sock/, pg.log, owner.pid
	port  int
	root  bool    // run the server binaries as user postgres via runuser
	admin *sql.DB // connection to the "postgres" database, for CREATE/DROP DATABASE
}

// DSN returns the DSN of a fresh, empty database on a PostgreSQL cluster
// private to this test binary (started on first use, one per process,
// stopped by Stop). It calls testenv.SkipOrFail when no PostgreSQL server
// binaries are found under /usr/lib/postgresql/*/bin (newest version wins) or
// the env var COUNTERSIGN_PG_BIN names none. The database is dropped, with
// any connections still open to it, when t ends. DSN is safe to call from
// parallel tests.
func DSN(t testing.TB) string {
	t.Helper()
	testenv.SkipShort(t, "PostgreSQL")
	c, err := get()
	if errors.Is(err, errNoBinaries) {
		testenv.SkipOrFail(t, "pgtest: %v", err)
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}

	name := dbName(t.Name(), seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.admin.ExecContext(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE closes connections the test left open (e.g. a pool it
		// never closed), which would otherwise block the drop.
		if _, err := c.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return c.dsn(name)
}

// Main wraps testing.M: it runs the tests, stops the cluster if one was
// started, and exits with the tests' status. Use it as
// `func TestMain(m *testing.M) { pgtest.Main(m) }`.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the cluster, if one is running, and removes its directory.
// A later DSN call starts a new one. Errors are reported on stderr, as there
// is no test left to fail.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	failed = nil
	if current == nil {
		return
	}
	c := current
	current = nil
	c.admin.Close()
	if out, err := c.pgctl("-D", c.data(), "-m", "fast", "-w", "stop"); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stop cluster in %s: %v\n%s", c.dir, err, out)
	}
	if err := os.RemoveAll(c.dir); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
	}
}

// get returns the running cluster, starting it on first use.
func get() (*cluster, error) {
	mu.Lock()
	defer mu.Unlock()
	if current != nil {
		return current, nil
	}
	if failed != nil {
		return nil, failed
	}
	c, err := start()
	if err != nil {
		failed = err
		return nil, err
	}
	current = c
	return c, nil
}

var errNoBinaries = errors.New("no PostgreSQL server binaries")

// findBin returns the directory with the server binaries: $COUNTERSIGN_PG_BIN
// if set, else the newest /usr/lib/postgresql/VERSION/bin.
func findBin() (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		if !hasBinaries(dir) {
			return "", fmt.Errorf("%w: %s=%s has no initdb, pg_ctl and postgres", errNoBinaries, BinEnv, dir)
		}
		return dir, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	matches = slices.DeleteFunc(matches, func(dir string) bool { return !hasBinaries(dir) })
	if len(matches) == 0 {
		return "", fmt.Errorf("%w under /usr/lib/postgresql/*/bin (install package postgresql, or set %s)", errNoBinaries, BinEnv)
	}
	slices.SortFunc(matches, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	return matches[len(matches)-1], nil
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// compareVersions orders "9.6" < "15" < "16.2" numerically, part by part.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

// start creates and starts a new cluster.
func start() (_ *cluster, err error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin, root: os.Geteuid() == 0}
	reapStale(c.root)

	// initdb refuses to run as root, so as root the cluster belongs to user
	// postgres and every server binary runs through runuser.
	var uid, gid int
	if c.root {
		if uid, gid, err = postgresUser(); err != nil {
			return nil, err
		}
	}
	if c.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.pgctl("-D", c.data(), "-m", "immediate", "-w", "stop") // in case it came up after all
			os.RemoveAll(c.dir)
		}
	}()
	if err := os.WriteFile(filepath.Join(c.dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(c.dir, "sock"), 0o700); err != nil {
		return nil, err
	}
	if c.root {
		for _, p := range []string{c.dir, filepath.Join(c.dir, "sock")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}

	if out, err := c.run("initdb", "-D", c.data(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C.UTF-8", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb in %s: %w\n%s", c.dir, err, out)
	}

	// The free port is only free until someone else takes it: retry a few.
	var out []byte
	for attempt := 0; attempt < 5; attempt++ {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
		// Tests run in parallel, several with three instances and a hundred
		// concurrent requests each: room for all their pools at once.
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=1000",
			c.port, filepath.Join(c.dir, "sock"))
		out, err = c.pgctl("-D", c.data(), "-l", c.log(), "-w", "-t", "60", "-o", opts, "start")
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pg_ctl start in %s: %w\n%s\n--- tail of %s ---\n%s", c.dir, err, out, c.log(), tail(c.log(), 30))
	}

	c.admin, err = sql.Open("pgx", c.dsn("postgres"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.admin.PingContext(ctx); err != nil {
		c.admin.Close()
		return nil, fmt.Errorf("connect to the new cluster: %w\n--- tail of %s ---\n%s", err, c.log(), tail(c.log(), 30))
	}
	return c, nil
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }
func (c *cluster) log() string  { return filepath.Join(c.dir, "pg.log") }

func (c *cluster) dsn(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func (c *cluster) pgctl(args ...string) ([]byte, error) { return c.run("pg_ctl", args...) }

// run runs one of the server binaries, as user postgres when we are root.
func (c *cluster) run(name string, args ...string) ([]byte, error) {
	return runAs(c.root, filepath.Join(c.bin, name), c.dir, args...)
}

func runAs(root bool, path, dir string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if root {
		cmd = exec.Command(sbin("runuser"), append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	// The server must not inherit a working directory user postgres cannot
	// enter (such as the package directory under /root).
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// postgresUser returns the ids of user postgres, creating the system user
// if the machine has none.
func postgresUser() (uid, gid int, err error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		if out, err := exec.Command(sbin("useradd"), "--system", "--no-create-home", "postgres").CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("create user postgres: %w\n%s", err, out)
		}
		if u, err = user.Lookup("postgres"); err != nil {
			return 0, 0, err
		}
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return 0, 0, err
	}
	if gid, err = strconv.Atoi(u.Gid); err != nil {
		return 0, 0, err
	}
	return uid, gid, nil
}

// sbin finds an administration command that may be missing from a test's
// PATH.
func sbin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	return name
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// reapStale stops and removes clusters whose test binary is gone: one killed
// by a timeout or a panic never reaches Stop, and its postgres would run on.
// Clusters of live processes, and directories not yet marked with an owner,
// are left alone.
func reapStale(root bool) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || alive(pid) {
			continue
		}
		data := filepath.Join(dir, "data")
		if fileExists(filepath.Join(data, "postmaster.pid")) {
			bin, err := findBin()
			if err != nil {
				continue
			}
			if _, err := runAs(root, filepath.Join(bin, "pg_ctl"), dir, "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
				continue // not ours to stop (another user's), or not stoppable: leave it
			}
		}
		os.RemoveAll(dir)
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// dbName makes a unique, legal database name that still says which test
// made it, which helps when reading server logs.
func dbName(test string, n int64) string {
	s := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(test), "_"), "_")
	if len(s) > 40 {
		s = s[:40]
	}
	return fmt.Sprintf("t%d_%s", n, s)
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
