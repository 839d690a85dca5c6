package models

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Factor is one requirement of a risk tier: Count distinct approvers who
// belong to the reviewer group Group. A tier with several factors needs all
// of them ("1 of finance AND 1 of security").
type Factor struct {
	Group string
	Count int
}

// GroupNamePattern is the alphabet of reviewer group names.
var GroupNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// ReviewerGroup is a named set of a tenant's console users, managed by its
// administrators. Tiers name groups in their requirements (Factor).
type ReviewerGroup struct {
	ID        string
	TenantID  string
	Name      string
	CreatedAt time.Time
	// Members are the users in the group, by name order.
	Members []GroupMember
}

// GroupMember is one user of a group.
type GroupMember struct {
	UserID   string
	UserName string
	AddedAt  time.Time
}

// Approvers is the number of distinct people a tier needs: its quorum, or
// the sum of its factors' counts when that is more (each approval counts
// toward one factor at most).
func (t Tier) Approvers() int {
	n := 0
	for _, f := range t.Require {
		n += f.Count
	}
	return max(t.Quorum, n, 1)
}

// FactorProgress is where one factor of a proposal stands.
type FactorProgress struct {
	Factor
	// Approvers are the user ids whose approvals count toward this factor
	// in the assignment that ApprovalsMet found.
	Approvers []string
}

// Met reports whether the factor has its count.
func (f FactorProgress) Met() bool { return len(f.Approvers) >= f.Count }

// ApprovalsMet is the whole decision rule for confirming p: at least
// Tier.Approvers() distinct counted approvals (Proposal.Approvals), and
// every factor of the tier met, where each approver counts toward one
// factor at most and only toward a factor whose group they belong to
// (groups maps a user id to the names of the groups the user is in, as
// stored when the decision is taken). One person in two groups therefore
// never completes two factors alone: "1 of finance AND 1 of security"
// always takes two people. The rules that bar a reviewer from approving at
// all — self-approval, the editor of a counter-proposal, separation of
// duties (DutyConflict) — are checked before an approval is recorded, so
// they hold for every factor alike.
//
// It is a pure function: the store calls it inside the deciding
// transaction with the memberships read there. progress has one entry per
// factor, in the tier's order, from an assignment that meets as many
// factor slots as possible.
func ApprovalsMet(p *Proposal, groups map[string][]string) (met bool, progress []FactorProgress) {
	approvals := p.Approvals()
	// Slots: one per approver a factor needs. Assign approvers to slots
	// by augmenting paths (bipartite matching): small inputs, exact.
	type slot struct{ factor int }
	var slots []slot
	for i, f := range p.Tier.Require {
		for range f.Count {
			slots = append(slots, slot{i})
		}
	}
	eligible := func(userID string, s slot) bool {
		return slices.Contains(groups[userID], p.Tier.Require[s.factor].Group)
	}
	owner := make([]int, len(slots)) // slot → approval index, -1 when free
	for i := range owner {
		owner[i] = -1
	}
	var try func(a int, seen []bool) bool
	try = func(a int, seen []bool) bool {
		for s := range slots {
			if seen[s] || !eligible(approvals[a].UserID, slots[s]) {
				continue
			}
			seen[s] = true
			if owner[s] < 0 || try(owner[s], seen) {
				owner[s] = a
				return true
			}
		}
		return false
	}
	filled := 0
	for a := range approvals {
		if try(a, make([]bool, len(slots))) {
			filled++
		}
	}
	progress = make([]FactorProgress, len(p.Tier.Require))
	for i, f := range p.Tier.Require {
		progress[i].Factor = f
	}
	// Approvers of a factor in the order they approved.
	for a := range approvals {
		for s, o := range owner {
			if o == a {
				fp := &progress[slots[s].factor]
				fp.Approvers = append(fp.Approvers, approvals[a].UserID)
			}
		}
	}
	met = filled == len(slots) && len(approvals) >= p.Tier.Approvers()
	return met, progress
}

// StillNeeded says how many more approvals p needs, as ApprovalsMet left
// its progress (p.Progress): the larger of the quorum's shortfall and the
// factors' own (an approver counts toward one factor only), and the
// factors not met, each with how many it lacks. Zero means the approvals
// are complete.
func (p *Proposal) StillNeeded() (int, []FactorShortfall) {
	var short int
	var lacking []FactorShortfall
	for _, f := range p.Progress {
		if n := f.Count - len(f.Approvers); n > 0 {
			short += n
			lacking = append(lacking, FactorShortfall{Group: f.Group, Missing: n})
		}
	}
	return max(p.Tier.Approvers()-len(p.Approvals()), short), lacking
}

// ApprovalCount is how many counted approvals p has and how many it needs
// in all, as one meter: the tier's approvers, or more while a factor still
// lacks approvers of its group (StillNeeded), since an approval outside the
// group counts toward the quorum only. A write a mandate confirmed needed
// no approval at all.
func (p *Proposal) ApprovalCount() (have, need int) {
	have = len(p.Approvals())
	if p.MandateID != "" {
		return have, have
	}
	more, _ := p.StillNeeded()
	return have, have + more
}

// FactorShortfall is a factor that is not met and how many approvers of
// its group it lacks.
type FactorShortfall struct {
	Group   string
	Missing int
}

// Shortfalls says in words what the factors not met lack, as StillNeeded
// returns them: "1 from group finance and 2 from group security"; "" when
// none lacks anything.
func Shortfalls(short []FactorShortfall) string {
	parts := make([]string, len(short))
	for i, f := range short {
		parts[i] = fmt.Sprintf("%d from group %s", f.Missing, f.Group)
	}
	return strings.Join(parts, " and ")
}

// CheckFactors validates a tier's factors: known-looking group names, each
// group named once, counts of at least one.
func CheckFactors(fs []Factor) error {
	seen := map[string]bool{}
	for i, f := range fs {
		if !GroupNamePattern.MatchString(f.Group) {
			return fmt.Errorf("require[%d]: group %q must match %s", i, f.Group, GroupNamePattern)
		}
		if seen[f.Group] {
			return fmt.Errorf("require[%d]: group %q is named twice; give one count", i, f.Group)
		}
		seen[f.Group] = true
		if f.Count < 1 {
			return fmt.Errorf("require[%d]: count must be at least 1", i)
		}
	}
	return nil
}

// NoStricterThan reports whether tier t asks for nothing more than tier u:
// no security key where u needs none, no more approvers, no group
// requirement that u does not make at least as large, and no ban on
// self-approval that u does not have. A standing mandate granted under u
// may confirm a write of t only if this holds; the order of a tool's risk
// rules (the first that matches decides) says nothing about it.
func (t Tier) NoStricterThan(u Tier) bool {
	if t.Confirmation == ConfirmWebAuthn && u.Confirmation != ConfirmWebAuthn {
		return false
	}
	if t.Quorum > u.Quorum || t.Approvers() > u.Approvers() {
		return false
	}
	if !t.AllowSelfApproval && u.AllowSelfApproval {
		return false
	}
	for _, f := range t.Require {
		ok := false
		for _, g := range u.Require {
			ok = ok || (g.Group == f.Group && g.Count >= f.Count)
		}
		if !ok {
			return false
		}
	}
	return true
}
