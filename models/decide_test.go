package models

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	voided := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	approve := func(u string) Decision { return Decision{UserID: u, Kind: DecisionApprove} }
	decline := func(u string) Decision { return Decision{UserID: u, Kind: DecisionDecline, Reason: "no"} }
	disabled := func(u string) Decision { d := approve(u); d.VoidedAt = &voided; return d }

	fin, sec := Factor{Group: "finance", Count: 1}, Factor{Group: "security", Count: 1}
	groups := map[string][]string{"f1": {"finance"}, "s1": {"security"}, "both": {"finance", "security"}}
	one, two := Tier{Quorum: 1}, Tier{Quorum: 2}
	finSec := Tier{Quorum: 1, Require: []Factor{fin, sec}}

	cases := []struct {
		name      string
		tier      Tier
		decisions []Decision // the last one is the decision just recorded
		groups    map[string][]string
		want      Verdict
	}{
		{"one click confirms a one-approver tier", one, []Decision{approve("a")}, nil, VerdictConfirmed},
		{"a zero quorum still needs one approver", Tier{}, []Decision{approve("a")}, nil, VerdictConfirmed},
		{"a decline ends an untouched proposal", one, []Decision{decline("a")}, nil, VerdictDeclined},
		{"a decline ends a proposal that had approvals", two, []Decision{approve("a"), decline("b")}, nil, VerdictDeclined},
		{"a decline wins even where approvals would suffice", one, []Decision{approve("a"), decline("b")}, nil, VerdictDeclined},
		{"partial quorum keeps waiting", two, []Decision{approve("a")}, nil, VerdictAwaiting},
		{"complete quorum confirms", two, []Decision{approve("a"), approve("b")}, nil, VerdictConfirmed},
		{"a duplicate approver counts once", two, []Decision{approve("a"), approve("a")}, nil, VerdictAwaiting},
		{"a disabled approver's voided approval does not count", two, []Decision{disabled("a"), approve("b")}, nil, VerdictAwaiting},
		{"quorum complete after a voided approval", two, []Decision{disabled("a"), approve("b"), approve("c")}, nil, VerdictConfirmed},
		{"one factor of two keeps waiting", finSec, []Decision{approve("f1")}, groups, VerdictAwaiting},
		{"both factors confirm", finSec, []Decision{approve("f1"), approve("s1")}, groups, VerdictConfirmed},
		{"one person in both groups is one approver", finSec, []Decision{approve("both")}, groups, VerdictAwaiting},
		{"a non-member completes no factor", finSec, []Decision{approve("f1"), approve("x")}, groups, VerdictAwaiting},
		{"factors met but quorum not", Tier{Quorum: 3, Require: []Factor{fin, sec}},
			[]Decision{approve("f1"), approve("s1")}, groups, VerdictAwaiting},
		{"memberships unknown: factors unmet", finSec, []Decision{approve("f1"), approve("s1")}, nil, VerdictAwaiting},
		{"a decline ends a grouped proposal", finSec, []Decision{approve("f1"), decline("s1")}, groups, VerdictDeclined},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &Proposal{Tier: c.tier, Status: StatusAwaitingConfirmation, Decisions: c.decisions}
			last := c.decisions[len(c.decisions)-1]
			if got := Decide(p, last.Kind, c.groups); got != c.want {
				t.Errorf("Decide = %s, want %s", got, c.want)
			}
		})
	}
}
