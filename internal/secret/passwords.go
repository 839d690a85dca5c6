package secret

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/crypto/argon2"
)

// PasswordParams are the argon2id costs of new password hashes. Stored
// hashes carry their own parameters, so changing these never invalidates a
// password; it only changes what the next hash costs.
type PasswordParams struct {
	MemoryKiB uint32 // m, in KiB; at least 8 per thread
	Time      uint32 // t, passes over the memory
	Threads   uint8  // p, lanes
}

// DefaultPasswordParams are production's costs: 64 MiB, two passes, two
// lanes (RFC 9106's second recommended option, with fewer passes for a
// console sign-in's latency).
var DefaultPasswordParams = PasswordParams{MemoryKiB: 64 * 1024, Time: 2, Threads: 2}

// Validate reports whether p is a usable argon2id setting within the bounds
// a stored hash may ask for.
func (p PasswordParams) Validate() error {
	switch {
	case p.Threads < 1:
		return errors.New("password hash: p (threads) must be at least 1")
	case p.Time < 1 || p.Time > maxTime:
		return fmt.Errorf("password hash: t (passes) must be 1 to %d", maxTime)
	case p.MemoryKiB < 8*uint32(p.Threads) || p.MemoryKiB > maxMemory:
		return fmt.Errorf("password hash: m (KiB) must be 8×p to %d", maxMemory)
	}
	return nil
}

// String is the PHC parameter spelling, "m=65536,t=2,p=2".
func (p PasswordParams) String() string {
	return fmt.Sprintf("m=%d,t=%d,p=%d", p.MemoryKiB, p.Time, p.Threads)
}

// MarshalText makes PasswordParams usable as a flag (flag.TextVar).
func (p PasswordParams) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses "m=KIB,t=PASSES,p=THREADS" and validates it.
func (p *PasswordParams) UnmarshalText(b []byte) error {
	kv := strings.Split(string(b), ",")
	if len(kv) != 3 {
		return fmt.Errorf("password hash parameters %q: want m=KIB,t=PASSES,p=THREADS", b)
	}
	m, err1 := param(kv[0], "m", 1, maxMemory)
	t, err2 := param(kv[1], "t", 1, maxTime)
	th, err3 := param(kv[2], "p", 1, 255)
	if errors.Join(err1, err2, err3) != nil {
		return fmt.Errorf("password hash parameters %q: want m=KIB,t=PASSES,p=THREADS", b)
	}
	q := PasswordParams{MemoryKiB: m, Time: t, Threads: uint8(th)}
	if err := q.Validate(); err != nil {
		return err
	}
	*p = q
	return nil
}

// Passwords hashes and checks reviewer passwords with one set of costs, and
// bounds how many hashes run at once: each argon2id computation holds its
// memory cost (64 MiB by default) until it ends, so without a bound a burst
// of sign-ins would take memory without limit. Callers beyond the bound
// wait their turn. Safe for concurrent use.
type Passwords struct {
	params PasswordParams
	slots  chan struct{}
}

// NewPasswords returns a Passwords that hashes with p and runs at most
// concurrent hashes at a time (GOMAXPROCS when concurrent <= 0).
func NewPasswords(p PasswordParams, concurrent int) (*Passwords, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if concurrent <= 0 {
		concurrent = runtime.GOMAXPROCS(0)
	}
	return &Passwords{params: p, slots: make(chan struct{}, concurrent)}, nil
}

// defaultPasswords serves HashPassword and VerifyPassword.
var defaultPasswords, _ = NewPasswords(DefaultPasswordParams, 0)

// Params returns the costs of new hashes.
func (h *Passwords) Params() PasswordParams { return h.params }

// Hash returns an argon2id PHC string of password
// ($argon2id$v=19$m=…,t=…,p=…$salt$hash) with a random 16-byte salt. It
// returns ErrPasswordLength for a password shorter than 8 or longer than
// 1024 bytes.
func (h *Passwords) Hash(password string) (string, error) {
	if len(password) < MinPasswordLen || len(password) > MaxPasswordLen {
		return "", ErrPasswordLength
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	p := params{memory: h.params.MemoryKiB, time: h.params.Time, threads: h.params.Threads}
	h.slots <- struct{}{}
	key := argon2.IDKey([]byte(password), salt, p.time, p.memory, p.threads, hashLen)
	<-h.slots
	return encode(p, salt, key), nil
}

// Verify checks password against a PHC string in constant time, with the
// parameters the string carries; it returns false for malformed hashes.
func (h *Passwords) Verify(encoded, password string) bool {
	if len(password) > MaxPasswordLen {
		return false
	}
	p, salt, want, ok := decode(encoded)
	if !ok {
		return false
	}
	h.slots <- struct{}{}
	got := argon2.IDKey([]byte(password), salt, p.time, p.memory, p.threads, uint32(len(want)))
	<-h.slots
	return subtle.ConstantTimeCompare(got, want) == 1
}
