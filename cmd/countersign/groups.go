package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// groupCreate, groupMember and groupList manage a tenant's reviewer groups,
// which risk tiers name in their require lists.
func (c *cli) groupCreate(ctx context.Context, args []string) error {
	var db, tenant, name string
	cmd := newCommand("group create", "countersign group create --tenant T --name GROUP [flags]", `
Creates a reviewer group of a tenant. A risk tier of the registry may require
approvers from groups ("require: [{group: finance, count: 1}, ...]"); add
members with "countersign group add".

  countersign group create --tenant acme --name finance`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the group's `NAME` (a–z 0–9 _ -, starting with a letter)")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name"); err != nil {
		return err
	}
	return c.withTenant(ctx, db, tenant, func(st *store.Store, a store.GroupActor) error {
		g, err := st.CreateGroup(ctx, a, name, time.Now())
		if err == nil {
			fmt.Fprintln(c.stdout, g.ID)
		}
		return err
	})
}

func (c *cli) groupAdd(ctx context.Context, args []string) error {
	return c.groupMember(ctx, args, true)
}

func (c *cli) groupRemove(ctx context.Context, args []string) error {
	return c.groupMember(ctx, args, false)
}

func (c *cli) groupMember(ctx context.Context, args []string, member bool) error {
	verb, what := "add", "Adds a console user to"
	if !member {
		verb, what = "remove", "Removes a console user from"
	}
	var db, tenant, group, user string
	cmd := newCommand("group "+verb, "countersign group "+verb+" --tenant T --group GROUP --user USER [flags]", `
`+what+` a reviewer group. An approval counts toward a group's
factor while the group holds its reviewer: the waiting proposals the user
approved that need the group show the change at once, and those whose
approvals it completes are listed, one a line, and confirmed by a running
server once it has checked their business state.

  countersign group `+verb+` --tenant acme --group finance --user alice`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&group, "group", "", "the group's `NAME`")
	cmd.fs.StringVar(&user, "user", "", "the user's sign-in `NAME`")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "group", "user"); err != nil {
		return err
	}
	return c.withTenant(ctx, db, tenant, func(st *store.Store, a store.GroupActor) error {
		ch, err := st.SetGroupMember(ctx, a, group, user, member, time.Now())
		for _, r := range ch.Queued {
			fmt.Fprintf(c.stdout, "%s\tqueued: its approvals now meet its tier; a running server confirms it once the business system still shows its target as previewed\n", r.ProposalID)
		}
		return err
	})
}

func (c *cli) groupList(ctx context.Context, args []string) error {
	var db, tenant, name string
	cmd := newCommand("group list", "countersign group list --tenant T [--name GROUP] [flags]", `
Lists a tenant's reviewer groups, one a line: the name, then its members.
With --name, only that group (not_found when the tenant has none of that
name), so that a script can ask who is in one group.

  countersign group list --tenant acme
  countersign group list --tenant acme --name finance`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "list only the group of this `NAME`")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant"); err != nil {
		return err
	}
	return c.withTenant(ctx, db, tenant, func(st *store.Store, a store.GroupActor) error {
		groups, err := st.ListGroups(ctx, a.TenantID)
		if err != nil {
			return err
		}
		if name != "" {
			i := slices.IndexFunc(groups, func(g models.ReviewerGroup) bool { return g.Name == name })
			if i < 0 {
				return models.Errorf(models.ENotFound, "tenant %s has no group %q", tenant, name)
			}
			groups = groups[i : i+1]
		}
		for _, g := range groups {
			names := make([]string, 0, len(g.Members))
			for _, m := range g.Members {
				names = append(names, clean(m.UserName))
			}
			fmt.Fprintf(c.stdout, "%s\t%s\n", g.Name, strings.Join(names, " "))
		}
		return nil
	})
}

// withTenant opens the store and runs fn for the named tenant, acting as
// the command line.
func (c *cli) withTenant(ctx context.Context, db, tenant string, fn func(st *store.Store, a store.GroupActor) error) error {
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	return fn(st, store.GroupActor{TenantID: t.ID})
}
