package main

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
)

func TestGroupCommands(t *testing.T) {
	db := tempDB(t)
	mustExec(t, nil, "", "tenant", "create", "acme", "--db", db)
	for _, u := range []string{"alice", "bob"} {
		mustExec(t, nil, "correct horse battery\n", "user", "create", "--tenant", "acme", "--name", u, "--db", db)
	}
	id := strings.TrimSpace(mustExec(t, nil, "", "group", "create", "--tenant", "acme", "--name", "finance", "--db", db).stdout)
	if !strings.HasPrefix(id, "grp_") {
		t.Fatalf("group id %q", id)
	}
	mustExec(t, nil, "", "group", "create", "--tenant", "acme", "--name", "security", "--db", db)
	if r := invoke(t, nil, "", "group", "create", "--tenant", "acme", "--name", "finance", "--db", db); !models.IsCode(r.err, models.EAlreadyExists) {
		t.Fatalf("second create: %v", r.err)
	}
	mustExec(t, nil, "", "group", "add", "--tenant", "acme", "--group", "finance", "--user", "bob", "--db", db)
	mustExec(t, nil, "", "group", "add", "--tenant", "acme", "--group", "finance", "--user", "alice", "--db", db)
	mustExec(t, nil, "", "group", "add", "--tenant", "acme", "--group", "security", "--user", "alice", "--db", db)
	mustExec(t, nil, "", "group", "remove", "--tenant", "acme", "--group", "security", "--user", "alice", "--db", db)
	if r := invoke(t, nil, "", "group", "add", "--tenant", "acme", "--group", "finance", "--user", "nobody", "--db", db); !models.IsCode(r.err, models.ENotFound) {
		t.Fatalf("unknown user: %v", r.err)
	}
	got := mustExec(t, nil, "", "group", "list", "--tenant", "acme", "--db", db).stdout
	if want := "finance\talice bob\nsecurity\t\n"; got != want {
		t.Fatalf("list:\n%q\nwant\n%q", got, want)
	}
	// "group list --tenant T [--name GROUP]": with --name, that group alone.
	got = mustExec(t, nil, "", "group", "list", "--tenant", "acme", "--name", "finance", "--db", db).stdout
	if want := "finance\talice bob\n"; got != want {
		t.Fatalf("list --name finance:\n%q\nwant\n%q", got, want)
	}
	if r := invoke(t, nil, "", "group", "list", "--tenant", "acme", "--name", "legal", "--db", db); !models.IsCode(r.err, models.ENotFound) || r.stdout != "" {
		t.Fatalf("list --name of no group: %v, stdout %q", r.err, r.stdout)
	}
}

// review show counts what a proposal still needs, not the tier's quorum
// alone: an approval from outside a required group leaves it short.
func TestReviewShowsWhatAGroupStillNeeds(t *testing.T) {
	tier := models.Tier{Name: "high", Confirmation: models.ConfirmClick, Quorum: 1,
		Require: []models.Factor{{Group: "finance", Count: 1}}}
	p := &models.Proposal{ID: "prop_1", Tool: "refund_order", Status: models.StatusAwaitingConfirmation, Tier: tier,
		Decisions: []models.Decision{{UserID: "usr_x", UserName: "xi", Kind: models.DecisionApprove}},
		Progress:  []models.FactorProgress{{Factor: tier.Require[0]}}}
	var out strings.Builder
	(&cli{}).printProposal(&out, &app.App{Registry: registry.Demo()}, p)
	for _, want := range []string{"(1 of 2 approvals so far)", "still needs:   1 from group finance"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("review show lacks %q:\n%s", want, out.String())
		}
	}
}
