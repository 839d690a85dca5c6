package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// scriptedAdapter answers each call with the next error of its script.
type scriptedAdapter struct{ errs []error }

func (s *scriptedAdapter) next() error {
	err := s.errs[0]
	s.errs = s.errs[1:]
	return err
}

func (s *scriptedAdapter) Validate(context.Context, models.ValidateRequest) (models.ValidateResult, error) {
	return models.ValidateResult{}, s.next()
}

func (s *scriptedAdapter) Execute(context.Context, models.ExecuteRequest) (models.ExecuteResult, error) {
	return models.ExecuteResult{}, s.next()
}

func (s *scriptedAdapter) Status(context.Context, string, string) (models.ExecuteResult, error) {
	return models.ExecuteResult{}, s.next()
}

// TestAdapterErrorsByKind: failures are counted by tool, call and kind;
// "never arrived" is an answer, not a failure; every call is timed.
func TestAdapterErrorsByKind(t *testing.T) {
	m := New(Config{})
	ad := m.Adapter("refund_order", &scriptedAdapter{errs: []error{
		nil,
		models.Errorf(models.EUnavailable, "down"),
		fmt.Errorf("send: %w", models.ErrOutcomeUnknown),
		models.ErrStateConflict,
		models.ErrNeverArrived,
		fmt.Errorf("ask: %w", models.ErrOutcomeUnknown),
	}})
	ctx := context.Background()
	ad.Validate(ctx, models.ValidateRequest{})
	ad.Validate(ctx, models.ValidateRequest{})
	ad.Execute(ctx, models.ExecuteRequest{})
	ad.Execute(ctx, models.ExecuteRequest{})
	ad.Status(ctx, "t", "k")
	ad.Status(ctx, "t", "k")
	for _, c := range []struct {
		call, kind string
		want       float64
	}{
		{"validate", "unavailable", 1},
		{"execute", "outcome_unknown", 1},
		{"execute", "state_conflict", 1},
		{"status", "outcome_unknown", 1},
		{"status", "never_arrived", 0},
		{"validate", "outcome_unknown", 0},
	} {
		if got := testutil.ToFloat64(m.adapterErrors.WithLabelValues("refund_order", c.call, c.kind)); got != c.want {
			t.Errorf("adapter_errors_total{call=%s,kind=%s} = %v, want %v", c.call, c.kind, got, c.want)
		}
	}
	if got := testutil.CollectAndCount(m.adapterDuration); got != 3 {
		t.Errorf("%d duration series, want 3 (validate, execute, status)", got)
	}
}

func TestRegisterGaugeNames(t *testing.T) {
	m := New(Config{})
	for _, bad := range []string{"", "Webhook", "webhook-backlog", "1x"} {
		if err := m.RegisterGauge(bad, "x", func() float64 { return 0 }); err == nil {
			t.Errorf("RegisterGauge(%q) accepted", bad)
		}
	}
	if err := m.RegisterGauge("ok_name", "x", nil); err == nil {
		t.Error("a gauge without a value function was accepted")
	}
}

type slowAdapter struct{ *scriptedAdapter }

func (slowAdapter) Timeout() time.Duration { return 90 * time.Second }

// TestAdapterKeepsItsTimeout: the lease of a tool is derived from its
// adapter's timeout, so the metrics wrapper must not hide it.
func TestAdapterKeepsItsTimeout(t *testing.T) {
	m := New(Config{})
	wrapped, ok := m.Adapter("t", slowAdapter{&scriptedAdapter{}}).(models.TimedAdapter)
	if !ok || wrapped.Timeout() != 90*time.Second {
		t.Fatalf("wrapped adapter timeout: %v (TimedAdapter %v), want 90s", wrapped, ok)
	}
	if got := m.Adapter("t", &scriptedAdapter{}).(models.TimedAdapter).Timeout(); got != 0 {
		t.Errorf("an adapter without a timeout reports %v through the wrapper", got)
	}
}

