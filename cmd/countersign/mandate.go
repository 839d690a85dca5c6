package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// mandateList prints the tenant's standing mandates with their usage.
func (c *cli) mandateList(ctx context.Context, args []string) error {
	var cfg reviewConfig
	cmd := newCommand("mandate list", "countersign mandate list --tenant T --user U [flags]", `
Lists the tenant's standing mandates, newest first, with their usage: spent
of the budget (minor units), uses of the count, and when they expire. The
user's password is the first line of stdin.`, c.stdout)
	dbFlag(cmd.fs, &cfg.DB)
	cmd.fs.StringVar(&cfg.Tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&cfg.User, "user", "", "the user's `NAME`")
	if _, err := c.parseMandate(cmd, args, &cfg, false); err != nil {
		return err
	}
	a, u, err := c.signIn(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	ms, err := a.Protocol.Mandates(ctx, u.TenantID)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		fmt.Fprintln(c.stderr, "no mandates")
		return nil
	}
	now := time.Now()
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tSTATE\tSPENT\tUSES\tEXPIRES\tGRANTED BY")
	for _, m := range ms {
		state := string(m.State(now))
		spent := fmt.Sprint(m.Spent)
		if mo := m.Terms.Money; mo != nil && mo.Budget > 0 {
			spent = fmt.Sprintf("%d/%d %s", m.Spent, mo.Budget, mo.Currency)
		}
		uses := fmt.Sprint(m.Uses)
		if m.Terms.MaxUses > 0 {
			uses = fmt.Sprintf("%d/%d", m.Uses, m.Terms.MaxUses)
		}
		var names []string
		for _, n := range m.GrantorNames {
			names = append(names, clean(n))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(m.ID), clean(m.Terms.Tool), state, spent, uses,
			m.Terms.ExpiresAt.UTC().Format(time.RFC3339), strings.Join(names, ","))
	}
	return tw.Flush()
}

// mandateRevoke ends a standing mandate at once.
func (c *cli) mandateRevoke(ctx context.Context, args []string) error {
	var cfg reviewConfig
	cmd := newCommand("mandate revoke", "countersign mandate revoke MANDATE_ID --tenant T --user ADMIN [flags]", `
Revokes a standing mandate: from now on it confirms no write. Tokens it
issued before stay valid until used or expired (revoke them one by one with
countersign revoke). Administrators only; the administrator's password is
the first line of stdin. Prints the mandate's status (revoked) on stdout.`, c.stdout)
	dbFlag(cmd.fs, &cfg.DB)
	cmd.fs.StringVar(&cfg.Tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&cfg.User, "user", "", "the administrator's user `NAME`")
	id, err := c.parseMandate(cmd, args, &cfg, true)
	if err != nil {
		return err
	}
	a, u, err := c.signIn(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	m, err := a.Protocol.RevokeMandate(ctx, u, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "mandate %s revoked by %s\n", clean(m.ID), clean(u.Name))
	fmt.Fprintln(c.stdout, m.Status)
	return nil
}

func (c *cli) parseMandate(cmd *command, args []string, cfg *reviewConfig, wantID bool) (string, error) {
	idName := ""
	if wantID {
		idName = "MANDATE_ID"
	}
	return c.parseSignedIn(cmd, args, cfg, idName)
}
