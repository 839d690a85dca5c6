package writes_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/writes"
)

// groupEnv is the demo with the high refund tier (webauthn, above 20000)
// requiring one approver of finance AND one of security, allowing
// self-approval (so that the rule across factors is what refuses it), and
// reviewers: carol and frank in finance, dave in security, erin in both.
// Each of adapt runs before the service is built (to change its adapters).
func groupEnv(t *testing.T, kind string, adapt ...func(e *env)) (*env, map[string]models.User) {
	t.Helper()
	users := map[string]models.User{}
	e := newEnv(t, kind, func(e *env) *registry.Registry {
		for _, f := range adapt {
			f(e)
		}
		src, err := os.ReadFile("../registry/demo.yaml")
		if err != nil {
			t.Fatal(err)
		}
		old := "      - tier: high\n        when: amount_minor > 20000\n        confirmation: webauthn\n"
		if !strings.Contains(string(src), old) {
			t.Fatal("demo registry changed; update the test")
		}
		doc := strings.Replace(string(src), old, old+
			"        allow_self_approval: true\n        require: [{group: finance, count: 1}, {group: security, count: 1}]\n", 1)
		reg, err := registry.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return reg
	})
	cli := store.GroupActor{TenantID: e.tenant}
	for _, g := range []string{"finance", "security"} {
		if _, err := e.store.CreateGroup(e.ctx, cli, g, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	for name, groups := range map[string][]string{"carol": {"finance"}, "frank": {"finance"}, "dave": {"security"},
		"erin": {"finance", "security"}, "gus": nil} {
		users[name] = e.user(name, models.RoleReviewer)
		for _, g := range groups {
			if _, err := e.store.SetGroupMember(e.ctx, cli, g, name, true, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return e, users
}

func TestGroupFactorsDecide(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			e, u := groupEnv(t, kind)
			status := func(p *models.Proposal) models.Status {
				t.Helper()
				got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				return got.Status
			}
			// One person in both groups does not complete both factors.
			p := e.propose("ord_2001", 30000)
			if len(p.Tier.Require) != 2 {
				t.Fatalf("tier %+v", p.Tier)
			}
			for _, name := range []string{"erin", "gus"} {
				if _, err := e.stepUpConfirm(u[name], p); err != nil {
					t.Fatal(err)
				}
			}
			if st := status(p); st != models.StatusAwaitingConfirmation {
				t.Fatalf("after erin and a non-member: %s", st)
			}
			got, _ := e.svc.Get(e.ctx, e.tenant, p.ID)
			progress := got.Progress
			if fmt.Sprint(progress[0].Approvers, progress[1].Approvers) != fmt.Sprint([]string{u["erin"].ID}, []string(nil)) {
				t.Fatalf("progress %+v", progress)
			}
			// A list counts the same: two approvals, one more needed from
			// security.
			page, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{
				Statuses: []models.Status{models.StatusAwaitingConfirmation}, WithDecisions: true})
			if err != nil || len(page.Items) != 1 {
				t.Fatalf("list: %v %d", err, len(page.Items))
			}
			if have, need := page.Items[0].ApprovalCount(); have != 2 || need != 3 {
				t.Fatalf("listed as %d of %d approvals, want 2 of 3", have, need)
			}
			if fmt.Sprint(page.Items[0].Progress) != fmt.Sprint(progress) {
				t.Fatalf("listed progress %+v, want %+v", page.Items[0].Progress, progress)
			}
			out, err := e.stepUpConfirm(u["carol"], p)
			if err != nil {
				t.Fatal(err)
			}
			if out.Status != models.StatusConfirmed || out.Token == nil {
				t.Fatalf("after carol: %s", out.Status)
			}
			progress = out.Progress
			if !progress[0].Met() || !progress[1].Met() {
				t.Fatalf("progress after confirmation %+v", progress)
			}

			// Two of finance are not one of security.
			p = e.propose("ord_2002", 30000)
			for _, name := range []string{"carol", "frank"} {
				if _, err := e.stepUpConfirm(u[name], p); err != nil {
					t.Fatal(err)
				}
			}
			if st := status(p); st != models.StatusAwaitingConfirmation {
				t.Fatalf("after two of finance: %s", st)
			}
			if out, err := e.stepUpConfirm(u["dave"], p); err != nil || out.Status != models.StatusConfirmed {
				t.Fatalf("dave: %v", err)
			}

			// Leaving a group stops counting toward its factor for later
			// decisions.
			p = e.propose("ord_2003", 30000)
			if _, err := e.stepUpConfirm(u["dave"], p); err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.SetGroupMember(e.ctx, store.GroupActor{TenantID: e.tenant}, "security", "dave", false, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := e.stepUpConfirm(u["carol"], p); err != nil {
				t.Fatal(err)
			}
			if st := status(p); st != models.StatusAwaitingConfirmation {
				t.Fatalf("dave's approval counted for security after he left it: %s", st)
			}
		})
	}
}

// Self-approval and separation of duties hold across factors: the
// requester in a group is refused even though the tier allows
// self-approval (two factors need two people besides them), and a
// reviewer enrolled by the administrator who created the agent is refused
// whatever groups they are in.
func TestGroupFactorsKeepDuties(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			e, u := groupEnv(t, kind)
			agent, err := e.store.CreateAgent(e.ctx, e.tenant, "carol-bot", u["carol"].ID, secret.HashAPIKey("csk_carol_bot_key"))
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := e.svc.Propose(e.ctx, agent, protoInput("ord_2004", 30000))
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.stepUpConfirm(u["carol"], p)
			wantCode(t, err, models.ESelfApproval)

			hank, err := e.store.AdminCreateUser(e.ctx, e.admin, "hank", models.RoleReviewer, "x")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.store.SetGroupMember(e.ctx, store.GroupActor{TenantID: e.tenant, Admin: &e.admin}, "security", "hank", true, e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			adminBot, err := e.store.AdminCreateAgent(e.ctx, e.admin, "admin-bot", "", secret.HashAPIKey("csk_admin_bot_key"))
			if err != nil {
				t.Fatal(err)
			}
			q, _, err := e.svc.Propose(e.ctx, adminBot, protoInput("ord_2005", 30000))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.stepUpConfirm(u["carol"], q); err != nil {
				t.Fatal(err)
			}
			_, err = e.stepUpConfirm(hank, q)
			wantCode(t, err, models.EDutyConflict)
			got, _ := e.svc.Get(e.ctx, e.tenant, q.ID)
			if got.Status != models.StatusAwaitingConfirmation {
				t.Fatalf("status %s", got.Status)
			}
		})
	}
}