type inDatabaseAdapter struct{ *scriptedAdapter }

func (a inDatabaseAdapter) ExecuteIn(*gorm.DB, models.ExecuteRequest) (models.ExecuteResult, error) {
	return models.ExecuteResult{}, a.next()
}

type describingAdapter struct{ *scriptedAdapter }

func (a describingAdapter) Describe(context.Context, models.DescribeRequest) (models.Description, error) {
	return models.Description{}, a.next()
}

func (a describingAdapter) ValidateDescribe(context.Context, models.ValidateRequest) (models.ValidateResult, *models.Description, error) {
	return models.ValidateResult{}, nil, a.next()
}

type inDatabaseDescribingAdapter struct{ describingAdapter }

func (a inDatabaseDescribingAdapter) ExecuteIn(*gorm.DB, models.ExecuteRequest) (models.ExecuteResult, error) {
	return models.ExecuteResult{}, a.next()
}

// TestAdapterKeepsItsOptionalCalls: the wrapper offers exactly the optional
// calls of the adapter it wraps, alone or together (the demo ledger has
// both), and times them (ExecuteIn as execute, ValidateDescribe as
// validate).
func TestAdapterKeepsItsOptionalCalls(t *testing.T) {
	m := New(Config{})
	both := m.Adapter("both", inDatabaseDescribingAdapter{describingAdapter{&scriptedAdapter{errs: []error{
		models.Errorf(models.EUnavailable, "down"), models.ErrStateConflict}}}})
	vd, okVD := both.(models.ValidateDescribeAdapter)
	tx, okTx := both.(store.TxAdapter)
	if !okVD || !okTx {
		t.Fatalf("wrapper of an adapter with both: ValidateDescribe %v, ExecuteIn %v", okVD, okTx)
	}
	vd.ValidateDescribe(context.Background(), models.ValidateRequest{})
	tx.ExecuteIn(nil, models.ExecuteRequest{})
	if got := testutil.ToFloat64(m.adapterErrors.WithLabelValues("both", "validate", "unavailable")); got != 1 {
		t.Errorf("adapter_errors_total{call=validate,kind=unavailable} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.adapterErrors.WithLabelValues("both", "execute", "state_conflict")); got != 1 {
		t.Errorf("adapter_errors_total{call=execute,kind=state_conflict} = %v, want 1", got)
	}
	// A business system kept in countersign's database writes in the
	// consuming transaction only if the wrapper still offers ExecuteIn.
	inDB := m.Adapter("t", inDatabaseAdapter{&scriptedAdapter{errs: []error{models.ErrStateConflict}}})
	if tx, ok := inDB.(store.TxAdapter); !ok {
		t.Error("the wrapper hides ExecuteIn")
	} else {
		tx.ExecuteIn(nil, models.ExecuteRequest{})
		if got := testutil.ToFloat64(m.adapterErrors.WithLabelValues("t", "execute", "state_conflict")); got != 1 {
			t.Errorf("adapter_errors_total{tool=t,call=execute,kind=state_conflict} = %v, want 1", got)
		}
	}
	if _, ok := inDB.(models.ValidateDescribeAdapter); ok {
		t.Error("an adapter without ValidateDescribe offers it through the wrapper")
	}
	if _, ok := m.Adapter("plain", &scriptedAdapter{}).(store.TxAdapter); ok {
		t.Error("an adapter without ExecuteIn offers it through the wrapper")
	}
	only := m.Adapter("vd", describingAdapter{&scriptedAdapter{}})
	if _, ok := only.(models.ValidateDescribeAdapter); !ok {
		t.Error("the wrapper hides ValidateDescribe")
	}
	if _, ok := only.(store.TxAdapter); ok {
		t.Error("an adapter without ExecuteIn offers it through the wrapper")
	}
	if _, ok := m.Adapter("plain", &scriptedAdapter{}).(models.ValidateDescribeAdapter); ok {
		t.Error("an adapter without ValidateDescribe offers it through the wrapper")
	}
}
