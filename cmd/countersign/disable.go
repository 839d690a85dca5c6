package main

import (
	"context"
	"fmt"
	"time"
)

// userDisable is "countersign user disable --tenant T --name N [--enable]".
func (c *cli) userDisable(ctx context.Context, args []string) error {
	var db, tenant, name string
	var enable bool
	cmd := newCommand("user disable", "countersign user disable --tenant T --name N [--enable] [flags]", `
Disables a console user of a tenant, or with --enable enables them again,
and prints what the user is now. A disabled user cannot sign in, and every
session of theirs ends at once; their approvals of proposals still awaiting
confirmation are voided, so they stop counting toward a quorum.
Confirmations already issued stay: revoke them with countersign revoke.
The change is written to the tenant's audit log, by the system.

A tenant keeps at least one active administrator: disabling its last one is
refused (forbidden). Make another user an administrator first
(countersign user role).

  countersign user disable --tenant acme --name alice
  countersign user disable --tenant acme --name alice --enable`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the user's sign-in `NAME`")
	cmd.fs.BoolVar(&enable, "enable", false, "enable the user again instead")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name"); err != nil {
		return err
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	u, err := st.SetUserDisabled(ctx, t.ID, name, !enable, time.Now())
	if err != nil {
		return err
	}
	state := "enabled"
	if u.Disabled {
		state = "disabled"
	}
	fmt.Fprintf(c.stdout, "%s is %s\n", u.Name, state)
	return nil
}
