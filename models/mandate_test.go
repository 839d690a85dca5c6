package models_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
)

var refundTool = models.MandateTool{Name: "refund_order", PolicyVersion: "refund-1", Properties: []string{"order_id", "amount_minor", "currency", "reason"},
	Money: map[string]string{"amount_minor": "currency"}, Tiers: []models.Tier{
		{Name: "quorum", Confirmation: models.ConfirmWebAuthn, Quorum: 2}, {Name: "high", Confirmation: models.ConfirmWebAuthn, Quorum: 1},
		{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1}}}

var t0 = time.Date(2026, 9, 1, 6, 20, 0, 0, time.UTC)

func terms() models.MandateTerms {
	return models.MandateTerms{Tool: "refund_order", Agents: []string{"agt_b", "agt_a", "agt_b"}, Tiers: []string{"high"},
		Resources: []string{"ord_2", "ord_1"}, Money: &models.MandateMoney{Field: "amount_minor", Currency: "CNY", PerCallCap: 500, Budget: 1000},
		Enums: map[string][]string{"reason": {"late", "damaged"}}, Patterns: map[string]string{"order_id": `ord_[0-9]`},
		ExpiresAt: t0.Add(time.Hour + 300*time.Millisecond), Reason: " sale "}
}

// Check puts terms in one canonical form: the same meaning gives the same
// digest, whatever the order or duplicates the asker sent.
func TestMandateTermsCanonical(t *testing.T) {
	a := terms()
	if err := a.Check(refundTool, t0); err != nil {
		t.Fatal(err)
	}
	b := terms()
	b.Agents = []string{"agt_a", "agt_b"}
	b.Resources = []string{"ord_1", "ord_2", "ord_1"}
	b.Enums = map[string][]string{"reason": {"damaged", "late"}}
	if err := b.Check(refundTool, t0); err != nil {
		t.Fatal(err)
	}
	ja, da, err := a.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	_, db, _ := b.Canonical()
	if da != db {
		t.Fatalf("digests differ: %s %s", da, db)
	}
	var back models.MandateTerms
	if err := json.Unmarshal(ja, &back); err != nil || back.Money.CurrencyField != "currency" ||
		len(back.Tiers) != 2 || back.Tiers[1] != "low" || back.Reason != "sale" || back.ExpiresAt != t0.Add(time.Hour) {
		t.Fatalf("canonical terms %s: %v", ja, err)
	}
	c := terms()
	c.Money.Budget = 1001
	_ = c.Check(refundTool, t0)
	if _, dc, _ := c.Canonical(); dc == da {
		t.Fatal("a different budget has the same digest")
	}
}

func proposal(order string, amount int64, currency, reason, tier string) *models.Proposal {
	args, _ := json.Marshal(map[string]any{"order_id": order, "amount_minor": amount, "currency": currency, "reason": reason})
	return &models.Proposal{Tool: "refund_order", Resource: order, Arguments: args, Tier: models.Tier{Name: tier}, PolicyVersion: "refund-1"}
}

func TestMandateFit(t *testing.T) {
	tm := terms()
	if err := tm.Check(refundTool, t0); err != nil {
		t.Fatal(err)
	}
	m := models.Mandate{Terms: tm, Status: models.MandateActive, Spent: 600}
	cases := []struct {
		p      *models.Proposal
		now    time.Time
		amount int64
		reason string
	}{
		{proposal("ord_1", 400, "CNY", "late", "low"), t0, 400, ""},
		{proposal("ord_1", 400, "CNY", "late", "high"), t0, 400, ""},
		{proposal("ord_1", 400, "CNY", "late", "quorum"), t0, 0, models.MandateTierAbove},
		{proposal("ord_3", 400, "CNY", "late", "low"), t0, 0, models.MandateResourceOut},
		{proposal("ord_1", 400, "CNY", "whim", "low"), t0, 0, "reason not among the mandate's values"},
		{proposal("ord_1", 400, "EUR", "late", "low"), t0, 0, models.MandateCurrencyOther},
		{proposal("ord_1", 501, "CNY", "late", "low"), t0, 0, models.MandateOverCap},
		{proposal("ord_1", 401, "CNY", "late", "low"), t0, 0, models.MandateBudgetOut},
		{proposal("ord_1", 400, "CNY", "late", "low"), tm.ExpiresAt.Add(-time.Millisecond), 400, ""},
		{proposal("ord_1", 400, "CNY", "late", "low"), tm.ExpiresAt, 0, models.MandateExpired},
	}
	for i, c := range cases {
		amount, reason := m.Fit(c.p, c.now)
		if amount != c.amount || reason != c.reason {
			t.Errorf("case %d: got %d %q, want %d %q", i, amount, reason, c.amount, c.reason)
		}
	}
	other := proposal("ord_1", 400, "CNY", "late", "low")
	other.PolicyVersion = "refund-2"
	if _, reason := m.Fit(other, t0); reason != models.MandatePolicyOther {
		t.Errorf("another policy version: %q", reason)
	}
	// A batch fits only when every id of its set is allowed.
	batch := proposal("", 100, "CNY", "late", "low")
	batch.ResourceSet, batch.ResourceSetDigest = []string{"ord_1", "ord_3"}, "sha256:x"
	if _, reason := m.Fit(batch, t0); reason != models.MandateResourceOut {
		t.Errorf("batch with an id outside the set: %q", reason)
	}
	m.Status = models.MandateRevoked
	if _, reason := m.Fit(cases[0].p, t0); reason != models.MandateRevokedReason {
		t.Errorf("revoked: %q", reason)
	}
	m.Status, m.Spent, m.Uses, m.Terms.MaxUses = models.MandateActive, 0, 3, 3
	if _, reason := m.Fit(cases[0].p, t0); reason != models.MandateUsesOut {
		t.Errorf("uses exhausted: %q", reason)
	}
}

