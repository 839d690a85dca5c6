package audit

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/stepup"
	"github.com/countersign/countersign/models/token"
)

// Check is one verified (or broken) element.
type Check struct {
	// Element names what was checked: "receipt", "audit entry 12",
	// "checkpoint 40", "evidence of decision dec_…", "digests", …
	Element string
	OK      bool
	// NotChecked marks an element that could not be checked from what was
	// given (OK, since nothing failed, but nothing was proven either).
	NotChecked bool
	Detail     string
}

// Report is the outcome of a verification.
type Report struct {
	Checks []Check
	// Receipt is the verified receipt's claims (zero when its signature
	// failed).
	Receipt models.SignedReceipt
	// ChainChecked reports whether the receipt was checked against an
	// audit chain (not when only a JWKS and evidence were given).
	ChainChecked bool
}

func (r *Report) ok(element, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Element: element, OK: true, Detail: fmt.Sprintf(format, args...)})
}

// skip records an element that was not checked, and why.
func (r *Report) skip(element, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Element: element, OK: true, NotChecked: true, Detail: fmt.Sprintf(format, args...)})
}

func (r *Report) fail(element, format string, args ...any) {
	r.Checks = append(r.Checks, Check{Element: element, Detail: fmt.Sprintf(format, args...)})
}

// Failed returns the broken elements, in the order found.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Err is nil when every check passed, else an ENotProven error naming the
// first broken element (and how many more there are): a signature, a
// digest, a link of the chain, an assertion.
func (r *Report) Err() error {
	f := r.Failed()
	if len(f) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s: %s", f[0].Element, f[0].Detail)
	if len(f) > 1 {
		msg += fmt.Sprintf(" (and %d more broken elements)", len(f)-1)
	}
	return models.Errorf(models.ENotProven, "verification failed: %s", msg)
}

// decoded is a chain entry whose hash and links were checked.
type decoded struct {
	ExportedEntry
	body models.AuditBody
	data map[string]any
}

// Chain verifies the export's chain and checkpoints alone: every entry's
// hash covers its body, each links to the one before it with consecutive
// sequence numbers, every checkpoint's signature verifies and states the
// hash the chain has at its position. It returns the entries by position
// and the highest position covered by a valid checkpoint whose head is in
// the export.
func (x *Export) Chain(r *Report) (bySeq map[int64]decoded, anchored int64) {
	bySeq, anchored, _ = x.chain(r)
	return bySeq, anchored
}

// chain is Chain, also returning the signing keys the chain records.
func (x *Export) chain(r *Report) (bySeq map[int64]decoded, anchored int64, recorded keyRecords) {
	bySeq = map[int64]decoded{}
	keys, err := token.ParseJWKS(x.JWKS)
	if err != nil {
		r.fail("jwks", "%s", models.ErrorMessage(err))
	}
	if !x.chainGiven() {
		return bySeq, 0, keyRecords{}
	}
	if !x.Header || x.Tenant == "" {
		// Without it nothing says whose chain this is: entries,
		// checkpoints and receipts of any organization would pass.
		r.fail("export", "the header line is missing (or names no organization): it is not a whole export, "+
			"and whose chain it holds cannot be checked")
	}
	if len(x.Entries) == 0 {
		r.fail("audit chain", "the export holds no audit entries: nothing can be checked against the chain")
		return bySeq, 0, keyRecords{}
	}
	broken := false
	var prev *decoded
	for _, e := range x.Entries {
		name := fmt.Sprintf("audit entry %d (line %d)", e.Seq, e.Line)
		d := decoded{ExportedEntry: e}
		if got := models.AuditHash([]byte(e.Body)); got != e.Hash {
			r.fail(name, "its body hashes to %s, not the recorded %s: the entry was altered", got, e.Hash)
			broken = true
		}
		if err := json.Unmarshal([]byte(e.Body), &d.body); err != nil {
			r.fail(name, "its body is not an audit entry: %v", err)
			broken = true
			prev = &d
			continue
		}
		_ = json.Unmarshal(d.body.Data, &d.data)
		switch {
		case d.body.Seq != e.Seq:
			r.fail(name, "its body says seq %d", d.body.Seq)
			broken = true
		case x.Tenant != "" && d.body.Tenant != x.Tenant:
			r.fail(name, "it belongs to tenant %s, not %s", d.body.Tenant, x.Tenant)
			broken = true
		}
		if prev != nil {
			switch {
			case e.Seq != prev.Seq+1:
				r.fail(name, "it follows entry %d: entries are missing or out of order", prev.Seq)
				broken = true
			case d.body.Prev != prev.Hash:
				r.fail(name, "it links to %s, but entry %d hashes to %s", d.body.Prev, prev.Seq, prev.Hash)
				broken = true
			}
		}
		if _, dup := bySeq[e.Seq]; dup {
			r.fail(name, "the export holds entry %d twice", e.Seq)
			broken = true
		}
		bySeq[e.Seq] = d
		prev = &d
	}
	if !broken {
		r.ok("audit chain", "entries %d to %d are intact and linked", x.Entries[0].Seq, x.Entries[len(x.Entries)-1].Seq)
	}
	recorded = x.signingKeys(r, bySeq, keys)
	for _, c := range x.Checkpoints {
		name := fmt.Sprintf("checkpoint %d (line %d)", c.Seq, c.Line)
		if keys == nil {
			r.fail(name, "no JWKS to check its signature")
			continue
		}
		payload, kid, err := keys.Verify(token.TypeCheckpoint, c.JWS)
		if err != nil {
			r.fail(name, "its signature does not verify: %s", models.ErrorMessage(err))
			continue
		}
		var cc models.CheckpointClaims
		if err := json.Unmarshal(payload, &cc); err != nil {
			r.fail(name, "its claims do not decode: %v", err)
			continue
		}
		switch {
		case cc.Seq != c.Seq || cc.Head != c.Hash || cc.Count != cc.Seq:
			r.fail(name, "the signed checkpoint says seq %d, count %d, head %s", cc.Seq, cc.Count, cc.Head)
			continue
		case x.Tenant != "" && cc.Tenant != x.Tenant:
			r.fail(name, "it is signed for tenant %s", cc.Tenant)
			continue
		}
		e, in := bySeq[c.Seq]
		switch {
		case !in:
			r.fail(name, "entry %d, which it covers, is not in the export", c.Seq)
		case e.Hash != cc.Head:
			r.fail(name, "the chain's entry %d hashes to %s, the signed head is %s", c.Seq, e.Hash, cc.Head)
		case recorded.after(kid, c.Seq):
			r.fail(name, "it is signed by %s, which the chain records as added only at entry %d, after the entries it covers",
				kid, recorded[kid].seq)
		case broken:
			// The signature holds, but the chain the export holds under it
			// does not: it anchors nothing.
			r.ok(name, "signed by %s: head %s after %d entries; it anchors nothing, since the exported chain under it is broken",
				kid, cc.Head, cc.Count)
		default:
			r.ok(name, "signed by %s: head %s after %d entries", kid, cc.Head, cc.Count)
			anchored = max(anchored, c.Seq)
		}
	}
	return bySeq, anchored, recorded
}

