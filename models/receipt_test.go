package models_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
)

func TestNewSignedReceipt(t *testing.T) {
	at := time.Date(2026, 9, 1, 6, 0, 0, 0, time.UTC)
	args := json.RawMessage(`{"order_id":"ord_1"}`)
	d, _ := models.Digest(args)
	p := &models.Proposal{ID: "prop_1", TenantID: "ten_1", AgentID: "agt_1", Tool: "refund_order", Arguments: args,
		ArgsDigest: d, Tier: models.Tier{Name: "high", Confirmation: models.ConfirmWebAuthn, Quorum: 2}, CreatedAt: at,
		Decisions: []models.Decision{
			{ID: "dec_1", UserID: "usr_1", Kind: models.DecisionApprove, DigestSeen: d, AMR: []string{"pwd", "webauthn"},
				Evidence: json.RawMessage(`{"format":"x"}`), CreatedAt: at},
			{ID: "dec_2", UserID: "usr_2", Kind: models.DecisionApprove, DigestSeen: d, AMR: []string{"webauthn"}, CreatedAt: at},
		}}
	done := at.Add(time.Second)
	e := models.Execution{ID: "exe_1", TokenJTI: "tok_1", RequestKey: "rk", ArgsDigest: d, Status: models.StatusSucceeded,
		Attempts: 1, Result: json.RawMessage(`{"ok": true}`), CreatedAt: at, CompletedAt: &done}

	r, err := models.NewSignedReceipt(p, e, models.ReceiptOptions{Issuer: "countersign"})
	if err != nil {
		t.Fatal(err)
	}
	if r.ApprovedDigest != d || string(r.Arguments) != string(args) || r.IssuedAt != done.Unix() || r.ResultDigest == "" {
		t.Fatalf("receipt %+v", r)
	}
	if r.Approvers[0].Method != models.MethodSecurityKey || r.Approvers[0].EvidenceDigest != models.AuditHash([]byte(`{"format":"x"}`)) ||
		r.Approvers[1].Method != models.MethodPasskeySession || r.Approvers[1].EvidenceDigest != "" {
		t.Fatalf("approvers %+v", r.Approvers)
	}
	if r, _ := models.NewSignedReceipt(p, e, models.ReceiptOptions{DigestOnly: true}); r.Arguments != nil {
		t.Fatal("digest-only receipt carries the arguments")
	}
	// Approvers who saw different digests leave no single approved digest.
	p.Decisions[1].DigestSeen = "sha256:other"
	if r, _ := models.NewSignedReceipt(p, e, models.ReceiptOptions{}); r.ApprovedDigest != "" {
		t.Fatalf("approved digest %q despite differing approvals", r.ApprovedDigest)
	}
}