// TestMandateState: revoked wins over a disabled grantor, which wins over
// expiry; expiry is right-open at the terms' ExpiresAt, and Live is the
// live state alone.
func TestMandateState(t *testing.T) {
	exp := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		status   models.MandateStatus
		disabled bool
		at       time.Time
		want     models.MandateState
	}{
		{models.MandateActive, false, exp.Add(-time.Nanosecond), models.MandateStateLive},
		{models.MandateActive, false, exp, models.MandateStateExpired},
		{models.MandateActive, true, exp.Add(-time.Hour), models.MandateStateStopped},
		{models.MandateActive, true, exp.Add(time.Hour), models.MandateStateStopped},
		{models.MandateRevoked, true, exp.Add(-time.Hour), models.MandateStateRevoked},
		{models.MandateRevoked, false, exp.Add(time.Hour), models.MandateStateRevoked},
		{"", false, exp.Add(-time.Hour), models.MandateStateExpired},
	} {
		m := &models.Mandate{Status: c.status, GrantorDisabled: c.disabled, Terms: models.MandateTerms{ExpiresAt: exp}}
		if got := m.State(c.at); got != c.want {
			t.Errorf("%s, grantor disabled %v, at %s: %s, want %s", c.status, c.disabled, c.at, got, c.want)
		}
		if got, want := m.Live(c.at), c.want == models.MandateStateLive; got != want {
			t.Errorf("%s, grantor disabled %v, at %s: Live %v", c.status, c.disabled, c.at, got)
		}
	}
}

// A reviewer reads the tool's title and the agents' names beside the ids
// the terms store; the machine values stay the ids.
func TestMandatePreviewNamesToolAndAgents(t *testing.T) {
	m := terms()
	if err := m.Check(refundTool, t0); err != nil {
		t.Fatal(err)
	}
	money := func(minor int64, currency string) (string, error) {
		return currency + " " + string(rune('0'+minor%10)), nil
	}
	shown := map[string]models.PreviewField{}
	fields, err := m.Preview(money, models.MandateNames{ToolTitle: "Issue a refund", Agents: map[string]string{"agt_a": "refund-bot"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		shown[f.Name] = f
	}
	if got, want := shown["tool"].Display, "Issue a refund — refund_order (rules refund-1)"; got != want {
		t.Errorf("tool shown as %q, want %q", got, want)
	}
	if got, want := shown["agents"].Display, "refund-bot (agt_a), agt_b"; got != want {
		t.Errorf("agents shown as %q, want %q", got, want)
	}
	if got := string(shown["agents"].Value); got != `["agt_a","agt_b"]` {
		t.Errorf("agents stored as %s", got)
	}
}

// Which tiers terms cover follows what each tier asks for, not the order
// of the tool's risk rules: a tool listing its lenient tier first covers
// nothing stricter under it, and terms with no tiers take the one tier at
// least as strict as every other, or are refused when there is none.
func TestMandateTiersFollowStrictness(t *testing.T) {
	click := models.Tier{Name: "small", Confirmation: models.ConfirmClick, Quorum: 1}
	key := models.Tier{Name: "big", Confirmation: models.ConfirmWebAuthn, Quorum: 2}
	finance := models.Tier{Name: "finance", Confirmation: models.ConfirmClick, Quorum: 1,
		Require: []models.Factor{{Group: "finance", Count: 1}}}
	tool := refundTool
	tool.Tiers = []models.Tier{click, key}
	covered := func(tiers ...string) ([]string, error) {
		x := terms()
		x.Tiers = tiers
		err := x.Check(tool, t0)
		return x.Tiers, err
	}
	if got, err := covered("small"); err != nil || len(got) != 1 || got[0] != "small" {
		t.Errorf("small: %v %v", got, err)
	}
	if got, err := covered("big"); err != nil || len(got) != 2 || got[0] != "big" || got[1] != "small" {
		t.Errorf("big: %v %v", got, err)
	}
	if got, err := covered(); err != nil || len(got) != 2 || got[0] != "big" {
		t.Errorf("by default: %v %v", got, err)
	}
	tool.Tiers = []models.Tier{click, key, finance}
	if _, err := covered(); !models.IsCode(err, models.EInvalidRequest) {
		t.Errorf("no tier at least as strict as all: %v", err)
	}
	if got, err := covered("finance"); err != nil || len(got) != 2 || got[1] != "small" {
		t.Errorf("finance: %v %v", got, err)
	}
	for _, c := range []struct {
		a, b models.Tier
		want bool
	}{
		{click, key, true}, {key, click, false}, {finance, click, false}, {click, finance, true},
		{finance, key, false}, {key, finance, false},
		{models.Tier{Confirmation: models.ConfirmClick, Quorum: 1}, models.Tier{Confirmation: models.ConfirmClick, Quorum: 1, AllowSelfApproval: true}, false},
	} {
		if got := c.a.NoStricterThan(c.b); got != c.want {
			t.Errorf("%+v no stricter than %+v = %v", c.a, c.b, got)
		}
	}
}
