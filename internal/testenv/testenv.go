// Package testenv holds the switches that decide how tests treat a missing
// environment (a database server, a browser): skip on a developer machine,
// fail loudly in CI where everything must run. It also runs the helper
// processes tests need to see what another process does (HoldOpen).
package testenv

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
)

// RequireE2E reports whether COUNTERSIGN_REQUIRE_E2E=1, that is, whether
// tests needing external programs must run rather than skip.
func RequireE2E() bool {
	return os.Getenv("COUNTERSIGN_REQUIRE_E2E") == "1"
}

// SkipOrFail skips t with the reason, or — when COUNTERSIGN_REQUIRE_E2E=1 —
// fails it with the same reason. Either way the test stops here.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if RequireE2E() {
		t.Fatalf("%s (COUNTERSIGN_REQUIRE_E2E=1, so this is a failure)", reason)
	}
	t.Skipf("%s (set COUNTERSIGN_REQUIRE_E2E=1 to make this a failure)", reason)
}

// SkipShort skips t under `go test -short`: tests that start a database
// server or a browser are kept out of the quick feedback loop. CI never
// runs with -short, so there they always run.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s is not started", what)
	}
}

// DefaultParallel raises the default of -test.parallel (GOMAXPROCS) to n
// for a test binary whose parallel tests mostly wait — on their own
// servers, timeouts, a browser — rather than compute, so that on a
// two-core machine more than two of them wait at once. An explicit
// -parallel wins. Call it from TestMain before m.Run.
func DefaultParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit && n > runtime.GOMAXPROCS(0) {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}

// HoldDBEnv names, for a helper process, the database it holds open.
const HoldDBEnv = "COUNTERSIGN_TEST_HOLD_DB"

// HoldOpen runs the test binary's helper test named name in a process of
// its own, which opens the database db (ServeHold) as a server would. It
// returns once the database is open there, with a function that makes the
// process close it and waits for it to end. A process of its own, because
// what is being tested is how another process's hold is seen: the
// operating system's locks do not tell a process about its own.
func HoldOpen(t testing.TB, name, db string) (release func()) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^"+name+"$")
	child.Env = append(os.Environ(), HoldDBEnv+"="+db)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		stdin.Close()
		if err := child.Wait(); err != nil {
			t.Errorf("the process holding %s: %v", db, err)
		}
	}
	t.Cleanup(release)
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "open\n" {
		t.Fatalf("the process holding %s: %q %v", db, line, err)
	}
	return release
}

// ServeHold is the helper process's side of HoldOpen, as the body of the
// helper test: it skips when the test binary was not started by HoldOpen;
// otherwise it opens the database with open, says so, and keeps it open
// until its stdin closes.
func ServeHold(t *testing.T, open func(db string) (io.Closer, error)) {
	db := os.Getenv(HoldDBEnv)
	if db == "" {
		t.Skip("a helper process of a test that holds a database open in another process")
	}
	c, err := open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Println("open")
	bufio.NewReader(os.Stdin).ReadString('\n')
}
