package detach_test

import (
	"context"
	"testing"

	"github.com/countersign/countersign/internal/tracing"
	"github.com/countersign/countersign/web/detach"
)

// TestFinishRunsEachFunctionOnce: functions registered before the answer
// run at Finish, in order; one registered after runs at once with the
// recorded status; a second Finish and a Stop after it change nothing.
func TestFinishRunsEachFunctionOnce(t *testing.T) {
	t.Parallel()
	r := &detach.Request{}
	if r.Detached() {
		t.Fatal("a new request is detached")
	}
	stops := 0
	r.Detach(context.Background(), func() { stops++ })
	if !r.Detached() {
		t.Fatal("Detach did not detach")
	}
	var got []string
	r.OnFinish(func(status int, size int64) { got = append(got, "inner") })
	r.OnFinish(func(status int, size int64) { got = append(got, "outer") })
	r.Stop()
	if stops != 1 {
		t.Fatalf("Stop before the answer called stop %d times, want 1", stops)
	}
	r.Finish(304, 0)
	r.Finish(200, 10)
	var late struct {
		status int
		size   int64
	}
	r.OnFinish(func(status int, size int64) { late.status, late.size = status, size; got = append(got, "late") })
	if want := []string{"inner", "outer", "late"}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("ran %v, want %v", got, want)
	}
	if late.status != 304 || late.size != 0 {
		t.Errorf("a function registered after the answer saw %d/%d, want the first Finish's 304/0", late.status, late.size)
	}
	r.Stop()
	if stops != 1 {
		t.Errorf("Stop after the answer called stop again (%d)", stops)
	}
}

// TestValuesKeepsTheRequestIDOnly: the detached context carries the
// request id but not the request's end.
func TestValuesKeepsTheRequestIDOnly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(tracing.WithRequestID(context.Background(), "req_1"))
	v := detach.Values(ctx)
	cancel()
	if got := tracing.RequestID(v); got != "req_1" {
		t.Errorf("request id = %q, want req_1", got)
	}
	if v.Err() != nil || v.Done() != nil {
		t.Error("the detached context ends with the request's")
	}
}
