package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// An administrator lists and revokes a standing mandate from the terminal;
// a reviewer may list but not revoke.
func TestMandateCommands(t *testing.T) {
	t.Parallel()
	f := newDemoFixture(t)
	ctx := context.Background()
	terms := models.MandateTerms{Tool: "refund_order", Tiers: []string{"low"},
		Money:     &models.MandateMoney{Field: "amount_minor", Currency: "CNY", PerCallCap: 1000, Budget: 5000},
		ExpiresAt: time.Now().Add(time.Hour), Reason: "sale"}
	p, _, err := f.a.Protocol.RequestMandate(ctx, f.agent, writes.MandateInput{Terms: terms})
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := f.a.Store.TenantByName(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	alice, _, err := f.a.Store.UserCredentials(ctx, tenant.ID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	p, err = f.a.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(alice, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.a.Protocol.Propose(ctx, f.agent, writes.ProposeInput{Tool: "refund_order",
		Arguments: json.RawMessage(`{"order_id":"ord_1001","amount_minor":700,"currency":"CNY","reason":"test"}`)}); err != nil {
		t.Fatal(err)
	}
	pw := f.creds.ReviewerPassword + "\n"
	r := invoke(t, nil, pw, "mandate", "list", "--tenant", "demo", "--user", "alice", "--db", f.db)
	if r.err != nil || !strings.Contains(r.stdout, p.MandateID) || !strings.Contains(r.stdout, "700/5000 CNY") || !strings.Contains(r.stdout, "active") {
		t.Fatalf("list: %v\n%s", r.err, r.stdout)
	}
	r = invoke(t, nil, pw, "mandate", "revoke", p.MandateID, "--tenant", "demo", "--user", "alice", "--db", f.db)
	if !models.IsCode(r.err, models.EForbidden) {
		t.Fatalf("revoke by a reviewer: %v", r.err)
	}
	r = invoke(t, nil, f.creds.AdminPassword+"\n", "mandate", "revoke", p.MandateID, "--tenant", "demo", "--user", "admin", "--db", f.db)
	if r.err != nil || r.stdout != "revoked\n" {
		t.Fatalf("revoke by the admin: %v %q", r.err, r.stdout)
	}
	if m, err := f.a.Protocol.Mandate(ctx, tenant.ID, p.MandateID); err != nil || m.Status != models.MandateRevoked {
		t.Fatalf("after revoke: %+v %v", m, err)
	}
	r = invoke(t, nil, f.creds.AdminPassword+"\n", "mandate", "revoke", "--tenant", "demo", "--user", "admin", "--db", f.db)
	if _, code := reported(r.err); code != exitUsage {
		t.Fatalf("revoke without an id: %v", r.err)
	}
}
