package app_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// TestConsoleRevokesAFailedRetryableWrite: the business system refused a
// write for now; the administrator is offered the revoke button and pressing
// it ends the execution, so the agent's retry is refused.
func TestConsoleRevokesAFailedRetryableWrite(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	ctx := context.Background()
	p := c.propose("ord_1001", 100)
	alice, _, err := c.app.Store.UserCredentials(ctx, p.TenantID, "alice")
	if err != nil {
		t.Fatal(err)
	}
	p, err = c.app.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(alice, nil)})
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt: consumed, sent, refused for now.
	now := c.clock.Now()
	exec, ok, err := c.app.Store.ConsumeToken(ctx, store.Consume{TenantID: p.TenantID, AgentID: p.AgentID, ProposalID: p.ID,
		JTI: p.Token.JTI, Now: now, Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey,
			DownstreamKey: "cs1_test", Operation: p.Tool, ArgsDigest: p.ArgsDigest, LeaseUntil: now}})
	if err != nil || !ok {
		t.Fatalf("consume: %v %v", ok, err)
	}
	if _, ok, err := c.app.Store.FinishExecution(ctx, p.TenantID, exec.ID, exec.Attempts,
		store.Outcome{Status: models.StatusFailedRetryable}, now); err != nil || !ok {
		t.Fatalf("finish: %v %v", ok, err)
	}

	admin := c.browser()
	admin.mustLogin("demo", "admin", c.creds.AdminPassword)
	page := admin.get("/proposals/" + p.ID)
	wantStatus(t, "proposal page", page, http.StatusOK)
	if testid(page.doc, "revoke") == "" {
		t.Fatal("no revoke button for a failed_retryable write")
	}
	wantStatus(t, "revoke", admin.postForm("/proposals/"+p.ID+"/revoke", nil), http.StatusSeeOther)
	if got := c.status(p.ID); got != models.StatusRevoked {
		t.Fatalf("after revoke: %s", got)
	}
	agent, err := c.app.Protocol.AuthenticateAgent(ctx, c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.app.Protocol.Execute(ctx, agent, p.ID, p.Token.Compact)
	if got := models.ErrorCode(err); got != models.ERevoked {
		t.Fatalf("retry after revoke: %q (%v), want revoked", got, err)
	}
}
