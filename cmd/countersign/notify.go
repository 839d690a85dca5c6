package main

import (
	"context"
	"flag"
	"fmt"
	"time"
)

func (c *cli) userNotify(ctx context.Context, args []string) error {
	var db, tenant, name, email string
	cmd := newCommand("user notify", "countersign user notify --tenant T --name N [--email ADDRESS] [flags]", `
Sets the e-mail address a console user is notified at when a proposal awaits
a reviewer (the server sends e-mail when started with --smtp-addr). Without
--email it prints the address and changes nothing; --email "" removes it.

  countersign user notify --tenant acme --name alice --email alice@example.com`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the user's sign-in `NAME`")
	cmd.fs.StringVar(&email, "email", "", "e-mail `ADDRESS` (name@example.com); empty removes it")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name"); err != nil {
		return err
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	u, _, err := st.UserCredentials(ctx, t.ID, name)
	if err != nil {
		return err
	}
	given := false
	cmd.fs.Visit(func(f *flag.Flag) { given = given || f.Name == "email" })
	if !given {
		// Asked, not told: say what is set.
		if email, err = st.NotificationEmail(ctx, t.ID, u.ID); err != nil {
			return err
		}
	} else if err := st.SetNotificationEmail(ctx, t.ID, u.ID, email, time.Now()); err != nil {
		return err
	}
	if email == "" {
		fmt.Fprintf(c.stdout, "%s gets no e-mail notifications\n", name)
	} else {
		fmt.Fprintf(c.stdout, "%s is notified at %s\n", name, email)
	}
	return nil
}
