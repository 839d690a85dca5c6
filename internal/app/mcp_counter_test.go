package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

// Over MCP the agent learns that a reviewer edited its request: the
// original reads superseded with the edit's reason and changes and points
// at the new version, which it waits on and executes.
func TestMCPSeesTheEditAndExecutesTheNewVersion(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	p := a.refund("ord_1001", 5000)
	bob := c.user("demo", "bob", models.RoleReviewer, "bob-password-1")
	orig := c.reloadProposal(p.ProposalID)
	args, _ := json.Marshal(map[string]any{"order_id": "ord_1001", "amount_minor": 4000, "currency": "CNY", "reason": "damaged"})
	rev, err := c.app.Protocol.Counter(context.Background(), writes.CounterInput{Reviewer: bob, ProposalID: orig.ID,
		DigestSeen: orig.ArgsDigest, Arguments: args, Reason: "only the broken part"})
	if err != nil {
		t.Fatal(err)
	}
	got := a.get(p.ProposalID, 0)
	if got.Status != models.StatusSuperseded || got.SupersededBy == nil || got.SupersededBy.RevisedID != rev.ID ||
		got.SupersededBy.Reason != "only the broken part" || got.SupersededBy.Editor != "bob" {
		t.Fatalf("original over MCP: %+v", got)
	}
	if len(got.SupersededBy.Changes) != 1 || got.SupersededBy.Changes[0].Pointer != "/amount_minor" ||
		string(got.SupersededBy.Changes[0].After) != "4000" || !strings.Contains(got.Next, rev.ID) {
		t.Fatalf("changes %+v next %q", got.SupersededBy.Changes, got.Next)
	}
	if st := a.get(rev.ID, 0); st.Status != models.StatusAwaitingConfirmation || st.Supersedes == nil {
		t.Fatalf("new version over MCP: %+v", st)
	}
	alice := c.alice()
	alice.get("/proposals/" + rev.ID)
	wantStatus(t, "approve", alice.postForm("/proposals/"+rev.ID+"/approve", url.Values{"digest": {rev.ArgsDigest}, "effect": {rev.EffectDigest}}), http.StatusSeeOther)
	c.executeAndReplay(a, rev.ID)
}
