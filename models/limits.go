package models

import (
	"errors"
	"math"
	"time"
)

// Limits bound what one agent may do at a time, so that one agent (or one
// leaked key) cannot flood its tenant's reviewers, database and business
// system. Zero in a field means no limit.
type Limits struct {
	// ProposalsPerMinute is how many proposals the agent may create in any
	// 60 seconds (idempotent retries of an existing proposal are free).
	ProposalsPerMinute int
	// OpenProposals is how many of the agent's proposals may await
	// confirmation at once.
	OpenProposals int
	// ConcurrentWaits is how many long-polls the agent may hold at once,
	// across every instance.
	ConcurrentWaits int
}

// LimitOverride changes some of the limits for a tenant or one agent; a nil
// field inherits (the agent's from its tenant's, the tenant's from the
// server's defaults). 0 means no limit.
type LimitOverride struct {
	ProposalsPerMinute *int
	OpenProposals      *int
	ConcurrentWaits    *int
}

// Apply returns l with o's set fields in place of l's.
func (l Limits) Apply(o LimitOverride) Limits {
	if o.ProposalsPerMinute != nil {
		l.ProposalsPerMinute = *o.ProposalsPerMinute
	}
	if o.OpenProposals != nil {
		l.OpenProposals = *o.OpenProposals
	}
	if o.ConcurrentWaits != nil {
		l.ConcurrentWaits = *o.ConcurrentWaits
	}
	return l
}

// RateLimited returns an ERateLimited error that asks the caller to come back
// after retryAfter (rounded up to whole seconds, at least one), named in its
// details as "retry_after" (seconds) and "limit".
func RateLimited(limit string, retryAfter time.Duration, format string, args ...any) *Error {
	e := Errorf(ERateLimited, format, args...)
	e.Details = map[string]any{"limit": limit, "retry_after": RetrySeconds(retryAfter)}
	return e
}

// RetrySeconds rounds a wait up to whole seconds, at least one.
func RetrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// RetryAfter returns the seconds an ERateLimited error asks the caller to
// wait (its "retry_after" detail), for a Retry-After header.
func RetryAfter(err error) (int, bool) {
	var e *Error
	if !errors.As(err, &e) || e.Code != ERateLimited {
		return 0, false
	}
	n, ok := e.Details["retry_after"].(int)
	return n, ok
}
