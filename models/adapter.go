package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
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

// Bounds of a validate answer: what it says is stored with the proposal
// and shown to reviewers, so a business system cannot fill either.
const (
	MaxResourceLabel = 200 // characters of ResourceLabel
	MaxProblems      = 20  // entries of Problems
	MaxProblem       = 500 // characters of one problem
)

// Check refuses a validate answer outside the bounds, or whose text
// carries U+0000, which cannot be stored.
func (r ValidateResult) Check() error {
	if n := utf8.RuneCountInString(r.ResourceLabel); n > MaxResourceLabel {
		return fmt.Errorf("a resource label of %d characters, at most %d", n, MaxResourceLabel)
	}
	if len(r.Problems) > MaxProblems {
		return fmt.Errorf("%d problems, at most %d", len(r.Problems), MaxProblems)
	}
	for _, p := range r.Problems {
		if n := utf8.RuneCountInString(p); n > MaxProblem {
			return fmt.Errorf("a problem of %d characters, at most %d", n, MaxProblem)
		}
	}
	for _, s := range append([]string{r.ResourceLabel, r.StateVersion}, r.Problems...) {
		if strings.IndexByte(s, 0) >= 0 {
			return errors.New("text holding U+0000")
		}
	}
	return nil
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

// DescribeRequest asks the business system what a write would do to its
// target as things stand now.
type DescribeRequest struct {
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

// Change is one value of the target that the write would change: its
// machine values before and after (any JSON value, e.g. minor units) and
// the same values worded for a person.
type Change struct {
	Field         string          `json:"field"`
	Label         string          `json:"label"`
	Before        json.RawMessage `json:"before"`
	After         json.RawMessage `json:"after"`
	BeforeDisplay string          `json:"before_display"`
	AfterDisplay  string          `json:"after_display"`
}

// Description is the business system's account of a write before it
// happens: the target's facts now and the values the write would change,
// before → after. Its digest (DescriptionDigest) is shown to approvers and
// confirmed with the arguments' digest: if the business system later
// describes the write differently, the description approvers saw is stale.
type Description struct {
	Facts   []Fact   `json:"facts"`
	Changes []Change `json:"changes"`
}

// Bounds of a description, so that a page and a stored proposal stay small.
const (
	MaxFacts           = 20
	MaxChanges         = 20
	MaxDescribeLabel   = 100
	MaxDescribeValue   = 500
	MaxDescribeField   = 100
	MaxDescribeMachine = 1000 // bytes of a machine value
)

// Check refuses a description outside the bounds or with machine values
// that are not JSON with a canonical form, and fills absent lists with empty ones so that every
// description has one canonical form.
func (d *Description) Check() error {
	if d.Facts == nil {
		d.Facts = []Fact{}
	}
	if d.Changes == nil {
		d.Changes = []Change{}
	}
	if len(d.Facts) > MaxFacts || len(d.Changes) > MaxChanges {
		return fmt.Errorf("%d facts and %d changes, at most %d and %d", len(d.Facts), len(d.Changes), MaxFacts, MaxChanges)
	}
	for _, f := range d.Facts {
		if f.Label == "" || utf8.RuneCountInString(f.Label) > MaxDescribeLabel || utf8.RuneCountInString(f.Value) > MaxDescribeValue {
			return fmt.Errorf("a fact's label must have 1–%d characters and its value at most %d", MaxDescribeLabel, MaxDescribeValue)
		}
	}
	for i, c := range d.Changes {
		if c.Label == "" || utf8.RuneCountInString(c.Label) > MaxDescribeLabel || len(c.Field) > MaxDescribeField ||
			utf8.RuneCountInString(c.BeforeDisplay) > MaxDescribeValue || utf8.RuneCountInString(c.AfterDisplay) > MaxDescribeValue {
			return fmt.Errorf("change %d: a label of 1–%d characters, a field of at most %d and display values of at most %d", i, MaxDescribeLabel, MaxDescribeField, MaxDescribeValue)
		}
		for _, v := range []*json.RawMessage{&d.Changes[i].Before, &d.Changes[i].After} {
			if len(*v) == 0 {
				*v = json.RawMessage("null")
			}
			if len(*v) > MaxDescribeMachine || !json.Valid(*v) {
				return fmt.Errorf("change %d: machine values must be JSON of at most %d bytes", i, MaxDescribeMachine)
			}
			// The effect digest is over the canonical form (RFC 8785),
			// which some valid JSON lacks (1e400, a duplicate key).
			if _, err := Canonical(*v); err != nil {
				return fmt.Errorf("change %d: a machine value has no canonical form: %w", i, err)
			}
		}
	}
	return nil
}

// DescriptionDigest is the canonical digest (Digest, RFC 8785) of a
// checked description.
func DescriptionDigest(d Description) (string, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	return Digest(raw)
}

// DescribeAdapter is the optional part of the adapter contract: an adapter
// that implements it tells a reviewer what a write would do — the target's
// business facts and the values it would change, before → after (for a
// refund: refundable before and after). The description is taken when the
// write is proposed and again right before an approval is recorded; when
// the two differ the approval is refused (EEffectChanged). An adapter that
// has nothing to say for a tool returns ErrNoDescription.
type DescribeAdapter interface {
	// Describe describes the write as things stand now. An unreachable
	// business system is EUnavailable.
	Describe(ctx context.Context, req DescribeRequest) (Description, error)
}

// ValidateDescribeAdapter is a DescribeAdapter that can answer both
// questions a new proposal asks — may this write happen, and what would it
// do — from one look at the business state. Propose then asks once instead
// of calling Validate and Describe in turn. Its answers must be the ones
// Validate and Describe would give over the same state.
type ValidateDescribeAdapter interface {
	DescribeAdapter
	// ValidateDescribe is Validate and, when the write is allowed (OK),
	// Describe of the same write: the description is nil when the write is
	// refused or when the adapter describes nothing for the tool. An
	// unreachable business system is EUnavailable.
	ValidateDescribe(ctx context.Context, req ValidateRequest) (ValidateResult, *Description, error)
}

// ErrNoDescription: the adapter describes nothing for this tool.
var ErrNoDescription = errors.New("no description for this write")

// TimedAdapter is an Adapter that bounds each call itself and says how long
// a call may take. The server leases an execution for at least that long
// plus a margin, so that no second attempt starts while one is in flight.
type TimedAdapter interface {
	Adapter
	Timeout() time.Duration
}