// chainGiven reports whether x is an export, whose chain must then be
// checked, rather than only a JWKS and evidence: it has a header, or
// entries or checkpoints.
func (x *Export) chainGiven() bool {
	return x.Header || len(x.Entries) > 0 || len(x.Checkpoints) > 0
}

// keyRecord is where the chain records a signing key.
type keyRecord struct {
	seq        int64
	backfilled bool // recorded after the key was added
}

// keyRecords are the signing keys the exported chain records, by kid.
type keyRecords map[string]keyRecord

// after reports whether the chain records kid as added after entry seq
// (a key recorded late, when chains began recording keys, says nothing of
// when it was added).
func (k keyRecords) after(kid string, seq int64) bool {
	rec, ok := k[kid]
	return ok && !rec.backfilled && rec.seq > seq
}

// signingKeys checks the chain's signing_key.added entries against the
// JWKS: every key the chain records is in the JWKS with the public key the
// chain records (a JWKS that swapped a key, or dropped one, does not
// verify). A key recorded late (backfilled) after the chain had recorded
// a key as it was added was not added through countersign — written into
// the database by someone else — and does not verify either. It returns
// the keys the chain records.
func (x *Export) signingKeys(r *Report, bySeq map[int64]decoded, keys token.PublicKeys) keyRecords {
	out := keyRecords{}
	broken := false
	recording := false // the chain recorded a key as it was added
	for _, e := range x.Entries {
		d, ok := bySeq[e.Seq]
		if !ok || d.body.Kind != models.AuditSigningKeyAdded {
			continue
		}
		name := fmt.Sprintf("audit entry %d (line %d)", d.Seq, d.Line)
		kid, _ := d.data["kid"].(string)
		pub, _ := d.data["public_key"].(string)
		back, _ := d.data["backfilled"].(bool)
		if _, dup := out[kid]; dup {
			r.fail(name, "it records signing key %s a second time", kid)
			broken = true
			continue
		}
		out[kid] = keyRecord{seq: d.Seq, backfilled: back}
		if back && recording {
			r.fail(name, "it records signing key %s late, although the chain already recorded keys as they were added: "+
				"the key was not added through countersign", kid)
			broken = true
		}
		recording = recording || !back
		if keys == nil {
			continue
		}
		held, ok := keys[kid]
		switch {
		case !ok:
			r.fail(name, "it records signing key %s, which the JWKS does not hold", kid)
			broken = true
		case base64.RawURLEncoding.EncodeToString(held) != pub:
			r.fail(name, "it records signing key %s with another public key than the JWKS holds under that kid", kid)
			broken = true
		}
	}
	if len(out) > 0 && keys != nil && !broken {
		r.ok("signing keys", "the chain records %d %s, each as the JWKS holds it", len(out), plural(len(out), "signing key", "signing keys"))
	}
	return out
}

// signerRecorded checks that the chain records the key that signed the
// receipt, when the export holds the chain from its first entry and the
// chain records keys at all (an export written before chains recorded
// keys holds none).
func (x *Export) signerRecorded(r *Report, kid string, recorded keyRecords) {
	_, known := recorded[kid]
	switch {
	case known:
		r.ok("receipt signer", "%s is recorded in the chain at entry %d", kid, recorded[kid].seq)
	case len(x.Entries) == 0:
		r.skip("receipt signer", "not checked: the export holds no entries")
	case x.Entries[0].Seq != 1:
		r.skip("receipt signer", "not checked: the export starts at entry %d, and the part of the chain before it, where %s would be recorded, is not in it",
			x.Entries[0].Seq, kid)
	case len(recorded) == 0:
		r.skip("receipt signer", "not checked: the chain records no signing keys (written before chains recorded them)")
	default:
		if _, ok := recorded[kid]; !ok {
			r.fail("receipt signer", "the receipt is signed by %s, a key the organization's chain never recorded", kid)
			return
		}
		r.ok("receipt signer", "%s is recorded in the chain at entry %d", kid, recorded[kid].seq)
	}
}

