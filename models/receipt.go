package models

import (
	"encoding/json"
	"time"
)

// SignedReceipt is the payload of an execution's receipt, a compact JWS
// (typ countersign-receipt+jwt) signed with the token keys. It states what
// was requested, who approved exactly what and how, and what ran with which
// result; anyone holding the JWKS can check it, and `countersign verify`
// checks it against the audit chain.
type SignedReceipt struct {
	Issuer      string `json:"iss"`
	Tenant      string `json:"tenant"`
	ExecutionID string `json:"execution_id"`
	ProposalID  string `json:"proposal_id"`
	Tool        string `json:"tool"`
	Resource    string `json:"resource,omitempty"`
	// ResourceSetDigest replaces Resource for a batch, and ResourceSet is
	// the batch's targets, sorted, which hash to it (DigestValue), so that
	// anyone can check them against a mandate's targets.
	ResourceSetDigest string   `json:"resource_set_digest,omitempty"`
	ResourceSet       []string `json:"resource_set,omitempty"`
	RequestKey        string   `json:"request_key"`
	// DownstreamKey is the idempotency key the business system received,
	// when it differs from RequestKey.
	DownstreamKey string `json:"downstream_key,omitempty"`
	Agent         string `json:"agent"`
	// The three digests of the same write: as proposed, as every approver
	// saw it, as executed. A valid receipt has all three equal.
	RequestedDigest string `json:"requested_digest"`
	ApprovedDigest  string `json:"approved_digest"`
	ExecutedDigest  string `json:"executed_digest"`
	// Arguments are the normalized arguments; absent when the tool keeps
	// them out of receipts (the digest still binds them).
	Arguments     json.RawMessage   `json:"arguments,omitempty"`
	RiskTier      string            `json:"risk_tier"`
	Confirmation  Confirmation      `json:"confirmation"`
	Quorum        int               `json:"quorum"`
	PolicyVersion string            `json:"policy_version"`
	Approvers     []ReceiptApprover `json:"approvers"`
	// Mandate names the standing mandate that confirmed the write in
	// place of approvers (Approvers is then empty, and ApprovedDigest is
	// the digest the mandate confirmed); nil for a write a person
	// confirmed.
	Mandate *ReceiptMandate `json:"mandate,omitempty"`
	// EffectDigest is the digest of the effect preview (Description) the
	// approvers were shown; "" when the adapter describes nothing.
	EffectDigest string `json:"effect_digest,omitempty"`
	TokenID      string `json:"jti"`
	Attempts     int    `json:"attempts"`
	Status       Status `json:"status"`
	ProviderRef  string `json:"provider_ref"`
	ResultDigest string `json:"result_digest"`
	ErrorCode    string `json:"error_code,omitempty"`
	ProposedAt   string `json:"proposed_at"`
	ExecutedAt   string `json:"executed_at"`
	CompletedAt  string `json:"completed_at"`
	IssuedAt     int64  `json:"iat"`
}

// ReceiptApprover is one approval in a receipt.
type ReceiptApprover struct {
	DecisionID string   `json:"decision_id"`
	UserID     string   `json:"user_id"`
	Name       string   `json:"name"`
	Method     string   `json:"method"` // MethodPassword, MethodPasskeySession or MethodSecurityKey
	AMR        []string `json:"amr"`
	DigestSeen string   `json:"digest_seen"`
	// EffectSeen is the effect digest the approver was shown, "" when the
	// write has no effect preview (writes.EffectNamed requires it otherwise).
	EffectSeen string `json:"effect_seen,omitempty"`
	// EvidenceDigest is AuditHash of the stored security-key evidence; ""
	// for a click approval.
	EvidenceDigest string `json:"evidence_digest,omitempty"`
	At             string `json:"at"`
}

// ReceiptMandate is the standing mandate named by a receipt: its id, the
// proposal that asked for it, its terms (canonical MandateTerms, what the
// grantors approved) and their digest, the tier it was granted under, and
// each grantor's approval of those terms, as for approvers of a write.
// With the terms in the receipt, a verifier checks offline that the write
// fits them (MandateTerms.Admit), not only that the mandate exists.
type ReceiptMandate struct {
	ID           string            `json:"id"`
	ProposalID   string            `json:"proposal_id"`
	Terms        json.RawMessage   `json:"terms"`
	TermsDigest  string            `json:"terms_digest"`
	RiskTier     string            `json:"risk_tier"`
	Confirmation Confirmation      `json:"confirmation"`
	Quorum       int               `json:"quorum"`
	GrantedAt    string            `json:"granted_at"`
	Grantors     []ReceiptApprover `json:"grantors"`
}

