package store

import (
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// The audit events of the store's own changes, built here so that each
// change adds a single appendAudit call.

func proposalCreatedEvent(p *models.Proposal) models.AuditEvent {
	kind := models.AuditProposalCreated
	if p.Status == models.StatusRejected {
		kind = models.AuditProposalRejected
	}
	data := map[string]any{"tool": p.Tool, "args_digest": p.ArgsDigest, "request_key": p.RequestKey,
		"resource": p.Resource, "resource_set_digest": p.ResourceSetDigest, "risk_tier": p.Tier.Name,
		"confirmation": p.Tier.Confirmation, "quorum": p.Tier.Quorum, "policy_version": p.PolicyVersion,
		"state_version": p.StateVersion, "agent": p.AgentID, "expires_at": ms(p.ExpiresAt),
		"effect_digest": p.EffectDigest}
	if len(p.Problems) > 0 {
		data["problems"] = p.Problems
	}
	if len(p.Tier.Require) > 0 {
		// What the tier requires of approver groups, as the proposal
		// was created: the chain then shows a requirement weakened later.
		require := make([]map[string]any, len(p.Tier.Require))
		for i, f := range p.Tier.Require {
			require[i] = map[string]any{"group": f.Group, "count": f.Count}
		}
		data["require"] = require
	}
	return models.AuditEvent{Kind: kind, Actor: p.AgentID, ProposalID: p.ID, Data: data}
}

// decisionEvent records a decision as evidence: who, how the session was
// authenticated, the exact digest shown and, for a security-key approval,
// the digest of the stored assertion.
func decisionEvent(d models.Decision) models.AuditEvent {
	kind := models.AuditDecisionApproved
	if d.Kind == models.DecisionDecline {
		kind = models.AuditDecisionDeclined
	}
	amr := d.AMR
	if amr == nil {
		amr = []string{}
	}
	return models.AuditEvent{Kind: kind, Actor: d.UserID, ProposalID: d.ProposalID, Data: map[string]any{
		"decision_id": d.ID, "user_id": d.UserID, "decision": d.Kind, "digest_seen": d.DigestSeen, "amr": amr,
		"method": models.ApprovalMethod(d.AMR, d.Evidence), "reason": d.Reason,
		"evidence_digest": models.EvidenceDigest(d.Evidence), "effect_seen": d.EffectSeen}}
}

func tokenIssuedEvent(p *models.Proposal, tok models.Token) models.AuditEvent {
	approvers := []string{}
	for _, d := range p.Approvals() {
		approvers = append(approvers, d.UserID)
	}
	data := map[string]any{"jti": tok.JTI, "kid": tok.KeyID, "agent": tok.AgentID, "args_digest": p.ArgsDigest,
		"approvers": approvers, "expires_at": ms(tok.ExpiresAt)}
	addFactors(data, p)
	return models.AuditEvent{Kind: models.AuditTokenIssued, Actor: models.ActorSystem, ProposalID: p.ID, Data: data}
}

// addFactors records in data, for a tier with approver groups, who
// counted toward each group as the confirming transaction read the
// memberships (models.ApprovalsMet): the offline verifiers check it.
func addFactors(data map[string]any, p *models.Proposal) {
	if len(p.Tier.Require) == 0 {
		return
	}
	factors := make([]map[string]any, len(p.Progress))
	for i, f := range p.Progress {
		counted := f.Approvers
		if counted == nil {
			counted = []string{}
		}
		factors[i] = map[string]any{"group": f.Group, "count": f.Count, "approvers": counted}
	}
	data["factors"] = factors
}

func proposalEvent(kind, actor, proposalID string, data map[string]any) models.AuditEvent {
	if data == nil {
		data = map[string]any{}
	}
	return models.AuditEvent{Kind: kind, Actor: actor, ProposalID: proposalID, Data: data}
}

func executionEvent(kind, actor string, row executionRow, extra map[string]any) models.AuditEvent {
	data := map[string]any{"execution_id": row.ID, "jti": row.TokenJTI, "request_key": row.RequestKey,
		"args_digest": row.ArgsDigest, "status": row.Status, "attempt": row.Attempts}
	for k, v := range extra {
		data[k] = v
	}
	return models.AuditEvent{Kind: kind, Actor: actor, ProposalID: row.ProposalID, Data: data}
}

// outcomeEvent records a recorded outcome, with the digests of the
// business system's result and of the signed receipt, when there is one.
func outcomeEvent(row executionRow) models.AuditEvent {
	extra := map[string]any{"provider_ref": row.ProviderRef, "error_code": row.ErrorCode, "result_digest": "", "receipt_digest": ""}
	if row.Result != "" {
		if d, err := models.Digest([]byte(row.Result)); err == nil {
			extra["result_digest"] = d
		}
	}
	if row.Receipt != "" {
		extra["receipt_digest"] = models.AuditHash([]byte(row.Receipt))
	}
	return executionEvent(models.AuditExecutionOutcome, models.ActorSystem, row, extra)
}

func adminEvent(kind, actor string, data map[string]any) models.AuditEvent {
	if actor == "" {
		actor = models.ActorSystem
	}
	return models.AuditEvent{Kind: kind, Actor: actor, Data: data}
}

// pendingAudit collects events of a transaction that changes several rows,
// to append them all at its end (see appendAudit).
type pendingAudit []pendingEvent

type pendingEvent struct {
	tenantID string
	ev       models.AuditEvent
}

func (p *pendingAudit) add(tenantID string, ev models.AuditEvent) {
	*p = append(*p, pendingEvent{tenantID, ev})
}

// flush appends the events at the end of the transaction, each tenant's in
// the order they were added, tenant after tenant in the order of their ids:
// on PostgreSQL each tenant's chain is a lock (appendAudit), and transactions
// that take several must take them in one order.
func (p pendingAudit) flush(tx *gorm.DB, at time.Time) error {
	p = slices.Clone(p)
	slices.SortStableFunc(p, func(a, b pendingEvent) int { return strings.Compare(a.tenantID, b.tenantID) })
	for i := 0; i < len(p); {
		j := i
		var run []models.AuditEvent
		for ; j < len(p) && p[j].tenantID == p[i].tenantID; j++ {
			run = append(run, p[j].ev)
		}
		if err := appendAudit(tx, p[i].tenantID, at, run...); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func userData(r userRow) map[string]any {
	return map[string]any{"user_id": r.ID, "name": r.Name, "role": r.Role}
}

func agentData(r agentRow) map[string]any {
	owner := ""
	if r.OwnerUserID != nil {
		owner = *r.OwnerUserID
	}
	return map[string]any{"agent_id": r.ID, "name": r.Name, "owner_user_id": owner}
}

// userChange names what an administrator changed; a password hash itself
// never enters the log.
func userChange(userID string, set map[string]any) map[string]any {
	data := map[string]any{"user_id": userID}
	for k, v := range set {
		if k == "password_hash" {
			data["password_reset"] = true
			continue
		}
		data[k] = v
	}
	return data
}
