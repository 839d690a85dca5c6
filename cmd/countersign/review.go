package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/visible"
	"github.com/countersign/countersign/models/writes"
)

// reviewConfig is the configuration of the review and revoke commands.
type reviewConfig struct {
	DB       string
	Tools    string
	Tenant   string
	User     string
	Issuer   string
	Audience string
	Reason   string
	Comment  string
}

// errWrongCredentials is the one answer to an unknown user and a wrong
// password alike, so that the answer does not tell which names exist.
var errWrongCredentials = models.Errorf(models.EUnauthenticated, "wrong user or password")

const reviewAbout = `
The terminal stand-in for the browser console, which is not built yet. The
reviewer's password is the first line of stdin (on a terminal it is prompted
for, without echo).

Give the same --db and --tools as the server (and, to approve, the same
--issuer and --audience), or set COUNTERSIGN_DB, COUNTERSIGN_TOOLS,
COUNTERSIGN_ISSUER and COUNTERSIGN_AUDIENCE once for both.`

// newReviewCommand defines the flags every review command shares.
func (c *cli) newReviewCommand(name, synopsis, about string, cfg *reviewConfig, out io.Writer) *command {
	cmd := newCommand(name, synopsis, strings.TrimSpace(about)+"\n"+reviewAbout, out)
	dbFlag(cmd.fs, &cfg.DB)
	toolsFlag(cmd.fs, &cfg.Tools)
	cmd.fs.StringVar(&cfg.Tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&cfg.User, "user", "", "the reviewer's user `NAME`")
	return cmd
}

// parseReview parses a review command's arguments: the proposal id when
// wantID, and the shared flags.
func (c *cli) parseReview(cmd *command, args []string, cfg *reviewConfig, wantID bool) (string, error) {
	idName := ""
	if wantID {
		idName = "PROPOSAL_ID"
	}
	return c.parseSignedIn(cmd, args, cfg, idName)
}

// parseSignedIn parses the arguments of a command run by a signed-in user
// (review, revoke, mandate): the one positional id named idName ("" for
// none) and the required database, tenant and user, plus issuer and
// audience where the command has them.
func (c *cli) parseSignedIn(cmd *command, args []string, cfg *reviewConfig, idName string) (string, error) {
	pos, err := cmd.parse(args, c.getenv)
	if err != nil {
		return "", err
	}
	var names []string
	if idName != "" {
		names = []string{idName}
	}
	if err := cmd.wantArgs(pos, names...); err != nil {
		return "", err
	}
	req := map[string]string{"db": cfg.DB, "tenant": cfg.Tenant, "user": cfg.User}
	if cmd.fs.Lookup("issuer") != nil {
		req["issuer"], req["audience"] = cfg.Issuer, cfg.Audience
	}
	if err := cmd.required(req); err != nil {
		return "", err
	}
	if idName != "" {
		if strings.TrimSpace(pos[0]) == "" {
			return "", usagef(cmd.synopsis, "%s is empty", idName)
		}
		return pos[0], nil
	}
	return "", nil
}

// signIn opens the application and authenticates the reviewer with the
// password from stdin. The caller closes the application.
func (c *cli) signIn(ctx context.Context, cfg reviewConfig) (*app.App, models.User, error) {
	key, err := c.loadKEK(c.getenv(envName("kek-file")))
	if err != nil {
		return nil, models.User{}, err
	}
	if err := existingDB(cfg.DB); err != nil {
		return nil, models.User{}, err
	}
	a, err := app.Open(ctx, app.Config{DB: cfg.DB, ToolsFile: cfg.Tools, Issuer: cfg.Issuer, Audience: cfg.Audience,
		Getenv: c.getenv, Logger: c.quietLogger(), KEK: key})
	if err != nil {
		return nil, models.User{}, err
	}
	u, err := c.authenticate(ctx, a, cfg.Tenant, cfg.User)
	if err != nil {
		a.Close()
		return nil, models.User{}, err
	}
	return a, u, nil
}