// VerifyReceipt checks one receipt (a compact JWS) against the export:
//   - its signature under the export's JWKS, with typ countersign-receipt+jwt;
//   - requested = approved = executed digest (and the arguments' digest
//     when the receipt carries them), and every approver saw that digest;
//   - each security-key approval: the evidence hashes to the digest in the
//     receipt and in the chain, its WebAuthn assertion verifies over the
//     transaction challenge derived from the proposal id, the digest and the
//     nonce (models/stepup.VerifyEvidence), and its public key is the
//     credential registered to that approver;
//   - the chain is intact (Chain) and holds the proposal's story from its
//     creation to this execution's outcome, agreeing with the receipt, and a
//     valid signed checkpoint covers the outcome;
//   - for a write a standing mandate confirmed: no person approved it, the
//     token's entry names the mandate, the grantors approved the mandate's
//     terms digest (their security keys checked as above) under its tier,
//     and the chain records the grant with those grantors and decisions;
//     the receipt's terms hash to that digest and the write fits them
//     (mandateTerms), and the chain's tokens under the mandate up to this
//     one keep within its uses, budget, expiry and revocation (mandateUse);
//   - every approver shown an effect preview was shown the receipt's
//     effect digest, as the chain's decision entries record.
func (x *Export) VerifyReceipt(compact string) *Report {
	r := &Report{}
	compact = strings.TrimSpace(compact)
	bySeq, anchored, recorded := x.chain(r)
	chainBroken := len(r.Failed()) > 0
	keys, err := token.ParseJWKS(x.JWKS)
	if err != nil {
		return r
	}
	payload, kid, err := keys.Verify(token.TypeReceipt, compact)
	if err != nil {
		r.fail("receipt", "its signature does not verify: %s", models.ErrorMessage(err))
		return r
	}
	var rc models.SignedReceipt
	if err := json.Unmarshal(payload, &rc); err != nil {
		r.fail("receipt", "its claims do not decode: %v", err)
		return r
	}
	r.Receipt = rc
	r.ok("receipt", "signed by %s for execution %s of proposal %s", kid, rc.ExecutionID, rc.ProposalID)
	if x.Tenant != "" && rc.Tenant != x.Tenant {
		r.fail("receipt", "it is for tenant %s, the export is of %s", rc.Tenant, x.Tenant)
	}
	x.digests(r, rc)
	x.approvals(r, rc, bySeq)
	terms := mandateTerms(r, rc)
	if !x.chainGiven() {
		r.skip("audit chain", "not checked: no export given")
		return r
	}
	r.ChainChecked = true
	if len(bySeq) == 0 {
		return r
	}
	x.signerRecorded(r, kid, recorded)
	x.story(r, rc, compact, bySeq, anchored, chainBroken)
	if terms != nil {
		mandateUse(r, rc, terms, bySeq)
	}
	return r
}

// VerifyExport checks the export as a whole, as verifying every receipt it
// holds does (VerifyReceipt checks each): its chain and checkpoints
// (Chain), that its last entry is under a valid signed checkpoint (an
// export ends at one), and that it holds each receipt the chain records
// once: every execution.outcome entry recording a receipt_digest has a
// receipt of that hash in the export, and no execution has two receipts
// there. So a receipt left out of the export, or replaced by a copy of
// another, does not go unnoticed. An export without receipts, of an
// organization that executed nothing, verifies on its chain alone.
func (x *Export) VerifyExport() *Report {
	r := &Report{}
	bySeq, anchored, _ := x.chain(r)
	if !x.chainGiven() {
		r.fail("audit chain", "no export given")
		return r
	}
	r.ChainChecked = true
	if len(x.Entries) == 0 {
		return r
	}
	if last := x.Entries[len(x.Entries)-1]; len(r.Failed()) == 0 && anchored < last.Seq {
		r.fail("checkpoints", "no valid signed checkpoint covers entry %d (line %d), the export's last: an export ends at one", last.Seq, last.Line)
	}
	held := map[string]bool{}
	byExecution := map[string]int{}
	keys, _ := token.ParseJWKS(x.JWKS)
	for _, l := range x.Receipts {
		compact := strings.TrimSpace(l.JWS)
		held[models.AuditHash([]byte(compact))] = true
		if keys == nil {
			continue
		}
		// The execution the receipt is signed for, not the one its line
		// names; a receipt whose signature fails is VerifyReceipt's to name.
		if payload, _, err := keys.Verify(token.TypeReceipt, compact); err == nil {
			var rc struct {
				ExecutionID string `json:"execution_id"`
			}
			if json.Unmarshal(payload, &rc) == nil {
				byExecution[rc.ExecutionID]++
			}
		}
	}
	broken := false
	recorded := 0
	for _, s := range slices.Sorted(maps.Keys(bySeq)) {
		d := bySeq[s]
		rd, _ := d.data["receipt_digest"].(string)
		if d.body.Kind != models.AuditExecutionOutcome || rd == "" {
			continue
		}
		recorded++
		if !held[rd] {
			id, _ := d.data["execution_id"].(string)
			r.fail(fmt.Sprintf("audit entry %d (line %d)", d.Seq, d.Line),
				"the outcome of execution %s records receipt %s, which the export does not hold", id, rd)
			broken = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byExecution)) {
		if n := byExecution[id]; n > 1 {
			r.fail("receipts", "the export holds %d receipts of execution %s", n, id)
			broken = true
		}
	}
	switch {
	case broken:
	case len(x.Receipts) == 0 && recorded == 0:
		r.ok("receipts", "the chain records none and the export holds none: the chain and its checkpoints alone were checked")
	default:
		r.ok("receipts", "the export holds each of the %d %s the chain records, once", recorded, plural(recorded, "receipt", "receipts"))
	}
	return r
}

