package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/countersign/countersign/models"
)

// Default per-agent limits of countersign serve.
const (
	defaultProposalsPerMinute = 60
	defaultOpenProposals      = 100
	defaultConcurrentWaits    = 20
)

// limitsFlags registers the server's default per-agent limits.
func limitsFlags(fs *flag.FlagSet, l *models.Limits) {
	fs.IntVar(&l.ProposalsPerMinute, "agent-proposals-per-minute", defaultProposalsPerMinute,
		"proposals one agent may create per minute, by default (0: no limit;\n`N` per tenant or agent with 'countersign tenant|agent limits')")
	fs.IntVar(&l.OpenProposals, "agent-open-proposals", defaultOpenProposals,
		"proposals of one agent that may await confirmation at once, by default (0: no limit)")
	fs.IntVar(&l.ConcurrentWaits, "agent-concurrent-waits", defaultConcurrentWaits,
		"long-polls (?wait=) one agent may hold at once across all instances, by default (0: no limit)")
}

func checkLimits(l models.Limits) error {
	if l.ProposalsPerMinute < 0 || l.OpenProposals < 0 || l.ConcurrentWaits < 0 {
		return fmt.Errorf("--agent-* limits are 0 (no limit) or more")
	}
	return nil
}

// overrideFlag is one field of a limit override on the command line: a
// number, or "inherit".
type overrideFlag struct {
	set   bool
	value *int
}

func (f *overrideFlag) String() string {
	if f == nil || !f.set {
		return ""
	}
	if f.value == nil {
		return "inherit"
	}
	return strconv.Itoa(*f.value)
}

func (f *overrideFlag) Set(s string) error {
	f.set = true
	if s == "inherit" {
		f.value = nil
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number of 0 (no limit) or more, or \"inherit\"")
	}
	f.value = &n
	return nil
}

type overrideFlags struct{ perMinute, open, waits overrideFlag }

func (o *overrideFlags) register(fs *flag.FlagSet) {
	fs.Var(&o.perMinute, "proposals-per-minute", "proposals per minute: `N` (0: no limit) or inherit")
	fs.Var(&o.open, "open-proposals", "proposals awaiting confirmation at once: `N` (0: no limit) or inherit")
	fs.Var(&o.waits, "concurrent-waits", "long-polls held at once, across instances: `N` (0: no limit) or inherit")
}

func (o *overrideFlags) any() bool { return o.perMinute.set || o.open.set || o.waits.set }

// merge changes the fields given on the command line and keeps the others.
func (o *overrideFlags) merge(cur models.LimitOverride) models.LimitOverride {
	for _, f := range []struct {
		flag *overrideFlag
		dst  **int
	}{{&o.perMinute, &cur.ProposalsPerMinute}, {&o.open, &cur.OpenProposals}, {&o.waits, &cur.ConcurrentWaits}} {
		if f.flag.set {
			*f.dst = f.flag.value
		}
	}
	return cur
}

func printOverride(w io.Writer, who string, o models.LimitOverride) {
	show := func(v *int) string {
		switch {
		case v == nil:
			return "inherit"
		case *v == 0:
			return "no limit"
		}
		return strconv.Itoa(*v)
	}
	fmt.Fprintf(w, "%s\n  proposals per minute:  %s\n  open proposals:        %s\n  concurrent waits:      %s\n",
		who, show(o.ProposalsPerMinute), show(o.OpenProposals), show(o.ConcurrentWaits))
}

const limitsAbout = `
Without a limit flag, prints the limits set for %[1]s; with them, changes
those and keeps the others. A limit is a number (0: no limit) or "inherit":
an agent inherits its tenant's limits, a tenant the server's defaults
(countersign serve --agent-proposals-per-minute, --agent-open-proposals,
--agent-concurrent-waits). Running servers apply a change to the next
request. Agents over a limit get 429 rate_limited with Retry-After.`

func (c *cli) tenantLimits(ctx context.Context, args []string) error {
	return c.limits(ctx, args, false)
}

func (c *cli) agentLimits(ctx context.Context, args []string) error {
	return c.limits(ctx, args, true)
}

func (c *cli) limits(ctx context.Context, args []string, agent bool) error {
	var db, tenant, name string
	var o overrideFlags
	name0, synopsis, about := "tenant limits", "countersign tenant limits --tenant T [--proposals-per-minute N] [--open-proposals N] [--concurrent-waits N]",
		fmt.Sprintf(limitsAbout, "the tenant's agents")
	if agent {
		name0, synopsis, about = "agent limits", "countersign agent limits --tenant T --agent A [--proposals-per-minute N] [--open-proposals N] [--concurrent-waits N]",
			fmt.Sprintf(limitsAbout, "one agent")
	}
	cmd := newCommand(name0, synopsis, about, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	if agent {
		cmd.fs.StringVar(&name, "agent", "", "the agent's `NAME`")
	}
	o.register(cmd.fs)
	pos, err := cmd.parse(args, c.getenv)
	if err != nil {
		return err
	}
	if err := cmd.wantArgs(pos); err != nil {
		return err
	}
	required := map[string]string{"db": db, "tenant": tenant}
	if agent {
		required["agent"] = name
	}
	if err := cmd.required(required); err != nil {
		return err
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	agentID, who := "", "tenant "+t.Name
	if agent {
		a, err := st.AgentByName(ctx, t.ID, name)
		if err != nil {
			return err
		}
		agentID, who = a.ID, "agent "+a.Name+" of tenant "+t.Name
	}
	tenantO, agentO, err := st.LimitOverrides(ctx, t.ID, agentID)
	if err != nil {
		return err
	}
	cur := tenantO
	if agent {
		cur = agentO
	}
	if o.any() {
		cur = o.merge(cur)
		if err := st.SetLimitOverride(ctx, t.ID, agentID, cur, time.Now()); err != nil {
			return err
		}
	}
	printOverride(c.stdout, who, cur)
	return nil
}
