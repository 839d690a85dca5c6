package models

import "time"

// Session is a signed-in console session. The auth service makes and ends
// sessions; the store keeps them by Handle.
type Session struct {
	// ID is the raw session id, the secret the cookie carries: 32 random
	// bytes, base64url. It is never stored; sign-in and session lookup set it.
	ID string
	// Handle is the hex SHA-256 of ID, the key the store uses; safe to log.
	Handle string
	User   User
	Tenant Tenant
	// CSRF is the session's synchronizer token for state-changing requests.
	CSRF string
	// AMR lists how the user authenticated, e.g. ["pwd"].
	AMR []string
	// KeyID is the passkey (SecurityKey.ID) the user signed in with, ""
	// for a password. The session ends when that key is flagged as a
	// possible copy, removed from another session, or of a model the
	// attestation policy reports compromised.
	KeyID     string
	CreatedAt time.Time
	// LastSeen slides with a person's requests; the session ends when it
	// has been idle for the configured idle timeout.
	LastSeen time.Time
	// ExpiresAt is the absolute end, whatever the activity.
	ExpiresAt time.Time
}

// LoginLimit is one sign-in rate limit for Key. With Backoff zero it is a
// fixed window: at most Max attempts per window. With Backoff set, Max
// attempts are free and then each further attempt waits BackoffDelay.
type LoginLimit struct {
	Key     string
	Max     int
	Backoff time.Duration
}

// BackoffDelay is how long a backoff key waits after its n-th counted
// attempt: nothing up to free attempts, then base, doubling with every
// attempt, at most limit.
func BackoffDelay(n, free int, base, limit time.Duration) time.Duration {
	if n < free || base <= 0 {
		return 0
	}
	d := base
	for i := free; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