// mandateTerms checks, for a write a standing mandate confirmed, that the
// receipt carries the terms its grantors approved (they hash to the terms
// digest) and that the write fits them: tool, agent, the grant taken under
// the strictest tier the terms cover, the write's tier among them, its
// target, and the terms on its arguments when the receipt carries them
// (models.MandateTerms.Admit, the rule the server applied). It returns the
// terms, nil when there are none to go on.
func mandateTerms(r *Report, rc models.SignedReceipt) *models.MandateTerms {
	m := rc.Mandate
	if m == nil {
		return nil
	}
	name := "terms of mandate " + m.ID
	if len(m.Terms) == 0 || string(m.Terms) == "null" {
		r.fail(name, "the receipt names the mandate without its terms: whether the write fits them cannot be checked")
		return nil
	}
	if got, err := models.Digest(m.Terms); err != nil || got != m.TermsDigest {
		r.fail(name, "the receipt's terms hash to %s, not to the terms digest %s the grantors approved", got, m.TermsDigest)
		return nil
	}
	var t models.MandateTerms
	if err := json.Unmarshal(m.Terms, &t); err != nil {
		r.fail(name, "the terms do not decode: %v", err)
		return nil
	}
	switch {
	case t.Tool != rc.Tool:
		r.fail(name, "they cover tool %s, the write is of %s", t.Tool, rc.Tool)
		return nil
	case !slices.Contains(t.Agents, rc.Agent):
		r.fail(name, "they cover agents %v, the write is agent %s's", t.Agents, rc.Agent)
		return nil
	case len(t.Tiers) == 0 || t.Tiers[0] != m.RiskTier:
		r.fail(name, "the grant was taken under the %s tier, the strictest tier the terms cover is %v", m.RiskTier, t.Tiers)
		return nil
	}
	w := models.MandateWrite{PolicyVersion: rc.PolicyVersion, Tier: rc.RiskTier}
	var unchecked []string
	switch {
	case rc.ResourceSetDigest == "":
		w.Resources = []string{rc.Resource}
	case len(rc.ResourceSet) > 0:
		// The digest check (digests) holds them to the set approved.
		w.Resources = rc.ResourceSet
	case t.ResourcePattern != "" || len(t.Resources) > 0:
		unchecked = append(unchecked, "the batch's targets (a receipt signed before receipts listed them binds them by digest only)")
	}
	if len(rc.Arguments) > 0 {
		w.Arguments = rc.Arguments
	} else if t.Money != nil || len(t.Enums) > 0 || len(t.Patterns) > 0 {
		unchecked = append(unchecked, "the terms on arguments (the receipt leaves the arguments out)")
	}
	amount, reason := t.Admit(w)
	if reason != "" {
		r.fail(name, "the write does not fit them: %s", reason)
		return nil
	}
	detail := fmt.Sprintf("they hash to %s; tool %s, agent %s, tier %s among %v", m.TermsDigest, t.Tool, rc.Agent, rc.RiskTier, t.Tiers)
	if t.Money != nil && w.Arguments != nil {
		detail += fmt.Sprintf(", %s %d %s within the per-call cap", t.Money.Field, amount, t.Money.Currency)
	}
	if len(unchecked) > 0 {
		detail += "; not checkable from the receipt: " + strings.Join(unchecked, ", ")
	}
	r.ok(name, "the write fits the terms: %s", detail)
	return &t
}

// mandateUse checks the write's token against the chain's record of the
// mandate: issued before the terms' expiry and before any revocation of
// the mandate, and, counting every token the mandate confirmed up to and
// including this one, within its use count and budget.
func mandateUse(r *Report, rc models.SignedReceipt, t *models.MandateTerms, bySeq map[int64]decoded) {
	m := rc.Mandate
	name := "use of mandate " + m.ID
	seqs := slices.Sorted(maps.Keys(bySeq))
	var uses, spent int64
	revoked := int64(0)
	for _, s := range seqs {
		d := bySeq[s]
		var data struct {
			MandateID string `json:"mandate_id"`
			JTI       string `json:"jti"`
			Amount    int64  `json:"amount"`
		}
		if json.Unmarshal(d.body.Data, &data) != nil || data.MandateID != m.ID {
			continue
		}
		switch d.body.Kind {
		case models.AuditMandateRevoked:
			if revoked == 0 {
				revoked = s
			}
		case models.AuditTokenIssued:
			uses++
			spent += data.Amount
			if data.JTI != rc.TokenID || d.body.ProposalID != rc.ProposalID {
				continue
			}
			at := time.UnixMilli(d.body.At)
			switch {
			case revoked != 0:
				r.fail(name, "the token was issued at entry %d, after the mandate was revoked at entry %d", s, revoked)
			case !at.Before(t.ExpiresAt):
				r.fail(name, "the token was issued at %s, the terms expired at %s", at.UTC().Format(time.RFC3339Nano), t.ExpiresAt.Format(time.RFC3339))
			case t.MaxUses > 0 && uses > t.MaxUses:
				r.fail(name, "this was use %d of a mandate for %d", uses, t.MaxUses)
			case t.Money != nil && t.Money.Budget > 0 && spent > t.Money.Budget:
				r.fail(name, "with this write the mandate spent %d %s of a budget of %d", spent, t.Money.Currency, t.Money.Budget)
			default:
				use := fmt.Sprintf("use %d", uses)
				if t.MaxUses > 0 {
					use += fmt.Sprintf(" of %d", t.MaxUses)
				}
				if t.Money != nil && t.Money.Budget > 0 {
					use += fmt.Sprintf(", %d of a budget of %d %s spent with it", spent, t.Money.Budget, t.Money.Currency)
				}
				r.ok(name, "%s; issued at entry %d, before the terms expired and while the mandate was not revoked", use, s)
			}
			return
		}
	}
	r.fail(name, "the chain holds no token.issued entry for token %s under the mandate", rc.TokenID)
}

