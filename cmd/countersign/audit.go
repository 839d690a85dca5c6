package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/audit"
	"github.com/countersign/countersign/models/checkpoint"
	"github.com/countersign/countersign/models/token"
	"github.com/countersign/countersign/models/writes"
)

// auditExport is "countersign audit export --tenant T --since WHEN".
func (c *cli) auditExport(ctx context.Context, args []string) error {
	var db, tenant, since, out, issuer string
	cmd := newCommand("audit export", "countersign audit export --tenant T [--since WHEN] [--out FILE] [flags]", `
Writes a tenant's audit log as JSON Lines (stdout, or --out FILE): a header,
the token public keys (JWKS), every audit entry from the first one made at or
after --since to the newest, the signed checkpoints among them (a new one is
signed at the head first, so the export always ends under a signature), and
for the proposals the entries mention their security-key evidence, the
registered credentials that evidence names and the signed receipts.

--since is an RFC 3339 time (2026-11-01T00:00:00Z), a date (2026-11-01) or a
duration back from now (72h). Without it the whole log is written.

"countersign verify --export FILE" checks such a file offline.`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&since, "since", "", "export entries made at or after `WHEN`")
	cmd.fs.StringVar(&out, "out", "", "write to `FILE` instead of stdout")
	cmd.fs.StringVar(&issuer, "issuer", defaultIssuer, "the `ISS` checkpoints name (the server's --issuer)")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant"); err != nil {
		return err
	}
	now := time.Now().UTC()
	from, err := parseSince(since, now)
	if err != nil {
		return usagef(cmd.synopsis, "--since: %v", err)
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	tokens := token.New(st, token.Config{Issuer: issuer})
	if err := tokens.EnsureKey(ctx); err != nil {
		return err
	}
	w := c.stdout
	if out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	n, err := audit.Exporter{Checkpointer: checkpoint.Checkpointer{Store: st, Tokens: tokens}}.Export(ctx, w, t, from, now)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "exported %d audit entries of tenant %s\n", n, t.Name)
	return nil
}

// parseSince reads --since: empty (everything), RFC 3339, a date, or a
// duration before now.
func parseSince(v string, now time.Time) (time.Time, error) {
	switch {
	case v == "":
		return time.Time{}, nil
	case strings.ContainsAny(v, "T:"):
		return time.Parse(time.RFC3339, v)
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time, a date or a duration", v)
	}
	return t, nil
}

// auditKeyCreate is "countersign audit key --tenant T --name N".
func (c *cli) auditKeyCreate(ctx context.Context, args []string) error {
	var db, tenant, name string
	cmd := newCommand("audit key", "countersign audit key --tenant T --name N [flags]", `
Creates an audit reader key and prints it, alone, on stdout, once (only its
hash is stored). An audit reader may read the tenant's audit log through
GET /api/v1/audit and the receipts through GET /api/v1/executions/ID/receipt,
with "Authorization: Bearer <key>", and do nothing else: it can neither
propose nor redeem, and agent keys cannot read the audit log.`, c.stdout)
	dbFlag(cmd.fs, &db)
	cmd.fs.StringVar(&tenant, "tenant", "", "tenant `NAME`")
	cmd.fs.StringVar(&name, "name", "", "the reader's `NAME` (e.g. the auditor or system using it)")
	if err := cmd.parseFlags(args, c.getenv, "db", "tenant", "name"); err != nil {
		return err
	}
	if err := checkName("audit reader", name); err != nil {
		return usagef(cmd.synopsis, "%v", err)
	}
	st, t, err := c.openTenant(ctx, db, tenant)
	if err != nil {
		return err
	}
	defer st.Close()
	raw, err := secret.RandomToken(32)
	if err != nil {
		return err
	}
	key := writes.AuditKeyPrefix + raw
	r, err := st.CreateAuditReader(ctx, t.ID, name, secret.HashAPIKey(key))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "created audit reader %s (%s) in tenant %s; its key is printed once and cannot be shown again\n", r.Name, r.ID, t.Name)
	fmt.Fprintln(c.stdout, key)
	return nil
}

