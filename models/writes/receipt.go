package writes

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
	"github.com/countersign/countersign/models/token"
)

// signReceipt signs the receipt of execution e of proposal p.
func (s *Service) signReceipt(ctx context.Context, p *models.Proposal, e models.Execution) (string, error) {
	opt, err := s.receiptOptions(ctx, p)
	if err != nil {
		return "", err
	}
	return s.signReceiptWith(ctx, p, e, opt)
}

// receiptOptions reads what the receipts of p's executions name beyond p:
// the standing mandate that confirmed it, if any.
func (s *Service) receiptOptions(ctx context.Context, p *models.Proposal) (models.ReceiptOptions, error) {
	// p carries its decisions, which name the approvers: GetProposal and
	// Redeem (execute's read) both load them, so nothing is read again
	// on the execute's path.
	if p.MandateID == "" || p.Kind != "" {
		return s.receiptOptionsOf(p, nil, nil), nil
	}
	// A standing mandate confirmed the write: the receipt names it and its
	// grantors' approvals of its terms.
	m, err := s.store.GetMandate(ctx, p.TenantID, p.MandateID)
	if err != nil {
		return models.ReceiptOptions{}, err
	}
	grant, err := s.store.GetProposal(ctx, p.TenantID, m.ProposalID)
	if err != nil {
		return models.ReceiptOptions{}, err
	}
	return s.receiptOptionsOf(p, &m, grant), nil
}

// receiptOptionsOf is receiptOptions with the mandate that confirmed p and
// the proposal that granted it already read (both nil when people did).
func (s *Service) receiptOptionsOf(p *models.Proposal, m *models.Mandate, grant *models.Proposal) models.ReceiptOptions {
	digestOnly := false
	if t, ok := s.reg.Tool(p.Tool); ok {
		digestOnly = t.ReceiptDigestOnly
	}
	opt := models.ReceiptOptions{Issuer: s.tokens.Issuer(), DigestOnly: digestOnly}
	if m != nil {
		opt.Mandate = models.NewReceiptMandate(*m, grant)
	}
	return opt
}

// signReceiptWith signs the receipt of execution e of proposal p with the
// options receiptOptions read; it reads nothing from the database.
func (s *Service) signReceiptWith(ctx context.Context, p *models.Proposal, e models.Execution, opt models.ReceiptOptions) (string, error) {
	r, err := models.NewSignedReceipt(p, e, opt)
	if err != nil {
		return "", err
	}
	compact, _, _, err := s.tokens.SignStruct(ctx, token.TypeReceipt, r)
	return compact, err
}

// settledAs is e as FinishExecution will store it with outcome o at now.
func settledAs(e models.Execution, o store.Outcome, now time.Time) models.Execution {
	e.Status, e.ErrorCode, e.ErrorMessage, e.UpdatedAt = o.Status, o.ErrorCode, o.ErrorMessage, now
	if o.ProviderRef != "" {
		e.ProviderRef = o.ProviderRef
	}
	if o.Result != nil {
		e.Result = o.Result
	}
	e.CompletedAt = &now
	return e
}

// Receipt returns the signed receipt (a compact JWS of type
// countersign-receipt+jwt) of a settled execution of the tenant, and its
// claims. An execution settled before receipts existed gets one now, once.
//
// Errors: ENotFound (unknown or another tenant's execution), EInvalidState
// (not settled yet), EUnavailable.
func (s *Service) Receipt(ctx context.Context, tenantID, executionID string) (string, models.SignedReceipt, error) {
	return s.receipt(ctx, tenantID, executionID, func(p *models.Proposal) bool { return true })
}

// AgentReceipt is Receipt for an agent: the receipt of its own write, or
// of any write of its tenant with tenant-wide read (Agent.MayRead). A
// receipt names the write's arguments, so another agent's is as unknown
// to it as that agent's proposal (ENotFound).
func (s *Service) AgentReceipt(ctx context.Context, agent models.Agent, executionID string) (string, models.SignedReceipt, error) {
	return s.receipt(ctx, agent.TenantID, executionID, agent.MayRead)
}