func (x *Export) digests(r *Report, rc models.SignedReceipt) {
	d := rc.RequestedDigest
	switch {
	case d == "" || !strings.HasPrefix(d, models.DigestPrefix):
		r.fail("digests", "the receipt has no requested digest")
		return
	case rc.ApprovedDigest != d:
		r.fail("digests", "approved digest %q differs from requested %s", rc.ApprovedDigest, d)
		return
	case rc.ExecutedDigest != d:
		r.fail("digests", "executed digest %s differs from requested %s", rc.ExecutedDigest, d)
		return
	}
	for _, a := range rc.Approvers {
		if a.DigestSeen != d {
			r.fail("digests", "approver %s saw digest %s, not %s", a.UserID, a.DigestSeen, d)
			return
		}
		if a.EffectSeen != "" && a.EffectSeen != rc.EffectDigest {
			r.fail("digests", "approver %s was shown effect %s, the receipt's effect digest is %q", a.UserID, a.EffectSeen, rc.EffectDigest)
			return
		}
	}
	if m := rc.Mandate; m != nil {
		for _, g := range m.Grantors {
			if g.DigestSeen != m.TermsDigest {
				r.fail("digests", "grantor %s of mandate %s saw digest %s, not its terms digest %s", g.UserID, m.ID, g.DigestSeen, m.TermsDigest)
				return
			}
		}
	}
	if len(rc.Arguments) > 0 {
		got, err := models.Digest(rc.Arguments)
		if err != nil || got != d {
			r.fail("digests", "the receipt's arguments hash to %s, not %s", got, d)
			return
		}
	}
	if len(rc.ResourceSet) > 0 {
		got, err := models.DigestValue(rc.ResourceSet)
		if err != nil || got != rc.ResourceSetDigest {
			r.fail("digests", "the batch's targets hash to %s, not to the resource set digest %s", got, rc.ResourceSetDigest)
			return
		}
	}
	r.ok("digests", "requested = approved = executed = %s", d)
}

func (x *Export) approvals(r *Report, rc models.SignedReceipt, bySeq map[int64]decoded) {
	if m := rc.Mandate; m != nil {
		// No person approved this write: the mandate's grantors approved
		// its terms, once, under the tier the grant took.
		if len(rc.Approvers) > 0 {
			r.fail("approvals", "the receipt names both mandate %s and %d approvers", m.ID, len(rc.Approvers))
		}
		if len(m.Grantors) < max(m.Quorum, 1) {
			r.fail("mandate "+m.ID, "%d grantors, the %s tier it was granted under needs %d", len(m.Grantors), m.RiskTier, m.Quorum)
		}
		x.checkApprovers(r, m.Grantors, &models.Proposal{ID: m.ProposalID, ArgsDigest: m.TermsDigest},
			m.RiskTier, m.Confirmation, "grant by ", bySeq)
		return
	}
	if len(rc.Approvers) < max(rc.Quorum, 1) {
		r.fail("approvals", "%d approvers, the %s tier needs %d", len(rc.Approvers), rc.RiskTier, rc.Quorum)
	}
	x.checkApprovers(r, rc.Approvers, &models.Proposal{ID: rc.ProposalID, ArgsDigest: rc.RequestedDigest},
		rc.RiskTier, rc.Confirmation, "approval by ", bySeq)
}

