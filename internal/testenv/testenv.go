// Package testenv holds the switches that decide how tests treat a missing
// environment (a database server, a browser): skip on a developer machine,
// fail loudly in CI where everything must run.
package testenv

import (
	"fmt"
	"os"
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