// authenticate checks the user's password, read from stdin. An unknown user
// costs the same hashing work as a wrong password and gets the same answer.
func (c *cli) authenticate(ctx context.Context, a *app.App, tenant, user string) (models.User, error) {
	t, err := a.Store.TenantByName(ctx, tenant)
	if err != nil {
		return models.User{}, err
	}
	password, err := c.readPassword(ctx, fmt.Sprintf("Password for %s: ", user))
	if err != nil {
		return models.User{}, err
	}
	if password == "" {
		return models.User{}, models.Errorf(models.EUnauthenticated, "no password on stdin: the first line of stdin is the password")
	}
	u, hash, err := a.Store.UserCredentials(ctx, t.ID, user)
	if models.IsCode(err, models.ENotFound) {
		_, _ = secret.HashPassword("countersign: equalize the time of an unknown user")
		return models.User{}, errWrongCredentials
	}
	if err != nil {
		return models.User{}, err
	}
	if !secret.VerifyPassword(hash, password) {
		return models.User{}, errWrongCredentials
	}
	if u.Disabled {
		return models.User{}, models.Errorf(models.EForbidden, "user %q is disabled", u.Name)
	}
	return u, nil
}

func (c *cli) reviewList(ctx context.Context, args []string) error {
	var cfg reviewConfig
	cmd := c.newReviewCommand("review list", "countersign review list --tenant T --user U [flags]",
		"Lists the proposals awaiting confirmation in the tenant, newest first.", &cfg, c.stdout)
	if _, err := c.parseReview(cmd, args, &cfg, false); err != nil {
		return err
	}
	a, u, err := c.signIn(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	var items []*models.Proposal
	q := writes.ListQuery{Statuses: []models.Status{models.StatusAwaitingConfirmation}, Limit: 100}
	for {
		page, err := a.Protocol.List(ctx, u.TenantID, q)
		if err != nil {
			return err
		}
		items = append(items, page.Items...)
		if page.Next == "" || len(items) >= 1000 {
			break
		}
		q.Cursor = page.Next
	}
	if len(items) == 0 {
		fmt.Fprintln(c.stderr, "no proposals await confirmation")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tTARGET\tTIER\tCONFIRMATION\tAGENT\tEXPIRES IN")
	now := time.Now()
	for _, p := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(p.ID), clean(p.Tool), clean(target(p)), clean(p.Tier.Name),
			confirmation(p.Tier), clean(p.AgentName), remaining(p.ExpiresAt, now))
	}
	return tw.Flush()
}

