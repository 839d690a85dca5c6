package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
)

// countersign user role changes a role and logs it as the system's; it
// refuses to take the role of the tenant's last active administrator
// (forbidden, exit 1, nothing changed), finds no user of another tenant,
// and refuses a role it does not know as a usage error.
func TestUserRole(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustExec(t, nil, "", "tenant", "create", "acme", "--db", db)
	mustExec(t, nil, "", "tenant", "create", "globex", "--db", db)
	for _, u := range [][]string{{"acme", "root", "admin"}, {"acme", "alice", "reviewer"}, {"globex", "gina", "admin"}} {
		mustExec(t, nil, "correct horse battery\n", "user", "create", "--tenant", u[0], "--name", u[1], "--role", u[2], "--db", db)
	}
	role := func(tenant, name, role string) result {
		t.Helper()
		return invoke(t, nil, "", "user", "role", "--tenant", tenant, "--name", name, "--role", role, "--db", db)
	}
	roleOf := func(tenant, name string) models.Role {
		t.Helper()
		ctx := context.Background()
		a, err := app.Open(ctx, app.Config{DB: db, PasswordHash: cheapPasswordHash})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		tn, err := a.Store.TenantByName(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		u, _, err := a.Store.UserCredentials(ctx, tn.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		return u.Role
	}

	// The last active administrator stays one.
	r := role("acme", "root", "reviewer")
	out, code := reported(r.err)
	if !models.IsCode(r.err, models.EForbidden) || code != exitError || !strings.HasPrefix(out, "error: forbidden: root is the organization's last active administrator") {
		t.Errorf("demoting the last admin: %q (exit %d)", out, code)
	}
	if roleOf("acme", "root") != models.RoleAdmin {
		t.Fatal("a refused demotion changed root")
	}

	if r := role("acme", "alice", "admin"); r.err != nil || r.stdout != "alice is an administrator\n" {
		t.Fatalf("promote alice: %q, %v", r.stdout, r.err)
	}
	if r := role("acme", "alice", "admin"); r.err != nil || r.stdout != "alice is an administrator\n" {
		t.Errorf("promote alice again: %q, %v", r.stdout, r.err)
	}
	if r := role("acme", "root", "reviewer"); r.err != nil || r.stdout != "root is a reviewer\n" {
		t.Fatalf("demote root beside alice: %q, %v", r.stdout, r.err)
	}
	if r := role("acme", "alice", "reviewer"); !models.IsCode(r.err, models.EForbidden) {
		t.Errorf("demoting alice, now the last: %v", r.err)
	}

	// Another tenant's user, or nobody, is not found; globex's last admin
	// is unaffected by acme's.
	if r := role("acme", "gina", "reviewer"); !models.IsCode(r.err, models.ENotFound) {
		t.Errorf("another tenant's user: %v", r.err)
	}
	if r := role("acme", "nobody", "admin"); !models.IsCode(r.err, models.ENotFound) {
		t.Errorf("an unknown user: %v", r.err)
	}
	if r := role("nowhere", "alice", "admin"); !models.IsCode(r.err, models.ENotFound) {
		t.Errorf("an unknown tenant: %v", r.err)
	}
	if roleOf("globex", "gina") != models.RoleAdmin || roleOf("acme", "alice") != models.RoleAdmin {
		t.Error("a refused change changed a role")
	}

	// Bad usage: an unknown or a missing role.
	for _, args := range [][]string{
		{"user", "role", "--tenant", "acme", "--name", "alice", "--role", "owner", "--db", db},
		{"user", "role", "--tenant", "acme", "--name", "alice", "--db", db},
		{"user", "role", "--tenant", "acme", "--role", "admin", "--db", db},
	} {
		if _, code := reported(invoke(t, nil, "", args...).err); code != exitUsage {
			t.Errorf("%q: exit %d, want a usage error", args, code)
		}
	}

	// The log names the system and the role replaced.
	ctx := context.Background()
	a, err := app.Open(ctx, app.Config{DB: db, PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tn, _ := a.Store.TenantByName(ctx, "acme")
	entries, err := a.Store.AuditEntries(ctx, tn.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, e := range entries {
		if e.Kind != models.AuditUserChanged {
			continue
		}
		b, _ := e.Decode()
		var d map[string]any
		json.Unmarshal(b.Data, &d)
		changes = append(changes, b.Actor+":"+d["previous_role"].(string)+">"+d["role"].(string))
	}
	if got := strings.Join(changes, " "); got != "system:reviewer>admin system:admin>reviewer" {
		t.Errorf("logged changes %q", got)
	}
}

func TestUserRoleHelp(t *testing.T) {
	t.Parallel()
	r := mustExec(t, nil, "", "user", "role", "-h")
	for _, want := range []string{"--role", "last one is refused", "Make another user an administrator first"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("user role -h does not say %q:\n%s", want, r.stdout)
		}
	}
	if r := mustExec(t, nil, "", "help"); !strings.Contains(r.stdout, "countersign user role") {
		t.Errorf("help does not list user role:\n%s", r.stdout)
	}
}