// checkApprovers checks each approval of p (its id and digest) under a tier
// of the given confirmation: a click where the tier allows one, else a
// security-key assertion over p's transaction challenge by a key registered
// to the approver.
func (x *Export) checkApprovers(r *Report, approvers []models.ReceiptApprover, p *models.Proposal, tier string,
	confirmation models.Confirmation, prefix string, bySeq map[int64]decoded) {
	for _, a := range approvers {
		name := prefix + a.UserID
		if a.Method != models.MethodSecurityKey {
			if confirmation == models.ConfirmWebAuthn {
				r.fail(name, "the %s tier needs a security key; this approval was a %s click", tier, a.Method)
				continue
			}
			r.ok(name, "%s click on digest %s", a.Method, a.DigestSeen)
			continue
		}
		ename := "evidence of decision " + a.DecisionID
		raw, ok := x.Evidence[a.DecisionID]
		if !ok {
			r.fail(ename, "the export holds no evidence for this security-key approval")
			continue
		}
		if got := models.AuditHash([]byte(raw)); got != a.EvidenceDigest {
			r.fail(ename, "it hashes to %s, the receipt says %s: the evidence was altered", got, a.EvidenceDigest)
			continue
		}
		if err := stepup.VerifyEvidence(p, json.RawMessage(raw)); err != nil {
			r.fail(ename, "the WebAuthn assertion does not verify: %s", models.ErrorMessage(err))
			continue
		}
		ev, _ := stepup.ParseEvidence(json.RawMessage(raw))
		cred, ok := x.Credentials[ev.CredentialID]
		switch {
		case !ok:
			r.fail(ename, "credential %s is not among the export's registered credentials", ev.CredentialID)
			continue
		case cred.UserID != a.UserID:
			r.fail(ename, "credential %s is registered to %s, not to the approver %s", ev.CredentialID, cred.UserID, a.UserID)
			continue
		case cred.PublicKey != ev.PublicKey:
			r.fail(ename, "the assertion's public key is not the registered key of credential %s", ev.CredentialID)
			continue
		}
		if reg, found := registration(bySeq, ev.CredentialID); found {
			// The chain recorded the key when it was registered: the
			// strongest statement of whose key it is.
			if reg.UserID != a.UserID || reg.PublicKey != ev.PublicKey {
				r.fail(ename, "the chain registered credential %s to %s with another public key", ev.CredentialID, reg.UserID)
				continue
			}
		}
		r.ok(ename, "security key %q signed challenge %s (proposal, digest, nonce); user verified", cred.Name, ev.Challenge)
	}
}

