package models

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestRedeemableIsRightOpen(t *testing.T) {
	exp := time.Date(2026, 9, 1, 6, 25, 0, 0, time.UTC)
	p := &Proposal{Status: StatusConfirmed, Token: &Token{Status: TokenIssued, Compact: "x.y.z", ExpiresAt: exp}}
	if !p.Redeemable(exp.Add(-time.Millisecond)) || !p.Revocable(exp.Add(-time.Millisecond)) {
		t.Error("a token 1 ms before its expiry must be redeemable and revocable")
	}
	if p.Redeemable(exp) || p.Revocable(exp) {
		t.Error("at now == exp the token has expired")
	}
	for name, q := range map[string]*Proposal{
		"consumed":  {Status: StatusExecuting, Token: &Token{Status: TokenConsumed, Compact: "x", ExpiresAt: exp}},
		"revoked":   {Status: StatusRevoked, Token: &Token{Status: TokenRevoked, Compact: "x", ExpiresAt: exp}},
		"no token":  {Status: StatusConfirmed},
		"awaiting":  {Status: StatusAwaitingConfirmation},
		"no string": {Status: StatusConfirmed, Token: &Token{Status: TokenIssued, ExpiresAt: exp}},
	} {
		if q.Redeemable(exp.Add(-time.Minute)) {
			t.Errorf("%s: redeemable", name)
		}
	}
}

func TestQuorumMetCountsDistinctApprovers(t *testing.T) {
	p := &Proposal{Tier: Tier{Quorum: 2}, Decisions: []Decision{
		{UserID: "a", Kind: DecisionApprove}, {UserID: "a", Kind: DecisionApprove}, {UserID: "b", Kind: DecisionDecline},
	}}
	if p.QuorumMet() {
		t.Fatal("one reviewer twice and a decline do not make a quorum of 2")
	}
	p.Decisions = append(p.Decisions, Decision{UserID: "c", Kind: DecisionApprove})
	if !p.QuorumMet() {
		t.Fatal("two distinct approvers make a quorum of 2")
	}
	if !(&Proposal{Decisions: []Decision{{UserID: "a", Kind: DecisionApprove}}}).QuorumMet() {
		t.Fatal("a zero quorum counts as one")
	}
}

func TestSharedTargets(t *testing.T) {
	ps := []*Proposal{{Resource: "ord_1"}, {Resource: "ord_2"}, {Resource: "ord_1"}, {ResourceSetDigest: "sha256:a"}, {ResourceSetDigest: "sha256:a"}}
	got := SharedTargets(ps)
	if len(got) != 2 || got["ord_1"] != 2 || got["sha256:a"] != 2 {
		t.Errorf("shared targets = %v", got)
	}
}

func TestRetryableAndRevocableAfterAFailedAttempt(t *testing.T) {
	exp := time.Date(2026, 9, 1, 6, 25, 0, 0, time.UTC)
	p := &Proposal{Status: StatusFailedRetryable, Token: &Token{Status: TokenConsumed, Compact: "x", ExpiresAt: exp}}
	if !p.Retryable(exp.Add(-time.Millisecond)) || p.Retryable(exp) {
		t.Error("a failed_retryable write may be retried before exp and not at exp")
	}
	if !p.Revocable(exp.Add(-time.Minute)) || !p.Revocable(exp.Add(time.Minute)) {
		t.Error("a failed_retryable confirmation must be revocable")
	}
	for name, q := range map[string]*Proposal{
		"unknown":   {Status: StatusUnknown, Token: &Token{Status: TokenConsumed, ExpiresAt: exp}},
		"executing": {Status: StatusExecuting, Token: &Token{Status: TokenConsumed, ExpiresAt: exp}},
		"succeeded": {Status: StatusSucceeded, Token: &Token{Status: TokenConsumed, ExpiresAt: exp}},
		"revoked":   {Status: StatusRevoked, Token: &Token{Status: TokenRevoked, ExpiresAt: exp}},
	} {
		if q.Revocable(exp.Add(-time.Minute)) || q.Retryable(exp.Add(-time.Minute)) {
			t.Errorf("%s: revocable or retryable", name)
		}
	}
}