// NewReceiptMandate describes mandate m, granted by the approvals of its
// proposal grant, for a receipt.
func NewReceiptMandate(m Mandate, grant *Proposal) *ReceiptMandate {
	return &ReceiptMandate{ID: m.ID, ProposalID: grant.ID, Terms: grant.Arguments, TermsDigest: m.TermsDigest, RiskTier: grant.Tier.Name,
		Confirmation: grant.Tier.Confirmation, Quorum: grant.Tier.Quorum, GrantedAt: stamp(m.GrantedAt),
		Grantors: receiptApprovers(grant)}
}

// ReceiptOptions shape a receipt.
type ReceiptOptions struct {
	Issuer string
	// DigestOnly leaves the arguments out (the tool's setting).
	DigestOnly bool
	// Mandate is the mandate that confirmed the write, when one did.
	Mandate *ReceiptMandate
}

// NewSignedReceipt builds the receipt payload of a settled execution of p.
// It uses only stored facts, so building it twice gives the same payload.
func NewSignedReceipt(p *Proposal, e Execution, opt ReceiptOptions) (SignedReceipt, error) {
	r := SignedReceipt{
		Issuer: opt.Issuer, Tenant: p.TenantID, ExecutionID: e.ID, ProposalID: p.ID, Tool: p.Tool,
		Resource: p.Resource, ResourceSetDigest: p.ResourceSetDigest, ResourceSet: p.ResourceSet, RequestKey: e.RequestKey,
		Agent: p.AgentID, RequestedDigest: p.ArgsDigest, ExecutedDigest: e.ArgsDigest,
		RiskTier: p.Tier.Name, Confirmation: p.Tier.Confirmation, Quorum: p.Tier.Quorum,
		PolicyVersion: p.PolicyVersion, TokenID: e.TokenJTI, Attempts: e.Attempts, Status: e.Status,
		ProviderRef: e.ProviderRef, ErrorCode: e.ErrorCode,
		ProposedAt: stamp(p.CreatedAt), ExecutedAt: stamp(e.CreatedAt), Approvers: receiptApprovers(p),
		EffectDigest: p.EffectDigest,
	}
	if !opt.DigestOnly {
		r.Arguments = p.Arguments
	}
	if len(e.Result) > 0 {
		d, err := Digest(e.Result)
		if err != nil {
			return r, Wrap(EInternal, err, "the result cannot be digested")
		}
		r.ResultDigest = d
	}
	if e.CompletedAt != nil {
		r.CompletedAt = stamp(*e.CompletedAt)
		r.IssuedAt = e.CompletedAt.Unix()
	} else {
		r.IssuedAt = e.UpdatedAt.Unix()
	}
	if p.MandateID != "" {
		if opt.Mandate == nil || opt.Mandate.ID != p.MandateID {
			return r, Errorf(EInternal, "the receipt of a write confirmed by mandate %s needs that mandate", p.MandateID)
		}
		// No person saw this write: the mandate confirmed its digest, and
		// the token binds it.
		r.Mandate, r.ApprovedDigest = opt.Mandate, p.ArgsDigest
		return r, nil
	}
	approved := ""
	for i, a := range r.Approvers {
		switch {
		case i == 0:
			approved = a.DigestSeen
		case a.DigestSeen != approved:
			approved = "" // approvers saw different digests: no single approved digest
		}
	}
	r.ApprovedDigest = approved
	return r, nil
}

func receiptApprovers(p *Proposal) []ReceiptApprover {
	out := []ReceiptApprover{}
	for _, d := range p.Approvals() {
		out = append(out, ReceiptApprover{DecisionID: d.ID, UserID: d.UserID, Name: d.UserName,
			Method: ApprovalMethod(d.AMR, d.Evidence), AMR: d.AMR, DigestSeen: d.DigestSeen, EffectSeen: d.EffectSeen,
			EvidenceDigest: EvidenceDigest(d.Evidence), At: stamp(d.CreatedAt)})
	}
	return out
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