// story checks that the chain tells the receipt's story, from the
// proposal's creation to this outcome, under a signed checkpoint.
func (x *Export) story(r *Report, rc models.SignedReceipt, compact string, bySeq map[int64]decoded, anchored int64, chainBroken bool) {
	var created, outcome int64
	var createdEntry, issuedEntry decoded
	issued, consumed := false, false
	decisions := map[string]decoded{}
	seqs := make([]int64, 0, len(bySeq))
	for s := range bySeq {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	str := func(d decoded, k string) string { v, _ := d.data[k].(string); return v }
	failedBefore := len(r.Failed())
	mandateOK := rc.Mandate == nil
	for _, s := range seqs {
		d := bySeq[s]
		if m := rc.Mandate; m != nil && d.body.ProposalID == m.ProposalID && d.body.ProposalID != rc.ProposalID {
			mandateOK = x.grantStory(r, m, d, bySeq) || mandateOK
			continue
		}
		if d.body.ProposalID != rc.ProposalID {
			continue
		}
		name := fmt.Sprintf("audit entry %d (line %d)", d.Seq, d.Line)
		switch d.body.Kind {
		case models.AuditProposalCreated:
			created, createdEntry = s, d
			// The targets too: a receipt re-signed with a leaked key cannot
			// name other targets (with a digest of its own) than were
			// proposed.
			if str(d, "args_digest") != rc.RequestedDigest || str(d, "request_key") != rc.RequestKey ||
				str(d, "tool") != rc.Tool || str(d, "policy_version") != rc.PolicyVersion ||
				str(d, "resource") != rc.Resource || str(d, "resource_set_digest") != rc.ResourceSetDigest {
				r.fail(name, "the proposal's creation records other arguments, request key, tool, policy or targets than the receipt")
			}
		case models.AuditDecisionApproved:
			decisions[str(d, "decision_id")] = d
		case models.AuditTokenIssued:
			if str(d, "jti") != rc.TokenID {
				continue
			}
			issued, issuedEntry = true, d
			want := ""
			if rc.Mandate != nil {
				want = rc.Mandate.ID
			}
			if got := str(d, "mandate_id"); got != want {
				r.fail(name, "the token was issued under mandate %q, the receipt names %q", got, want)
			}
			if got, ok := stringList(d, "approvers"); ok && !sameSet(got, approverIDs(rc.Approvers)) {
				r.fail(name, "the token was issued on the approvals of %v, the receipt names %v", got, approverIDs(rc.Approvers))
			}
		case models.AuditTokenConsumed:
			consumed = consumed || (str(d, "jti") == rc.TokenID && str(d, "execution_id") == rc.ExecutionID)
		case models.AuditExecutionOutcome:
			if str(d, "execution_id") != rc.ExecutionID || str(d, "status") != string(rc.Status) {
				continue
			}
			outcome = s
			if str(d, "result_digest") != rc.ResultDigest {
				r.fail(name, "the recorded result digest %s is not the receipt's %s", str(d, "result_digest"), rc.ResultDigest)
			}
			if rd := str(d, "receipt_digest"); rd != "" && rd != models.AuditHash([]byte(compact)) {
				r.fail(name, "the chain records another receipt for this execution")
			}
		}
	}
	switch {
	case created == 0:
		r.fail("proposal story", "the creation of proposal %s is not in the export", rc.ProposalID)
	case !issued:
		r.fail("proposal story", "no token.issued entry for token %s", rc.TokenID)
	case !consumed:
		r.fail("proposal story", "no token.consumed entry for token %s and execution %s", rc.TokenID, rc.ExecutionID)
	case outcome == 0:
		r.fail("proposal story", "no execution.outcome entry with status %s for execution %s", rc.Status, rc.ExecutionID)
	case !mandateOK:
		r.fail("mandate "+rc.Mandate.ID, "the export holds no mandate.granted entry for it from proposal %s", rc.Mandate.ProposalID)
	}
	for _, a := range rc.Approvers {
		d, ok := decisions[a.DecisionID]
		if !ok {
			r.fail("proposal story", "the approval %s by %s is not in the chain", a.DecisionID, a.UserID)
			continue
		}
		if str(d, "user_id") != a.UserID || str(d, "digest_seen") != a.DigestSeen || str(d, "method") != a.Method ||
			str(d, "evidence_digest") != a.EvidenceDigest || str(d, "effect_seen") != a.EffectSeen {
			r.fail(fmt.Sprintf("audit entry %d (line %d)", d.Seq, d.Line),
				"the recorded approval (user, digest shown, method, evidence) differs from the receipt's")
		}
	}
	if len(decisions) != len(rc.Approvers) {
		r.fail("proposal story", "the chain records %d approvals, the receipt %d", len(decisions), len(rc.Approvers))
	}
	if rc.Mandate == nil && created != 0 && issued {
		ids := make([]string, len(rc.Approvers))
		for i, a := range rc.Approvers {
			ids[i] = a.UserID
		}
		groupsMet(r, "approver groups", createdEntry, issuedEntry, ids, rc.Quorum, bySeq)
	}
	if outcome == 0 {
		return
	}
	switch {
	case chainBroken && anchored < outcome:
		r.fail("anchor", "the exported chain is broken (see above), so no signed checkpoint anchors the outcome (entry %d)", outcome)
		return
	case anchored < outcome:
		r.fail("anchor", "no valid signed checkpoint covers the outcome (entry %d)", outcome)
		return
	case len(r.Failed()) > failedBefore || created == 0:
		// The story failed above: the anchor holds the outcome only.
		r.ok("anchor", "checkpoint %d covers the outcome (entry %d)", anchored, outcome)
		return
	}
	if m := rc.Mandate; m != nil {
		r.ok("proposal story", "entries %d to %d record creation, a token under mandate %s, execution and outcome, as the receipt says",
			created, outcome, m.ID)
	} else {
		r.ok("proposal story", "entries %d to %d record creation, %d %s, token, execution and outcome, as the receipt says",
			created, outcome, len(decisions), plural(len(decisions), "approval", "approvals"))
	}
	r.ok("anchor", "checkpoint %d covers the chain from creation to outcome", anchored)
}

// groupsMet checks a tier's approver groups from the chain: the
// requirement the proposal was created with (proposal.created's require)
// against who counted toward each group when the token was issued
// (token.issued's factors). Each factor must keep the group and count
// required, have that many approvers, all of them approvers of the receipt
// and none counted twice; and the receipt must have as many approvers as
// the quorum and the factors need together (models.Tier.Approvers). When
// the export holds the chain from its first entry, each counted approver
// must also be a member of the group by the chain's own membership entries
// (admin.group_changed) before the token was issued; otherwise the
// memberships are the server's statement at confirmation. A proposal
// created without groups, or before the chain recorded them, has nothing
// to check.
//
// A mandate's grant is checked the same way, its grantors in place of the
// approvers and its mandate.granted entry in place of token.issued.
func groupsMet(r *Report, element string, created, issued decoded, approverIDs []string, quorum int, bySeq map[int64]decoded) {
	type factor struct {
		Group     string   `json:"group"`
		Count     int      `json:"count"`
		Approvers []string `json:"approvers"`
	}
	read := func(d decoded, k string) ([]factor, bool) {
		raw, ok := d.data[k]
		if !ok {
			return nil, false
		}
		b, _ := json.Marshal(raw)
		var out []factor
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, true
		}
		return out, true
	}
	require, ok := read(created, "require")
	if !ok || len(require) == 0 {
		return
	}
	name := fmt.Sprintf("audit entry %d (line %d)", issued.Seq, issued.Line)
	counted, ok := read(issued, "factors")
	if !ok || len(counted) != len(require) {
		r.fail(name, "%s without the approver groups the proposal's tier required", issuedWhat(issued))
		return
	}
	approvers := map[string]bool{}
	for _, id := range approverIDs {
		approvers[id] = true
	}
	// The memberships the chain records before the token was issued.
	_, whole := bySeq[1]
	member := map[string]map[string]bool{}
	if whole {
		for seq := int64(1); seq < issued.Seq; seq++ {
			d, ok := bySeq[seq]
			if !ok || d.body.Kind != models.AuditGroupChanged {
				continue
			}
			g, _ := d.data["group"].(string)
			u, _ := d.data["user_id"].(string)
			if member[g] == nil {
				member[g] = map[string]bool{}
			}
			switch d.data["change"] {
			case "member_added":
				member[g][u] = true
			case "member_removed":
				delete(member[g], u)
			}
		}
	}
	seen := map[string]bool{}
	need := max(quorum, 1)
	var said []string
	for i, f := range counted {
		want := require[i]
		if f.Group != want.Group || f.Count != want.Count {
			r.fail(name, "%s under group %s ×%d, the proposal was created requiring group %s ×%d",
				issuedWhat(issued), f.Group, f.Count, want.Group, want.Count)
			return
		}
		if len(f.Approvers) < f.Count {
			r.fail(name, "%s with %d of the %d approvers group %s requires", issuedWhat(issued), len(f.Approvers), f.Count, f.Group)
			return
		}
		for _, u := range f.Approvers {
			if !approvers[u] || seen[u] {
				r.fail(name, "%s counts toward group %s but is not a distinct approver of the receipt", u, f.Group)
				return
			}
			if whole && !member[f.Group][u] {
				r.fail(name, "%s counts toward group %s, which the chain shows them outside of when %s", u, f.Group, issuedWhat(issued))
				return
			}
			seen[u] = true
		}
		said = append(said, fmt.Sprintf("%s %d of %d", f.Group, len(f.Approvers), f.Count))
	}
	sum := 0
	for _, f := range require {
		sum += f.Count
	}
	if need = max(need, sum); len(approverIDs) < need {
		r.fail(element, "%d %s, the quorum and the groups need %d", len(approverIDs), plural(len(approverIDs), "approver", "approvers"), need)
		return
	}
	how := "memberships as the chain records them"
	if !whole {
		how = "memberships as the server stated them (the export does not start at entry 1)"
	}
	r.ok(element, "%s, each approver counted once; %s", strings.Join(said, ", "), how)
}

