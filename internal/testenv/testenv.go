// Package testenv holds the switches that decide how tests treat a missing
// environment (a database server, a browser): skip on a developer machine,
// fail loudly in CI where everything must run.
package testenv

import (
	"flag"
	"fmt"
	"os"
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
