package models

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strconv"
)

// DownstreamKeyPrefix starts every idempotency key countersign derives for a
// business system.
const DownstreamKeyPrefix = "cs1_"

// DownstreamKey returns the idempotency key a business system sees for one
// execution: "cs1_" followed by the lower-case hex SHA-256 of the
// installation id, tenant id, agent id and request key, each
// length-prefixed so that no two different inputs share an encoding.
//
// It is the same for every attempt of one execution (the inputs never
// change), differs between installations, tenants and agents that use the
// same request key, so that a business system de-duplicating on the key
// alone can never hand one tenant's outcome to another, and consists of
// characters that travel unchanged in an HTTP header and a URL path segment.
func DownstreamKey(installation, tenant, agent, requestKey string) string {
	h := sha256.New()
	for _, part := range []string{installation, tenant, agent, requestKey} {
		io.WriteString(h, strconv.Itoa(len(part)))
		io.WriteString(h, ":")
		io.WriteString(h, part)
	}
	return DownstreamKeyPrefix + hex.EncodeToString(h.Sum(nil))
}
