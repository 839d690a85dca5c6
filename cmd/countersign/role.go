package main

import (
	"context"
	"fmt"
	"time"

	"github.com/countersign/countersign/models"
)

func (c *cli) userRole(ctx context.Context, args []string) error {
	var db, tenant, name, role string
	cmd := newCommand("user role", "countersign user role --tenant T --name N --role reviewer|admin [flags]", `
Gives a console user of a tenant the role and prints it. Reviewers approve
and decline proposals; administrators also manage agents and reviewers and
may revoke confirmations. The user's open sessions stay signed in and have
the new role at their next page. The change is written to the tenant's
audit log, by the system.

A tenant keeps at least one active administrator: taking the role of its
last one is refused (forbidden). Make another user an administrator first;
that is also how to recover a tenant that has none.

  countersign user role --tenant acme --name alice --role admin`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the user's sign-in `NAME`")
	cmd.fs.StringVar(&role, "role", "", "`ROLE`: reviewer or admin")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name", "role"); err != nil {
		return err
	}
	if !models.Role(role).Valid() {
		return usagef(cmd.synopsis, "--role must be reviewer or admin, not %q", role)
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	u, err := st.SetUserRole(ctx, t.ID, name, models.Role(role), time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s is %s\n", u.Name, article(u.Role))
	return nil
}

// article names a role with its article: "an administrator", "a reviewer".
func article(r models.Role) string {
	if r == models.RoleAdmin {
		return "an administrator"
	}
	return "a reviewer"
}