func TestTimelineInOrder(t *testing.T) {
	t0 := time.Date(2026, 9, 1, 6, 0, 0, 0, time.UTC)
	used := t0.Add(3 * time.Minute)
	done := t0.Add(4 * time.Minute)
	p := &Proposal{AgentName: "bot", CreatedAt: t0, Status: StatusSucceeded,
		Decisions: []Decision{{UserName: "alice", Kind: DecisionApprove, Reason: "ok", CreatedAt: t0.Add(time.Minute)}},
		Token:     &Token{IssuedAt: t0.Add(time.Minute), ConsumedAt: &used},
		Execution: &Execution{Status: StatusSucceeded, CompletedAt: &done}}
	var got []string
	for _, e := range p.Timeline() {
		got = append(got, string(e.Kind)+":"+e.Who+":"+e.Detail)
	}
	want := "[proposed:bot: approved:alice:ok confirmed:: redeemed:bot: executed::succeeded]"
	if fmt := strings.Join(got, " "); "["+fmt+"]" != want {
		t.Errorf("timeline = [%s], want %s", fmt, want)
	}
	p = &Proposal{CreatedAt: t0, ExpiresAt: t0.Add(5 * time.Minute), UpdatedAt: t0.Add(9 * time.Minute), Status: StatusExpired}
	if tl := p.Timeline(); len(tl) != 2 || tl[1].Kind != StepSettled || !tl[1].At.Equal(p.ExpiresAt) {
		t.Errorf("expired timeline = %+v", tl)
	}
}

// Only the proposing agent sees a redeemable token, and only before its
// expiry (right-open); a reader of the same tenant, or the same agent id
// in another tenant, never does.
func TestAgentMaySeeToken(t *testing.T) {
	exp := time.Date(2026, 9, 1, 6, 25, 0, 0, time.UTC)
	p := &Proposal{ID: "prop_1", TenantID: "ten_a", AgentID: "agt_1", Status: StatusConfirmed,
		Token: &Token{Status: TokenIssued, Compact: "x.y.z", ExpiresAt: exp}}
	own := Agent{ID: "agt_1", TenantID: "ten_a"}
	cases := []struct {
		name  string
		agent Agent
		at    time.Time
		want  bool
	}{
		{"own, before expiry", own, exp.Add(-time.Nanosecond), true},
		{"own, at expiry", own, exp, false},
		{"a reader of the tenant", Agent{ID: "agt_2", TenantID: "ten_a", ReadAll: true}, exp.Add(-time.Minute), false},
		{"same id, other tenant", Agent{ID: "agt_1", TenantID: "ten_b"}, exp.Add(-time.Minute), false},
	}
	for _, c := range cases {
		if got := c.agent.MaySeeToken(p, c.at); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	consumed := *p
	consumed.Token = &Token{Status: TokenConsumed, Compact: "x.y.z", ExpiresAt: exp}
	if own.MaySeeToken(&consumed, exp.Add(-time.Minute)) {
		t.Error("a consumed token is shown")
	}
}

// A receipt writes its completion time as every time agents read is
// written, three millisecond digits included, and reads back the same.
func TestReceiptTimesAreWrittenOneWay(t *testing.T) {
	at := time.Date(2026, 11, 30, 23, 1, 42, 510_000_000, time.FixedZone("CST", 8*3600))
	b, err := json.Marshal(Receipt{ExecutionID: "exe_1", Status: StatusSucceeded, CompletedAt: &at})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"completed_at":"2026-11-30T15:01:42.510Z"`) || strings.Count(string(b), "completed_at") != 1 {
		t.Fatalf("receipt %s", b)
	}
	var back Receipt
	if err := json.Unmarshal(b, &back); err != nil || back.CompletedAt == nil || !back.CompletedAt.Equal(at) || back.ExecutionID != "exe_1" {
		t.Fatalf("read back %+v: %v", back, err)
	}
	if b, _ := json.Marshal(Receipt{}); !strings.Contains(string(b), `"completed_at":null`) {
		t.Fatalf("an open receipt %s", b)
	}
}
