package main

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
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
}