// receipt is Receipt for a reader who may see the write of proposal p
// when may(p) holds; p carries the tenant and the requesting agent at
// least.
func (s *Service) receipt(ctx context.Context, tenantID, executionID string, may func(p *models.Proposal) bool) (string, models.SignedReceipt, error) {
	var claims models.SignedReceipt
	unknown := models.Errorf(models.ENotFound, "no execution %q", executionID)
	e, err := s.store.Execution(ctx, tenantID, executionID)
	if err != nil {
		return "", claims, err
	}
	if e.ReceiptJWS == "" {
		p, err := s.store.GetProposal(ctx, tenantID, e.ProposalID)
		if err != nil {
			return "", claims, err
		}
		if !may(p) {
			return "", claims, unknown
		}
		if !e.Settled() {
			return "", claims, models.Errorf(models.EInvalidState, "execution %s is %s: a receipt is signed once it settles", e.ID, e.Status)
		}
		compact, err := s.signReceipt(ctx, p, e)
		if err != nil {
			return "", claims, err
		}
		if _, err := s.store.SetReceipt(ctx, tenantID, e.ID, compact); err != nil {
			return "", claims, err
		}
		if e, err = s.store.Execution(ctx, tenantID, executionID); err != nil {
			return "", claims, err
		}
	}
	payload, _, err := s.tokens.VerifyDocument(ctx, token.TypeReceipt, e.ReceiptJWS)
	if err != nil {
		return "", claims, models.Wrap(models.EInternal, err, "the stored receipt does not verify")
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", claims, models.Wrap(models.EInternal, err, "the stored receipt does not decode")
	}
	if !may(&models.Proposal{ID: claims.ProposalID, TenantID: e.TenantID, AgentID: claims.Agent}) {
		return "", models.SignedReceipt{}, unknown
	}
	if !e.Settled() {
		return "", models.SignedReceipt{}, models.Errorf(models.EInvalidState, "execution %s is %s: a receipt is signed once it settles", e.ID, e.Status)
	}
	return e.ReceiptJWS, claims, nil
}

// Checkpoint signs a checkpoint at the head of every audit chain that grew
// since its last one and returns how many it signed.
func (s *Service) Checkpoint(ctx context.Context) (int, error) {
	return s.checkpoints.CheckpointAll(ctx, s.clock.Now())
}

// AuditEntries returns up to limit entries of the tenant's audit chain
// after seq, and the newest signed checkpoint (ok=false if none yet).
func (s *Service) AuditEntries(ctx context.Context, tenantID string, after int64, limit int) ([]models.AuditEntry, models.Checkpoint, bool, error) {
	entries, err := s.store.AuditEntries(ctx, tenantID, after, limit)
	if err != nil {
		return nil, models.Checkpoint{}, false, err
	}
	cp, ok, err := s.store.LatestCheckpoint(ctx, tenantID)
	return entries, cp, ok, err
}

// ProposalAudit returns the audit entries about one proposal of the tenant.
func (s *Service) ProposalAudit(ctx context.Context, tenantID, proposalID string) ([]models.AuditEntry, error) {
	return s.store.ProposalAudit(ctx, tenantID, proposalID)
}

// AuthenticateAuditReader returns the audit reader an audit key ("csa_…")
// belongs to, or EUnauthenticated.
func (s *Service) AuthenticateAuditReader(ctx context.Context, key string) (models.AuditReader, error) {
	if !strings.HasPrefix(key, AuditKeyPrefix) || len(key) > 200 {
		return models.AuditReader{}, models.Errorf(models.EUnauthenticated, "unknown or revoked audit key")
	}
	return s.store.AuditReaderByKeyHash(ctx, secret.HashAPIKey(key))
}

// AuditKeyPrefix starts every audit reader key.
const AuditKeyPrefix = "csa_"
