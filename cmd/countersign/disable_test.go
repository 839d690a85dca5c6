package main

import (
	"context"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
)

// countersign user disable stops a user's sign-ins and ends their live
// sessions at once, is logged as the system's, keeps the tenant's last
// active administrator, finds no user of another tenant, and --enable
// lets the user sign in again.
func TestUserDisable(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	mustExec(t, nil, "", "tenant", "create", "acme", "--db", db)
	mustExec(t, nil, "", "tenant", "create", "globex", "--db", db)
	for _, u := range [][]string{{"acme", "root", "admin"}, {"acme", "alice", "reviewer"}, {"globex", "gina", "reviewer"}} {
		mustExec(t, nil, "correct horse battery\n", "user", "create", "--tenant", u[0], "--name", u[1], "--role", u[2], "--db", db)
	}
	disable := func(tenant, name string, extra ...string) result {
		t.Helper()
		return invoke(t, nil, "", append([]string{"user", "disable", "--tenant", tenant, "--name", name, "--db", db}, extra...)...)
	}
	ctx := context.Background()
	open := func() *app.App {
		t.Helper()
		a, err := app.Open(ctx, app.Config{DB: db, PasswordHash: cheapPasswordHash})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	// Alice signs in; disabling her ends that session and refuses the next
	// sign-in.
	a := open()
	sess, err := a.Auth.Login(ctx, "acme", "alice", "correct horse battery", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if r := disable("acme", "alice"); r.err != nil || r.stdout != "alice is disabled\n" {
		t.Fatalf("disable alice: %q, %v", r.stdout, r.err)
	}
	if _, err := a.Auth.Session(ctx, sess.ID, true); err == nil {
		t.Error("alice's session outlived her disabling")
	}
	if _, err := a.Auth.Login(ctx, "acme", "alice", "correct horse battery", "127.0.0.1"); err == nil {
		t.Error("a disabled user signed in")
	}
	a.Close()

	// Again: nothing changes, nothing is logged.
	if r := disable("acme", "alice"); r.err != nil || r.stdout != "alice is disabled\n" {
		t.Errorf("disable alice again: %q, %v", r.stdout, r.err)
	}
	// The last active administrator stays.
	r := disable("acme", "root")
	if out, code := reported(r.err); !models.IsCode(r.err, models.EForbidden) || code != exitError ||
		!strings.Contains(out, "root is the organization's last active administrator") {
		t.Errorf("disabling the last admin: %q (exit %d)", out, code)
	}
	if r := disable("acme", "gina"); !models.IsCode(r.err, models.ENotFound) {
		t.Errorf("another tenant's user: %v", r.err)
	}
	if r := disable("acme", "alice", "--enable"); r.err != nil || r.stdout != "alice is enabled\n" {
		t.Fatalf("enable alice: %q, %v", r.stdout, r.err)
	}

	a = open()
	defer a.Close()
	if _, err := a.Auth.Login(ctx, "acme", "alice", "correct horse battery", "127.0.0.1"); err != nil {
		t.Errorf("alice, enabled again, cannot sign in: %v", err)
	}
	if _, err := a.Auth.Login(ctx, "acme", "root", "correct horse battery", "127.0.0.1"); err != nil {
		t.Errorf("root, whose disabling was refused, cannot sign in: %v", err)
	}
	tn, _ := a.Store.TenantByName(ctx, "acme")
	entries, err := a.Store.AuditEntries(ctx, tn.ID, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, e := range entries {
		if e.Kind == models.AuditUserChanged {
			b, _ := e.Decode()
			changes = append(changes, b.Actor+":"+string(b.Data))
		}
	}
	if len(changes) != 2 || !strings.HasPrefix(changes[0], "system:") || !strings.Contains(changes[0], `"disabled":true`) ||
		!strings.Contains(changes[1], `"disabled":false`) {
		t.Errorf("logged changes %q, want the system disabling alice once, then enabling her", changes)
	}
}
