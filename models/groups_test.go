package models

import (
	"fmt"
	"testing"
)

func approvedBy(tier Tier, users ...string) *Proposal {
	p := &Proposal{Tier: tier}
	for _, u := range users {
		p.Decisions = append(p.Decisions, Decision{UserID: u, Kind: DecisionApprove})
	}
	return p
}

func TestApprovalsMet(t *testing.T) {
	fin, sec := Factor{Group: "finance", Count: 1}, Factor{Group: "security", Count: 1}
	two := Tier{Quorum: 1, Require: []Factor{fin, sec}}
	groups := map[string][]string{
		"f1": {"finance"}, "f2": {"finance"}, "s1": {"security"},
		"both": {"finance", "security"}, "none": nil,
	}
	cases := []struct {
		tier  Tier
		users []string
		met   bool
		have  string // approvers per factor
		more  int    // approvals still needed (StillNeeded)
	}{
		{two, nil, false, "[[] []]", 2},
		{two, []string{"f1"}, false, "[[f1] []]", 1},
		{two, []string{"f1", "f2"}, false, "[[f1] []]", 1},
		{two, []string{"f1", "s1"}, true, "[[f1] [s1]]", 0},
		// One person in both groups never completes both factors alone.
		{two, []string{"both"}, false, "[[both] []]", 1},
		{two, []string{"both", "both"}, false, "[[both] []]", 1},
		// …but with a finance approver, "both" moves to security.
		{two, []string{"both", "f1"}, true, "[[f1] [both]]", 0},
		{two, []string{"none", "f1"}, false, "[[f1] []]", 1},
		// The quorum still counts on top of the factors.
		{Tier{Quorum: 3, Require: []Factor{fin, sec}}, []string{"f1", "s1"}, false, "[[f1] [s1]]", 1},
		{Tier{Quorum: 3, Require: []Factor{fin, sec}}, []string{"f1", "s1", "none"}, true, "[[f1] [s1]]", 0},
		{Tier{Quorum: 1, Require: []Factor{{Group: "finance", Count: 2}}}, []string{"f1", "both"}, true, "[[f1 both]]", 0},
		{Tier{Quorum: 2}, []string{"none", "f1"}, true, "[]", 0},
	}
	for i, c := range cases {
		p := approvedBy(c.tier, c.users...)
		met, progress := ApprovalsMet(p, groups)
		var have [][]string
		for _, fp := range progress {
			have = append(have, fp.Approvers)
		}
		if met != c.met || fmt.Sprint(have) != c.have {
			t.Errorf("case %d %v: met=%v %v, want %v %s", i, c.users, met, have, c.met, c.have)
		}
		p.Progress = progress
		unmet := 0
		for _, fp := range progress {
			if !fp.Met() {
				unmet++
			}
		}
		if more, short := p.StillNeeded(); more != c.more || (more == 0) != met || len(short) != unmet {
			t.Errorf("case %d %v: still needed %d %v, want %d", i, c.users, more, short, c.more)
		}
		// The meter never reads complete while a factor is short.
		if have, need := p.ApprovalCount(); have != len(p.Approvals()) || need-have != c.more || need < c.tier.Approvers() {
			t.Errorf("case %d %v: approval count %d of %d, want %d more", i, c.users, have, need, c.more)
		}
	}
	// A write a mandate confirmed needed no approval.
	auto := approvedBy(two)
	auto.MandateID = "mdt_1"
	if have, need := auto.ApprovalCount(); have != 0 || need != 0 {
		t.Errorf("a mandate's write counts %d of %d approvals, want 0 of 0", have, need)
	}
	// A voided approval does not count toward any factor.
	p := approvedBy(two, "f1", "s1")
	p.Decisions[1].VoidedAt = new(p.CreatedAt)
	if met, _ := ApprovalsMet(p, groups); met {
		t.Error("a voided approval completed a factor")
	}
}

func TestSelfApprovalAcrossFactors(t *testing.T) {
	one := Tier{Quorum: 1, AllowSelfApproval: true}
	if SelfApprovalForbidden(one) {
		t.Fatal("a one-approver tier that allows self-approval forbids it")
	}
	one.Require = []Factor{{Group: "finance", Count: 1}, {Group: "security", Count: 1}}
	if !SelfApprovalForbidden(one) {
		t.Fatal("two factors need two people; the requester must not be one of them")
	}
}
