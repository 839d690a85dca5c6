package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type decisionRow struct {
	ID         string `gorm:"primaryKey"`
	TenantID   string
	ProposalID string
	UserID     string
	Kind       string
	Reason     string
	DigestSeen string
	AMR        string `gorm:"column:amr"`
	Evidence   string
	CreatedAt  int64 `gorm:"autoCreateTime:false"`
}

func (decisionRow) TableName() string { return "decisions" }

type tokenRow struct {
	JTI         string `gorm:"column:jti;primaryKey"`
	TenantID    string
	ProposalID  string
	AgentID     string
	KID         string `gorm:"column:kid"`
	Status      string
	Compact     string
	IssuedAt    int64
	ExpiresAt   int64
	ConsumedAt  *int64
	ExecutionID *string
}

func (tokenRow) TableName() string { return "tokens" }

func (r tokenRow) model() models.Token {
	t := models.Token{JTI: r.JTI, TenantID: r.TenantID, ProposalID: r.ProposalID, AgentID: r.AgentID,
		KeyID: r.KID, Status: models.TokenStatus(r.Status), Compact: r.Compact,
		IssuedAt: fromMS(r.IssuedAt), ExpiresAt: fromMS(r.ExpiresAt), ConsumedAt: fromMSPtr(r.ConsumedAt)}
	if r.ExecutionID != nil {
		t.ExecutionID = *r.ExecutionID
	}
	return t
}

func loadDecisions(tx *gorm.DB, proposalID string) ([]models.Decision, error) {
	return queryDecisions(tx, []string{proposalID})
}

// loadDecisionsOf fills in the decisions of a page of proposals with one
// query.
func loadDecisionsOf(tx *gorm.DB, ps []*models.Proposal) error {
	ids := make([]string, len(ps))
	byID := make(map[string]*models.Proposal, len(ps))
	for i, p := range ps {
		ids[i], byID[p.ID] = p.ID, p
	}
	ds, err := queryDecisions(tx, ids)
	if err != nil {
		return err
	}
	for _, d := range ds {
		p := byID[d.ProposalID]
		p.Decisions = append(p.Decisions, d)
	}
	return nil
}