func (c *cli) reviewShow(ctx context.Context, args []string) error {
	var cfg reviewConfig
	cmd := c.newReviewCommand("review show", "countersign review show PROPOSAL_ID --tenant T --user U [flags]",
		"Shows a proposal as a reviewer sees it: every argument with its display and\nmachine value, the digest, the risk tier and the expiry.", &cfg, c.stdout)
	id, err := c.parseReview(cmd, args, &cfg, true)
	if err != nil {
		return err
	}
	a, u, err := c.signIn(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	p, err := a.Protocol.Get(ctx, u.TenantID, id)
	if err != nil {
		return err
	}
	c.printProposal(c.stdout, a, p)
	return nil
}

func (c *cli) reviewApprove(ctx context.Context, args []string) error {
	var cfg reviewConfig
	cmd := c.newReviewCommand("review approve", "countersign review approve PROPOSAL_ID --tenant T --user U [flags]", `
Shows the proposal on stderr and approves exactly what was shown: the
approval is bound to the digest of the arguments displayed and, when the
business system described the write, to the effect digest of the preview
displayed (refused with effect_changed if it describes the write
differently now). Prints the
resulting status on stdout: confirmed once the tier's approvals are complete
(the agent can then redeem its token), else awaiting_confirmation.

A password on stdin is the only authentication a terminal offers, so risk
tiers that require a security-key (webauthn) confirmation are refused with
step_up_required: those can only be approved in the browser console.`, &cfg, c.stdout)
	tokenFlags(cmd.fs, &cfg.Issuer, &cfg.Audience)
	cmd.fs.StringVar(&cfg.Comment, "comment", "", "an optional word to the agent and the history (at most 1000 characters)")
	id, err := c.parseReview(cmd, args, &cfg, true)
	if err != nil {
		return err
	}
	a, u, err := c.signIn(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	p, err := a.Protocol.Get(ctx, u.TenantID, id)
	if err != nil {
		return err
	}
	c.printProposal(c.stderr, a, p)
	out, err := a.Protocol.Confirm(ctx, writes.ConfirmInput{
		Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest,
		Evidence: auth.ApprovalEvidence(u, []string{models.AMRPassword}), Comment: cfg.Comment})
	if models.IsCode(err, models.EStepUpRequired) {
		fmt.Fprintf(c.stderr, "The %s tier needs a security-key confirmation, which only the browser console can collect.\n", clean(p.Tier.Name))
	}
	if err != nil {
		return err
	}
	have, need := out.ApprovalCount()
	fmt.Fprintf(c.stderr, "approved by %s (%d of %d approvals)\n", clean(u.Name), have, need)
	if out.Status == models.StatusConfirmed && out.Token != nil {
		fmt.Fprintf(c.stderr, "the agent may redeem its confirmation until %s\n", out.Token.ExpiresAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(c.stdout, out.Status)
	return nil
}

func (c *cli) reviewDecline(ctx context.Context, args []string) error {
	var cfg reviewConfig
	cmd := c.newReviewCommand("review decline", "countersign review decline PROPOSAL_ID --tenant T --user U --reason TEXT [flags]", `
Shows the proposal on stderr and declines it with the reason given, which the
agent sees. Prints the resulting status (declined) on stdout.`, &cfg, c.stdout)
	cmd.fs.StringVar(&cfg.Reason, "reason", "", "why the write is declined (1 to 1000 characters; the agent sees it)")
	id, err := c.parseReview(cmd, args, &cfg, true)
	if err != nil {
		return err
	}
	if strings.TrimSpace(cfg.Reason) == "" {
		return usagef(cmd.synopsis, "--reason is required: say why you decline")
	}
	a, u, err := c.signIn(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	p, err := a.Protocol.Get(ctx, u.TenantID, id)
	if err != nil {
		return err
	}
	c.printProposal(c.stderr, a, p)
	out, err := a.Protocol.Decline(ctx, writes.DeclineInput{
		Reviewer: u, ProposalID: p.ID, DigestSeen: p.ArgsDigest, Reason: cfg.Reason})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "declined by %s\n", clean(u.Name))
	fmt.Fprintln(c.stdout, out.Status)
	return nil
}

func (c *cli) revoke(ctx context.Context, args []string) error {
	var cfg reviewConfig
	cmd := newCommand("revoke", "countersign revoke PROPOSAL_ID --tenant T --user ADMIN [flags]", `
Withdraws the confirmation of a confirmed proposal whose token has not been
redeemed yet: the token can no longer be executed and the proposal becomes
revoked. Administrators only; the administrator's password is the first line
of stdin. Prints the resulting status (revoked) on stdout.`, c.stdout)
	dbFlag(cmd.fs, &cfg.DB)
	cmd.fs.StringVar(&cfg.Tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&cfg.User, "user", "", "the administrator's user `NAME`")
	id, err := c.parseReview(cmd, args, &cfg, true)
	if err != nil {
		return err
	}
	// Revoking reads no tool rules and calls no business system, so the
	// built-in registry serves whatever registry the server runs with.
	a, u, err := c.signIn(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	out, err := a.Protocol.Revoke(ctx, u, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "confirmation of %s revoked by %s\n", clean(out.ID), clean(u.Name))
	fmt.Fprintln(c.stdout, out.Status)
	return nil
}

// printProposal writes a proposal the way a reviewer must see it before
// deciding. Everything the agent or the business system supplied goes
// through clean, so that no value can move the cursor, recolour the
// terminal or reorder text to impersonate another line.
func (c *cli) printProposal(w io.Writer, a *app.App, p *models.Proposal) {
	now := time.Now()
	title, side := "", ""
	if t, ok := a.Registry.Tool(p.Tool); ok {
		title, side = t.Title, string(t.SideEffect)
	}
	var hidden []visible.Finding
	fmt.Fprintf(w, "proposal %s  [%s]\n", clean(p.ID), p.Status)
	tool := clean(p.Tool)
	if title != "" {
		tool += " — " + clean(title) + " (side effect: " + side + ")"
	}
	fmt.Fprintf(w, "  tool:          %s\n", tool)
	fmt.Fprintf(w, "  requested by:  agent %s (%s) at %s\n", clean(p.AgentName), clean(p.AgentID), p.CreatedAt.UTC().Format(time.RFC3339))
	if p.Batch() {
		fmt.Fprintf(w, "  target:        %d resources, set digest %s\n", p.ResourceCount, clean(p.ResourceSetDigest))
	} else {
		t := clean(p.Resource, &hidden)
		if p.ResourceLabel != "" {
			t += " · " + clean(p.ResourceLabel, &hidden)
		}
		fmt.Fprintf(w, "  target:        %s  (state version %s)\n", t, clean(p.StateVersion, &hidden))
	}
	if p.Context != "" {
		fmt.Fprintln(w, "  agent's context:")
		for line := range strings.SplitSeq(p.Context, "\n") {
			fmt.Fprintf(w, "    | %s\n", clean(line, &hidden))
		}
	}
	fmt.Fprintln(w, "  arguments:")
	for _, f := range p.Preview {
		fmt.Fprintf(w, "    %s: %s  [%s]\n", clean(f.Label), clean(f.Display, &hidden), cleanJSON(string(f.Value), &hidden))
	}
	if p.Effect != nil {
		fmt.Fprintln(w, "  effect, as the business system described it:")
		for _, f := range p.Effect.Facts {
			fmt.Fprintf(w, "    %s: %s\n", clean(f.Label, &hidden), clean(f.Value, &hidden))
		}
		for _, ch := range p.Effect.Changes {
			fmt.Fprintf(w, "    %s: %s → %s  [%s: %s → %s]\n", clean(ch.Label, &hidden), clean(ch.BeforeDisplay, &hidden),
				clean(ch.AfterDisplay, &hidden), clean(ch.Field, &hidden), cleanJSON(string(ch.Before), &hidden), cleanJSON(string(ch.After), &hidden))
		}
		fmt.Fprintf(w, "  effect digest: %s\n", clean(p.EffectDigest))
	}
	if len(hidden) > 0 {
		fmt.Fprintf(w, "  WARNING:       %s\n", visible.Warning(hidden))
	}
	fmt.Fprintf(w, "  digest:        %s\n", clean(p.ArgsDigest))
	have, need := p.ApprovalCount()
	fmt.Fprintf(w, "  risk tier:     %s — needs %s (%d of %d approvals so far)\n",
		clean(p.Tier.Name), confirmation(p.Tier), have, need)
	if _, short := p.StillNeeded(); len(short) > 0 {
		fmt.Fprintf(w, "  still needs:   %s\n", clean(models.Shortfalls(short)))
	}
	fmt.Fprintf(w, "  expires at:    %s (%s)\n", p.ExpiresAt.UTC().Format(time.RFC3339), remainingText(p.ExpiresAt, now))
	for _, d := range p.Decisions {
		line := fmt.Sprintf("  decision:      %s %sd at %s", clean(d.UserName), d.Kind, d.CreatedAt.UTC().Format(time.RFC3339))
		if d.Reason != "" {
			line += ": " + clean(d.Reason)
		}
		fmt.Fprintln(w, line)
	}
}

// target names what a proposal writes to, for the list.
func target(p *models.Proposal) string {
	if p.Batch() {
		return fmt.Sprintf("%d resources", p.ResourceCount)
	}
	return p.Resource
}

// confirmation describes what a tier requires.
func confirmation(t models.Tier) string {
	kind := "a click"
	if t.Confirmation == models.ConfirmWebAuthn {
		kind = "a security key"
	}
	if t.Approvers() > 1 {
		return fmt.Sprintf("%s from %d approvers", kind, t.Approvers())
	}
	return kind
}

// remaining is the time left until t, whole seconds, or "expired".
func remaining(t, now time.Time) string {
	d := t.Sub(now)
	if d <= 0 {
		return "expired"
	}
	return d.Truncate(time.Second).String()
}

func remainingText(t, now time.Time) string {
	r := remaining(t, now)
	if r == "expired" {
		return "expired"
	}
	return "in " + r
}

// clean makes text safe to print on a terminal by the same rule as the
// console (visible.Reveal): control characters (escape sequences, carriage
// returns, newlines), bidi controls, invisible characters, variation
// selectors and non-NFC sequences are shown as ⟨U+XXXX⟩ instead of acting.
// What it found is kept in *found, when found is not nil, for a warning.
func clean(s string, found ...*[]visible.Finding) string {
	t := visible.Reveal(s, visible.Strict)
	for _, f := range found {
		*f = append(*f, t.Findings...)
	}
	return t.Shown
}

// cleanJSON is clean for a machine value (JSON text): a hidden character
// JSON writes as an escape ("\u0000") is shown as ⟨U+0000⟩ too, as the
// console shows it (visible.RevealJSON).
func cleanJSON(s string, found ...*[]visible.Finding) string {
	t := visible.RevealJSON(s, visible.Strict)
	for _, f := range found {
		*f = append(*f, t.Findings...)
	}
	return t.Shown
}

// isBidiControl reports the characters that reorder displayed text (the
// "Trojan Source" characters): embeddings, overrides and isolates.
func isBidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}
