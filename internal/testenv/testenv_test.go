package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func TestRequireE2E(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{
		{"1", true},
		{"", false},
		{"0", false},
		{"true", false},
	} {
		t.Setenv("COUNTERSIGN_REQUIRE_E2E", tc.value)
		if got := RequireE2E(); got != tc.want {
			t.Errorf("COUNTERSIGN_REQUIRE_E2E=%q: RequireE2E() = %v, want %v", tc.value, got, tc.want)
		}
	}
}

func TestSkipOrFail(t *testing.T) {
	for _, tc := range []struct {
		value                string
		wantSkip, wantFailed bool
	}{
		{"", true, false},
		{"1", false, true},
	} {
		t.Setenv("COUNTERSIGN_REQUIRE_E2E", tc.value)
		rec := &recorder{}
		done := make(chan struct{})
		// SkipOrFail ends with runtime.Goexit (via SkipNow or FailNow), so
		// run it on its own goroutine.
		go func() {
			defer close(done)
			SkipOrFail(rec, "no %s here", "server")
		}()
		<-done
		if rec.skipped != tc.wantSkip || rec.failed != tc.wantFailed {
			t.Errorf("COUNTERSIGN_REQUIRE_E2E=%q: skipped=%v failed=%v, want skipped=%v failed=%v",
				tc.value, rec.skipped, rec.failed, tc.wantSkip, tc.wantFailed)
		}
		if want := "no server here"; !strings.HasPrefix(rec.msg, want) {
			t.Errorf("message = %q, want it to start with %q", rec.msg, want)
		}
	}
}

// recorder captures what SkipOrFail does to a test.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = true
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