// Two approvals racing to complete different factors, on two server
// instances: both are recorded, the proposal is confirmed once, with one
// token naming both approvers.
func TestGroupFactorsRace(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			e, u := groupEnv(t, kind)
			// Each approval runs on its own server instance.
			svcs := []*writes.Service{e.svc, secondInstance(t, e)}
			for i := range 5 {
				p := e.propose(fmt.Sprintf("ord_20%02d", i+1), 30000)
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for j, name := range []string{"carol", "dave"} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errs[j] = svcs[j].Confirm(e.ctx, writes.ConfirmInput{Reviewer: u[name], ProposalID: p.ID,
							DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: steppedUp(u[name], p.ID, p.ArgsDigest, []string{"pwd", "webauthn"}, json.RawMessage(`{"k":1}`))})
					}()
				}
				wg.Wait()
				if errs[0] != nil || errs[1] != nil {
					t.Fatalf("round %d: %v", i, errs)
				}
				got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != models.StatusConfirmed || got.Token == nil || len(got.Approvals()) != 2 {
					t.Fatalf("round %d: %s token %v approvals %d", i, got.Status, got.Token, len(got.Approvals()))
				}
				c, err := e.tokens.Verify(e.ctx, got.Token.Compact)
				if err != nil {
					t.Fatal(err)
				}
				if len(c.Approvers) != 2 {
					t.Fatalf("round %d: token approvers %v", i, c.Approvers)
				}
			}
		})
	}
}

func protoInput(order string, amount int64) writes.ProposeInput {
	return writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs(order, amount)}
}