const verifyAbout = `
Verifies, offline and without trusting the server, what a receipt claims:

  - the receipt's Ed25519 signature under the JWKS (typ countersign-receipt+jwt);
  - requested = approved = executed digest, and each approver saw it;
  - each security-key approval: the WebAuthn assertion verifies against the
    registered credential's public key over the transaction challenge
    (proposal id, digest, nonce);
  - the audit chain is unbroken from the proposal's creation to the
    execution's outcome and ends under a signed checkpoint.

The receipt is a file, or "-" for stdin: the compact JWS, or the JSON answer
of GET /api/v1/executions/ID/receipt. The export comes from "countersign
audit export". Without --receipt every receipt in the export is verified,
and the export must hold each receipt its chain records, once; an export
without receipts (of an organization that executed nothing) is verified on
its chain and checkpoints alone.
Instead of an export, --jwks (the server's /.well-known/jwks.json) with
--evidence (an export or its evidence and credential lines) checks the
signature, the digests and the assertions, but not the chain.

It prints one line per element and a verdict, and exits 1 naming the first
broken element when anything fails.`

// verify is "countersign verify".
func (c *cli) verify(_ context.Context, args []string) error {
	var receiptPath, exportPath, jwksPath, evidencePath string
	cmd := newCommand("verify", "countersign verify [--receipt FILE|-] (--export FILE | --jwks FILE [--evidence FILE])", verifyAbout, c.stdout)
	cmd.fs.StringVar(&receiptPath, "receipt", "", "the receipt `FILE`, or - for stdin")
	cmd.fs.StringVar(&exportPath, "export", "", "an audit export `FILE` (countersign audit export)")
	cmd.fs.StringVar(&jwksPath, "jwks", "", "a JWKS `FILE`, when there is no export")
	cmd.fs.StringVar(&evidencePath, "evidence", "", "a `FILE` of evidence and credential lines, when there is no export")
	pos, err := cmd.parse(args, c.getenv)
	if err != nil {
		return err
	}
	if err := cmd.wantArgs(pos); err != nil {
		return err
	}
	if exportPath == "" && jwksPath == "" {
		return usagef(cmd.synopsis, "--export or --jwks is required")
	}
	var x audit.Export
	for _, in := range []struct{ flag, path string }{{"export", exportPath}, {"jwks", jwksPath}, {"evidence", evidencePath}} {
		if in.path == "" {
			continue
		}
		b, err := os.ReadFile(in.path)
		if err != nil {
			return models.Wrap(models.EInvalidRequest, err, "cannot read --"+in.flag+" "+in.path)
		}
		if err := x.Read(in.path, bytes.NewReader(b)); err != nil {
			return err
		}
		if in.flag == "export" && !x.Header {
			// Else a JWKS or a file of evidence lines given as the export
			// would pass for an export without a chain.
			return models.Errorf(models.ENotProven, "--export %s has no header line: it is not an audit export, or not a whole one "+
				"(countersign audit export writes the header first)", in.path)
		}
	}
	var receipts []string
	var whole error // the export's own failure, when checked whole
	switch receiptPath {
	case "":
		if exportPath == "" {
			return usagef(cmd.synopsis, "--receipt is required without --export")
		}
		for _, r := range x.Receipts {
			receipts = append(receipts, r.JWS)
		}
		xr := x.VerifyExport()
		printExportReport(c.stdout, xr, len(receipts))
		whole = xr.Err()
	default:
		var b []byte
		if receiptPath == "-" {
			b, err = io.ReadAll(io.LimitReader(c.stdin, 1<<20))
		} else {
			b, err = os.ReadFile(receiptPath)
		}
		if err != nil {
			return models.Wrap(models.EInvalidRequest, err, "cannot read the receipt")
		}
		text, err := receiptText(b)
		if err != nil {
			return err
		}
		receipts = append(receipts, text)
	}
	failed := 0
	var first error
	for _, rc := range receipts {
		r := x.VerifyReceipt(rc)
		printReport(c.stdout, r)
		if err := r.Err(); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	switch {
	case first != nil && whole != nil:
		return models.Errorf(models.ENotProven, "%s; and %d of %d receipts failed, the first: %s",
			models.ErrorMessage(whole), failed, len(receipts), models.ErrorMessage(first))
	case whole != nil:
		return whole
	case first != nil && len(receipts) > 1:
		return models.Errorf(models.ENotProven, "%d of %d receipts failed; the first: %s", failed, len(receipts), models.ErrorMessage(first))
	}
	return first
}

// printExportReport prints the check of an export as a whole, before the
// reports of its receipts.
func printExportReport(w io.Writer, r *audit.Report, receipts int) {
	fmt.Fprintf(w, "the export as a whole: its chain, its checkpoints and which receipts it holds\n")
	printChecks(w, r)
	switch {
	case r.Err() != nil:
		fmt.Fprintf(w, "VERDICT: NOT PROVEN — %s\n\n", models.ErrorMessage(r.Err()))
	case receipts == 0:
		fmt.Fprintf(w, "VERDICT: CHAIN INTACT — the chain is linked under a signed checkpoint; the export holds no receipts, so none was checked\n\n")
	default:
		fmt.Fprintf(w, "VERDICT: COMPLETE — the export holds every receipt the chain records, once; each is checked below\n\n")
	}
}

func printChecks(w io.Writer, r *audit.Report) {
	for _, c := range r.Checks {
		mark := "✓"
		switch {
		case !c.OK:
			mark = "✗"
		case c.NotChecked:
			mark = "–" // neither proven nor broken
		}
		fmt.Fprintf(w, "%s %s: %s\n", mark, c.Element, c.Detail)
	}
}

// receiptText takes a receipt file: the compact JWS, or a JSON object with
// "receipt" (the API's answer). An answer naming another execution than
// its receipt is refused (ENotProven): the receipt would otherwise be
// proven for the execution it names while the reader asked about another.
func receiptText(b []byte) (string, error) {
	b = bytes.TrimSpace(b)
	var doc struct {
		ExecutionID string `json:"execution_id"`
		Receipt     string `json:"receipt"`
	}
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &doc) != nil || doc.Receipt == "" {
		return string(b), nil
	}
	if doc.ExecutionID == "" {
		return doc.Receipt, nil
	}
	// The signature is checked later; an unsigned claim read here can
	// only refuse.
	var claims struct {
		ExecutionID string `json:"execution_id"`
	}
	parts := strings.Split(doc.Receipt, ".")
	if len(parts) == 3 {
		if payload, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil && json.Unmarshal(payload, &claims) == nil &&
			claims.ExecutionID == doc.ExecutionID {
			return doc.Receipt, nil
		}
	}
	return "", models.Errorf(models.ENotProven, "the answer is of execution %s, but its receipt is of execution %q", doc.ExecutionID, claims.ExecutionID)
}