func queryDecisions(tx *gorm.DB, proposalIDs []string) ([]models.Decision, error) {
	var rows []struct {
		Row      decisionRow `gorm:"embedded"`
		UserName string
	}
	err := tx.Table("decisions AS d").Select("d.*, u.name AS user_name").
		Joins("JOIN users u ON u.id = d.user_id").
		Where("d.proposal_id IN ?", proposalIDs).Order("d.created_at, d.id").Find(&rows).Error
	if err != nil {
		return nil, err
	}
	out := make([]models.Decision, 0, len(rows))
	for _, r := range rows {
		row := r.Row
		d := models.Decision{ID: row.ID, ProposalID: row.ProposalID, UserID: row.UserID, UserName: r.UserName,
			Kind: models.DecisionKind(row.Kind), Reason: row.Reason, DigestSeen: row.DigestSeen,
			CreatedAt: fromMS(row.CreatedAt)}
		if row.Evidence != "" {
			d.Evidence = json.RawMessage(row.Evidence)
		}
		if err := json.Unmarshal([]byte(row.AMR), &d.AMR); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// IssueFunc builds the token for a proposal whose quorum is complete, given
// the proposal as it stands inside the deciding transaction (with every
// approval, the new one included). It must not touch the database.
type IssueFunc func(p *models.Proposal) (models.Token, error)

// RecordDecision stores one reviewer's decision on an awaiting proposal and,
// when it completes the quorum, confirms the proposal and stores the token
// that issue builds, all in one transaction. The proposal row is updated
// first, which serializes concurrent deciders on it (a row lock on
// PostgreSQL, the single writer on SQLite), so the approval count is exact.
//
// Errors: ENotFound, EProposalExpired, EInvalidState (no longer awaiting),
// EAlreadyDecided (this reviewer decided before: double submits record one
// decision), EUnavailable, EOutcomeUncertain (the commit failed and reading
// back could not show the decision stored).
func (s *Store) RecordDecision(ctx context.Context, d models.Decision, tenantID string, now time.Time, issue IssueFunc) (*models.Proposal, error) {
	amr, err := json.Marshal(d.AMR)
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot encode amr")
	}
	row := decisionRow{ID: d.ID, TenantID: tenantID, ProposalID: d.ProposalID, UserID: d.UserID,
		Kind: string(d.Kind), Reason: d.Reason, DigestSeen: d.DigestSeen, AMR: string(amr),
		Evidence: string(d.Evidence), CreatedAt: ms(now)}
	var out *models.Proposal
	err = s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&proposalRow{}).
			Where("tenant_id = ? AND id = ? AND status = ? AND expires_at > ?",
				tenantID, d.ProposalID, string(models.StatusAwaitingConfirmation), ms(now)).
			Updates(map[string]any{"revision": gorm.Expr("revision + 1"), "updated_at": ms(now)})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return explainNotAwaiting(tx, tenantID, d.ProposalID, "", now)
		}
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyDecided, "you already decided this proposal")
		}
		data := map[string]any{"decision": string(d.Kind), "reviewer_id": d.UserID}
		if d.Reason != "" {
			data["reason"] = d.Reason
		}
		if err := s.recordEvent(tx, tenantID, d.ProposalID, models.EventDecision, now, data); err != nil {
			return err
		}
		p, err := loadProposal(tx, tenantID, d.ProposalID)
		if err != nil {
			return err
		}
		switch {
		case d.Kind == models.DecisionDecline:
			ok, err := transition(tx, tenantID, p.ID, models.StatusDeclined, now, "")
			if err != nil {
				return err
			}
			if ok {
				if err := s.recordEvent(tx, tenantID, p.ID, models.StatusEvent(models.StatusDeclined), now,
					map[string]any{"reason": d.Reason}); err != nil {
					return err
				}
			}
		case p.QuorumMet():
			tok, err := issue(p)
			if err != nil {
				return err
			}
			ok, err := transition(tx, tenantID, p.ID, models.StatusConfirmed, now, "")
			if err != nil {
				return err
			}
			if !ok {
				return models.Errorf(models.EInvalidState, "the proposal changed while it was being confirmed")
			}
			if err := s.recordEvent(tx, tenantID, p.ID, models.StatusEvent(models.StatusConfirmed), now,
				map[string]any{"token_expires_at": tok.ExpiresAt.UTC().Format(time.RFC3339Nano)}); err != nil {
				return err
			}
			execID := (*string)(nil)
			if err := tx.Create(&tokenRow{JTI: tok.JTI, TenantID: tenantID, ProposalID: p.ID, AgentID: tok.AgentID,
				KID: tok.KeyID, Status: string(models.TokenIssued), Compact: tok.Compact,
				IssuedAt: ms(tok.IssuedAt), ExpiresAt: ms(tok.ExpiresAt), ExecutionID: execID}).Error; err != nil {
				return err
			}
		}
		out, err = loadProposal(tx, tenantID, d.ProposalID)
		return err
	})
	if commitUncertain(err) {
		// Read back: the decision row is there exactly when the commit went
		// through.
		var n int64
		rerr := s.db.WithContext(ctx).Model(&decisionRow{}).Where("id = ? AND tenant_id = ?", d.ID, tenantID).Count(&n).Error
		if rerr == nil && n == 1 {
			return s.GetProposal(ctx, tenantID, d.ProposalID)
		}
		return nil, models.Wrap(models.EOutcomeUncertain, errors.Join(err, rerr),
			"the database failed while recording the decision, which may or may not be recorded; decide again (already_decided means it was)")
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RevokeToken withdraws the confirmation of a confirmed proposal whose token
// has neither been redeemed nor expired at now: the token becomes revoked and the proposal revoked,
// in one transaction. EInvalidState when the token was consumed, expired or
// revoked already; ENotFound for unknown or foreign proposals.
func (s *Store) RevokeToken(ctx context.Context, tenantID, proposalID string, now time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&tokenRow{}).
			Where("tenant_id = ? AND proposal_id = ? AND status = ? AND expires_at > ?",
				tenantID, proposalID, string(models.TokenIssued), ms(now)).
			Update("status", string(models.TokenRevoked))
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var row proposalRow
			if err := tx.Select("status").Where("tenant_id = ? AND id = ?", tenantID, proposalID).Take(&row).Error; err != nil {
				return notFound(err, "no proposal %q", proposalID)
			}
			return models.Errorf(models.EInvalidState, "the proposal is %s: only a confirmed, unused token can be revoked", row.Status)
		}
		ok, err := transition(tx, tenantID, proposalID, models.StatusRevoked, now, "status = ?", string(models.StatusConfirmed))
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EInvalidState, "the proposal is no longer confirmed")
		}
		return s.recordEvent(tx, tenantID, proposalID, models.StatusEvent(models.StatusRevoked), now, nil)
	})
}

// TokenByJTI returns a token record of the tenant, or EUnknownToken.
func (s *Store) TokenByJTI(ctx context.Context, tenantID, jti string) (models.Token, error) {
	var row tokenRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND jti = ?", tenantID, jti).Take(&row).Error
	if err != nil {
		if models.IsCode(notFound(err, ""), models.ENotFound) {
			return models.Token{}, models.Errorf(models.EUnknownToken, "no such token")
		}
		return models.Token{}, dbErr(err)
	}
	return row.model(), nil
}
