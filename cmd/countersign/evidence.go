package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/store"
)

const evidenceAbout = `
Re-verifies, from the stored data alone, every approval of a proposal: for
each approval given with a security key, that the key signed — with the user
verified, at the recorded origin and relying party — the challenge derived
from this proposal's id and arguments digest and the approval's nonce
(SHA-256 of the three, each length-prefixed; see models/stepup.Challenge),
and that the key is the one registered to the approver. On a tier that
requires a security key, an approval without evidence fails, and so does a
confirmation with fewer verified approvers than the quorum.

It only reads the database. It prints one verdict per approval and exits
with status 1 when any fails.`

// evidenceVerify is "countersign evidence verify PROPOSAL_ID".
func (c *cli) evidenceVerify(ctx context.Context, args []string) error {
	var db, tenant string
	cmd := newCommand("evidence verify", "countersign evidence verify PROPOSAL_ID --tenant T [flags]", evidenceAbout, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	pos, err := cmd.parse(args, c.getenv)
	if err != nil {
		return err
	}
	if err := cmd.wantArgs(pos, "PROPOSAL_ID"); err != nil {
		return err
	}
	if err := cmd.required(map[string]string{"db": db, "tenant": tenant}); err != nil {
		return err
	}
	if err := existingDB(db); err != nil {
		return err
	}
	st, err := store.Open(db, store.Options{Logger: c.quietLogger()})
	if err != nil {
		return err
	}
	defer st.Close()
	t, err := st.TenantByName(ctx, tenant)
	if err != nil {
		return err
	}
	p, err := st.GetProposal(ctx, t.ID, pos[0])
	if err != nil {
		return err
	}
	failed, total, err := verifyEvidence(ctx, c.stdout, st, p)
	if err != nil {
		return err
	}
	if failed > 0 {
		return models.Errorf(models.EStepUpFailed, "%d of %d checks of proposal %s failed", failed, total, p.ID)
	}
	return nil
}

// verifyEvidence prints a verdict per approval of p, and one for the
// quorum, and returns how many failed of how many.
func verifyEvidence(ctx context.Context, w io.Writer, st *store.Store, p *models.Proposal) (failed, total int, err error) {
	fmt.Fprintf(w, "proposal %s  %s  %s\n", p.ID, p.Tool, p.Status)
	fmt.Fprintf(w, "  digest %s\n", p.ArgsDigest)
	fmt.Fprintf(w, "  tier %s: %s, %d %s\n", p.Tier.Name, p.Tier.Confirmation, p.Tier.Approvers(), plural(p.Tier.Approvers(), "approver", "approvers"))
	verdicts := stepup.VerifyApprovals(p)
	if len(verdicts) == 0 {
		fmt.Fprintln(w, "  no approvals")
	}
	verified := 0
	for _, v := range verdicts {
		if v.Err == nil && v.Evidence != nil {
			if err := registeredKey(ctx, st, p, v); err != nil {
				if !models.IsCode(err, models.EStepUpFailed) {
					return 0, 0, err
				}
				v.Err = err
			}
		}
		who := v.Decision.UserName
		if who == "" {
			who = v.Decision.UserID
		}
		total++
		switch {
		case v.Err != nil:
			failed++
			fmt.Fprintf(w, "✗ %s: FAILED: %s\n", who, models.ErrorMessage(v.Err))
		case v.Evidence == nil:
			verified++
			fmt.Fprintf(w, "✓ %s: approved with %s; the %s tier needs no security key\n", who,
				strings.Join(v.Decision.AMR, "+"), p.Tier.Name)
		default:
			verified++
			ev := v.Evidence
			name := ev.KeyName
			if name == "" {
				name = "a security key"
			}
			fmt.Fprintf(w, "✓ %s: verified: %q (credential %s) signed challenge %s\n", who, name, ev.CredentialID, ev.Challenge)
			fmt.Fprintf(w, "    = SHA-256(%s, %s, nonce %s); user verified, counter %d, origin %s, relying party %s\n",
				p.ID, p.ArgsDigest, ev.Nonce, ev.SignCount, ev.Origin, ev.RPID)
		}
	}
	// A tier's factors can need more people than its quorum.
	required := p.Tier.Approvers()
	switch {
	case p.Token == nil:
	case p.MandateID != "":
		total++
		fmt.Fprintf(w, "✓ quorum: none required; confirmed under mandate %s\n", p.MandateID)
	case verified < required:
		total++
		failed++
		fmt.Fprintf(w, "✗ quorum: FAILED: a token was issued with %d verified %s of the %d required\n",
			verified, plural(verified, "approval", "approvals"), required)
	default:
		total++
		fmt.Fprintf(w, "✓ quorum: %d verified %s, %d required\n", verified, plural(verified, "approval", "approvals"), required)
	}
	return failed, total, nil
}

// registeredKey checks that an approval's evidence was signed by a key
// registered, in the proposal's tenant, to the approver — the evidence
// carries its own public key, which alone proves nothing about whose it is.
func registeredKey(ctx context.Context, st *store.Store, p *models.Proposal, v stepup.Verdict) error {
	k, err := st.SecurityKeyByCredentialID(ctx, p.TenantID, v.Evidence.CredentialIDBytes())
	switch {
	case models.IsCode(err, models.ENotFound):
		return models.Errorf(models.EStepUpFailed, "the signing key (credential %s) was never registered in this organization", v.Evidence.CredentialID)
	case err != nil:
		return err
	case k.UserID != v.Decision.UserID:
		return models.Errorf(models.EStepUpFailed, "the signing key %q is registered to another user", k.Name)
	case !v.Evidence.SamePublicKey(k.PublicKey):
		return models.Errorf(models.EStepUpFailed, "the evidence's public key is not the registered key %q", k.Name)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