func printReport(w io.Writer, r *audit.Report) {
	rc := r.Receipt
	if rc.ExecutionID != "" {
		fmt.Fprintf(w, "receipt of execution %s  %s %s  %s\n", rc.ExecutionID, rc.Tool, rc.Resource, rc.Status)
		fmt.Fprintf(w, "  proposal %s, request key %s, tier %s (%s), policy %s\n", rc.ProposalID, rc.RequestKey, rc.RiskTier, rc.Confirmation, rc.PolicyVersion)
		if m := rc.Mandate; m != nil {
			fmt.Fprintf(w, "  confirmed by standing mandate %s (proposal %s, terms %s), granted %s\n", m.ID, m.ProposalID, m.TermsDigest, m.GrantedAt)
		}
		if rc.EffectDigest != "" {
			fmt.Fprintf(w, "  effect preview described when proposed: %s\n", rc.EffectDigest)
		}
	}
	printChecks(w, r)
	if err := r.Err(); err != nil {
		fmt.Fprintf(w, "VERDICT: NOT PROVEN — %s\n\n", models.ErrorMessage(err))
		return
	}
	var who []string
	approvers := rc.Approvers
	if rc.Mandate != nil {
		approvers = rc.Mandate.Grantors
	}
	for _, a := range approvers {
		name := a.Name
		if name == "" {
			name = a.UserID
		}
		who = append(who, fmt.Sprintf("%s (%s)", name, strings.ReplaceAll(a.Method, "_", " ")))
	}
	how := "approved by " + strings.Join(who, ", ")
	if rc.Mandate != nil {
		how = fmt.Sprintf("confirmed by mandate %s granted by %s", rc.Mandate.ID, strings.Join(who, ", "))
	}
	if !r.ChainChecked {
		what := fmt.Sprintf("%d %s", len(rc.Approvers), plural(len(rc.Approvers), "approval", "approvals"))
		if rc.Mandate != nil {
			what = fmt.Sprintf("mandate %s and its %d %s", rc.Mandate.ID, len(rc.Mandate.Grantors), plural(len(rc.Mandate.Grantors), "grant", "grants"))
		}
		fmt.Fprintf(w, "VERDICT: RECEIPT VALID — signed, digests agree, %s verified; the audit chain was not checked (give --export)\n\n", what)
		return
	}
	fmt.Fprintf(w, "VERDICT: PROVEN — this %s with digest %s was requested by %s, %s under policy %s, and executed once (%s).\n\n",
		rc.Tool, rc.RequestedDigest, rc.Agent, how, rc.PolicyVersion, rc.Status)
}