// issuedWhat says what the entry holding a confirmation's factors records.
func issuedWhat(d decoded) string {
	if d.body.Kind == models.AuditMandateGranted {
		return "the mandate was granted"
	}
	return "the token was issued"
}

// grantStory checks one chain entry about the proposal that asked for
// mandate m and reports whether it is the grant of m agreeing with the
// receipt: the mandate id, terms digest, grantors and their decisions, each
// decision recorded with the digest, method and evidence the receipt says.
func (x *Export) grantStory(r *Report, m *models.ReceiptMandate, d decoded, bySeq map[int64]decoded) bool {
	if d.body.Kind != models.AuditMandateGranted {
		return false
	}
	name := fmt.Sprintf("audit entry %d (line %d)", d.Seq, d.Line)
	str := func(d decoded, k string) string { v, _ := d.data[k].(string); return v }
	if str(d, "mandate_id") != m.ID {
		return false
	}
	list := func(k string) []string {
		raw, _ := d.data[k].([]any)
		out := make([]string, 0, len(raw))
		for _, v := range raw {
			s, _ := v.(string)
			out = append(out, s)
		}
		return out
	}
	var users, decisions []string
	for _, g := range m.Grantors {
		users, decisions = append(users, g.UserID), append(decisions, g.DecisionID)
	}
	if str(d, "terms_digest") != m.TermsDigest || !slices.Equal(list("grantors"), users) || !slices.Equal(list("decisions"), decisions) {
		r.fail(name, "the grant of mandate %s records other terms, grantors or decisions than the receipt", m.ID)
		return true
	}
	recorded := map[string]decoded{}
	for _, e := range bySeq {
		if e.body.ProposalID == m.ProposalID && e.body.Kind == models.AuditDecisionApproved {
			recorded[str(e, "decision_id")] = e
		}
	}
	for _, g := range m.Grantors {
		e, ok := recorded[g.DecisionID]
		if !ok {
			r.fail("mandate "+m.ID, "the grantor's approval %s by %s is not in the chain", g.DecisionID, g.UserID)
			return true
		}
		if str(e, "user_id") != g.UserID || str(e, "digest_seen") != g.DigestSeen || str(e, "method") != g.Method ||
			str(e, "evidence_digest") != g.EvidenceDigest {
			r.fail(fmt.Sprintf("audit entry %d (line %d)", e.Seq, e.Line),
				"the recorded grant approval (user, digest shown, method, evidence) differs from the receipt's")
			return true
		}
	}
	for _, c := range bySeq {
		if c.body.Kind == models.AuditProposalCreated && c.body.ProposalID == m.ProposalID {
			ids := make([]string, len(m.Grantors))
			for i, g := range m.Grantors {
				ids[i] = g.UserID
			}
			groupsMet(r, "grantor groups of mandate "+m.ID, c, d, ids, m.Quorum, bySeq)
			break
		}
	}
	names := make([]string, 0, len(m.Grantors))
	for _, g := range m.Grantors {
		n := g.Name
		if n == "" {
			n = g.UserID
		}
		names = append(names, fmt.Sprintf("%s (%s)", n, g.Method))
	}
	r.ok("mandate "+m.ID, "granted at entry %d by %s on terms %s (%s tier); it confirmed this write, no person did",
		d.Seq, strings.Join(names, ", "), m.TermsDigest, m.RiskTier)
	return true
}

// registration finds the chain's record of a security key's registration.
func registration(bySeq map[int64]decoded, credentialID string) (Line, bool) {
	for _, d := range bySeq {
		if d.body.Kind != models.AuditKeyRegistered {
			continue
		}
		if id, _ := d.data["credential_id"].(string); id == credentialID {
			user, _ := d.data["user_id"].(string)
			pub, _ := d.data["public_key"].(string)
			return Line{UserID: user, PublicKey: pub, CredentialID: id}, true
		}
	}
	return Line{}, false
}

// stringList is the list of strings under k in d's data, and whether
// there is one.
func stringList(d decoded, k string) ([]string, bool) {
	raw, ok := d.data[k].([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(raw))
	for _, v := range raw {
		s, _ := v.(string)
		out = append(out, s)
	}
	return out, true
}

func approverIDs(as []models.ReceiptApprover) []string {
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.UserID
	}
	return ids
}

// sameSet reports whether a and b hold the same strings as often, in any
// order.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
