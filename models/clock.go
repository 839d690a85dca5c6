package models

import (
	"crypto/rand"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Clock is the only source of "now" in the domain; tests inject a fixed one.
type Clock interface{ Now() time.Time }

// SystemClock is the server's clock, in UTC with millisecond precision (the
// precision the store keeps).
type SystemClock struct{}

// Now returns the current UTC time truncated to milliseconds.
func (SystemClock) Now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// FixedClock is a settable clock for tests.
type FixedClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewFixedClock returns a clock stopped at t.
func NewFixedClock(t time.Time) *FixedClock {
	return &FixedClock{t: t.UTC().Truncate(time.Millisecond)}
}

// Now returns the clock's time.
func (c *FixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *FixedClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t.UTC().Truncate(time.Millisecond)
}

// Advance moves the clock forward by d.
func (c *FixedClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var (
	idMu      sync.Mutex
	idEntropy = ulid.Monotonic(rand.Reader, 0)
)

// NewID returns a new identifier with the given prefix: a ULID (48 bits of
// milliseconds, 80 random bits), lower-cased, e.g. "prop_01j…". Within one
// process IDs strictly increase, also within one millisecond, so ordering
// by (creation time, id) is ordering by creation.
func NewID(prefix string) string {
	idMu.Lock()
	id := ulid.MustNew(ulid.Now(), idEntropy)
	idMu.Unlock()
	return prefix + "_" + strings.ToLower(id.String())
}

// TimeFormat is how times are written for agents and integrators (the API,
// MCP results, event details): RFC 3339 in UTC with millisecond
// precision, the precision the store keeps, always three digits.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes t in TimeFormat.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }
