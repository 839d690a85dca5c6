package models

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Counter links two versions of one proposed write: a reviewer edited the
// arguments of Original (which ended superseded) instead of declining it,
// and Revised is the new version the agent redeems once it is confirmed.
// Both proposals carry the same Counter (see Proposal.Supersedes and
// Proposal.SupersededBy).
type Counter struct {
	OriginalID string
	RevisedID  string
	// EditorID is the reviewer who edited; the edit counts as their
	// proposal (see EditorMayApprove). EditorName is for display.
	EditorID   string
	EditorName string
	Reason     string
	// Changes lists every top-level argument whose value differs.
	Changes []ArgChange
	// Version is the revised proposal's place in the chain: the agent's
	// own proposal is version 1, its first edit 2, an edit of that 3.
	Version int
	// RootRequestKey is the request key of version 1; the revised
	// proposal's key derives from it (CounterRequestKey).
	RootRequestKey string
	CreatedAt      time.Time
}

// ArgChange is one argument changed by an edit. Before or After is nil when
// the argument was added or removed.
type ArgChange struct {
	Pointer string          `json:"pointer"`
	Before  json.RawMessage `json:"before"`
	After   json.RawMessage `json:"after"`
}

// ArgumentDiff compares two argument objects (normalized JSON objects) at
// their top level and returns the changes ordered by JSON pointer. Values
// compare by their canonical bytes, so a nested object counts as one value.
// EInvalidRequest when either side is not a JSON object.
func ArgumentDiff(before, after json.RawMessage) ([]ArgChange, error) {
	var b, a map[string]json.RawMessage
	if err := json.Unmarshal(before, &b); err != nil || b == nil {
		return nil, Errorf(EInvalidRequest, "the arguments must be a JSON object")
	}
	if err := json.Unmarshal(after, &a); err != nil || a == nil {
		return nil, Errorf(EInvalidRequest, "the arguments must be a JSON object")
	}
	var names []string
	for k := range b {
		names = append(names, k)
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var out []ArgChange
	for _, k := range names {
		bv, inB := b[k]
		av, inA := a[k]
		if inB && inA {
			bc, err := Canonical(bv)
			if err != nil {
				return nil, err
			}
			ac, err := Canonical(av)
			if err != nil {
				return nil, err
			}
			if bytes.Equal(bc, ac) {
				continue
			}
			bv, av = bc, ac
		}
		c := ArgChange{Pointer: "/" + escapePointer(k)}
		if inB {
			c.Before = bv
		}
		if inA {
			c.After = av
		}
		out = append(out, c)
	}
	return out, nil
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// maxRequestKey mirrors the request key bound of the protocol (200 ASCII
// characters).
const maxRequestKey = 200

// CounterRequestKey is the request key of version n (n ≥ 2) of a proposal
// whose agent proposed version 1 under rootKey: rootKey + ":v" + n, or,
// when that would pass the 200-character bound of request keys,
// "v" + n + ":" + the first 40 hex digits of SHA-256(rootKey). It is
// deterministic, so an agent can tell the versions of its write apart and
// find them; it stays in the agent's request-key family (the same agent's
// unique keys), and the agent should not use keys ending ":v<n>" for writes
// of its own — an edit whose key is taken is refused (EIdempotencyKeyReuse).
func CounterRequestKey(rootKey string, n int) string {
	k := fmt.Sprintf("%s:v%d", rootKey, n)
	if len(k) <= maxRequestKey {
		return k
	}
	sum := sha256.Sum256([]byte(rootKey))
	return fmt.Sprintf("v%d:%s", n, hex.EncodeToString(sum[:])[:40])
}

// EditorMayApprove reports whether reviewer may approve p given who edited
// it: the reviewer who made p by editing another version is its requester
// and may never approve it, whatever the tier allows — a person cannot
// both write a change and be the one who confirms it, so an edit always
// needs another reviewer (a quorum of N needs N people besides the
// editor). Proposals that are not edits allow everyone here (the agent
// owner's rule is SelfApprovalForbidden).
func EditorMayApprove(p *Proposal, reviewerID string) bool {
	return p.Supersedes == nil || p.Supersedes.EditorID != reviewerID
}
