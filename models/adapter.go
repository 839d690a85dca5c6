package models

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// ValidateRequest asks the business system whether a write is allowed now.
type ValidateRequest struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Tenant    string          `json:"tenant"`
	Principal string          `json:"principal"`
}

// ValidateResult is the business system's view of the target resource.
// StateVersion changes whenever the resource changes.
type ValidateResult struct {
	OK            bool     `json:"ok"`
	StateVersion  string   `json:"state_version"`
	ResourceLabel string   `json:"resource_label"`
	Problems      []string `json:"problems"`
}

// ExecuteRequest performs a write once. IdempotencyKey is the execution's
// downstream key (see DownstreamKey), never the agent's raw request key.
type ExecuteRequest struct {
	Tool                 string          `json:"tool"`
	Arguments            json.RawMessage `json:"arguments"`
	Tenant               string          `json:"tenant"`
	IdempotencyKey       string          `json:"-"`
	ExpectedStateVersion string          `json:"expected_state_version"`
}

// ExecuteResult is the business system's answer for one idempotency key. Status
// is succeeded, failed_terminal or failed_retryable.
type ExecuteResult struct {
	Status      Status          `json:"status"`
	ProviderRef string          `json:"provider_ref"`
	Result      json.RawMessage `json:"result,omitempty"`
}

// Adapter errors that carry meaning for the execution state machine.
var (
	// ErrOutcomeUnknown: the write may or may not have happened (timeout,
	// connection lost after sending). Never retried with a new key.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrStateConflict: the expected state version no longer matches; nothing
	// was written.
	ErrStateConflict = errors.New("state version conflict")
	// ErrNeverArrived: the business system has no execution for that key.
	ErrNeverArrived = errors.New("no execution for idempotency key")
)

// Adapter is where business validation and execution happen (SPEC section 7).
// Implementations must be idempotent on the idempotency key (the
// execution's downstream key): a second Execute with the same key returns
// the first outcome and writes nothing.
type Adapter interface {
	// Validate checks authorization and business state. An unreachable
	// business system is EUnavailable.
	Validate(ctx context.Context, req ValidateRequest) (ValidateResult, error)
	// Execute performs the write. It returns ErrStateConflict when the state
	// version moved, ErrOutcomeUnknown when it cannot tell whether the write
	// happened.
	Execute(ctx context.Context, req ExecuteRequest) (ExecuteResult, error)
	// Status reports the outcome of an earlier Execute by its idempotency
	// key, or ErrNeverArrived; any other error means it could not be asked.
	Status(ctx context.Context, tenant, idempotencyKey string) (ExecuteResult, error)
}

// FactsRequest asks the business system what it knows about a write's
// target now, for the reviewer's eyes.
type FactsRequest struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Tenant    string          `json:"tenant"`
}

// Fact is one statement of the business system about a target, already
// worded for a person: {"Paid", "¥800.00"}.
type Fact struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// FactsAdapter is the optional part of the adapter contract: an adapter that
// implements it tells a reviewer the target's business facts (for a refund:
// paid, already refunded, refundable) next to the proposal. Facts are for
// reading only; nothing is decided on them, and Validate still checks the
// business state when the write is approved. An adapter that has nothing to
// say for a tool returns no facts and no error.
type FactsAdapter interface {
	// Facts describes the target of a write as it stands now. An
	// unreachable business system is EUnavailable.
	Facts(ctx context.Context, req FactsRequest) ([]Fact, error)
}

// TimedAdapter is an Adapter that bounds each call itself and says how long
// a call may take. The server leases an execution for at least that long
// plus a margin, so that no second attempt starts while one is in flight.
type TimedAdapter interface {
	Adapter
	Timeout() time.Duration
}
