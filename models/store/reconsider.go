package store

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type reconsiderRow struct {
	ProposalID    string `gorm:"primaryKey"`
	TenantID      string
	QueuedAt      int64
	Attempts      int
	NextAttemptAt int64
}

func (reconsiderRow) TableName() string { return "reconsiderations" }

func (r reconsiderRow) model() Reconsideration {
	return Reconsideration{TenantID: r.TenantID, ProposalID: r.ProposalID, Attempts: r.Attempts, Next: fromMS(r.NextAttemptAt)}
}

// Reconsideration is a waiting proposal whose approvals a change of group
// membership made meet what its tier requires: it is to be confirmed once
// the business state is checked (see Reconsider).
type Reconsideration struct {
	TenantID   string
	ProposalID string
	Attempts   int       // how many times it was put off before
	Next       time.Time // when the next attempt is due
}

// GroupChange is what a change of group membership did to the proposals
// waiting for a decision.
type GroupChange struct {
	// Changed are the waiting proposals the member had approved that count
	// on the group: their progress moved, so each has a new revision and a
	// proposal.approvals_changed event.
	Changed []string
	// Queued are those of Changed (when a member was added) whose
	// approvals now meet what their tier requires.
	Queued []Reconsideration
}

// regroup applies a change of userID's membership of group to the waiting
// proposals they approved that count on the group (see GroupChange),
// inside the transaction that changed it.
func (s *Store) regroup(tx *gorm.DB, tenantID, group, userID, change string, added bool, now time.Time) (GroupChange, error) {
	var ids []string
	err := tx.Raw(`SELECT DISTINCT p.id FROM proposals p
		JOIN proposal_factors f ON f.proposal_id = p.id AND f.group_name = ?
		JOIN decisions d ON d.proposal_id = p.id AND d.user_id = ? AND d.kind = ? AND d.voided_at IS NULL
		WHERE p.tenant_id = ? AND p.status = ? AND p.expires_at > ? ORDER BY p.id`,
		group, userID, string(models.DecisionApprove), tenantID, string(models.StatusAwaitingConfirmation), ms(now)).
		Scan(&ids).Error
	if err != nil {
		return GroupChange{}, err
	}
	var out GroupChange
	for _, id := range ids {
		res := tx.Model(&proposalRow{}).
			Where("tenant_id = ? AND id = ? AND status = ?", tenantID, id, string(models.StatusAwaitingConfirmation)).
			Updates(map[string]any{"revision": gorm.Expr("revision + 1"), "updated_at": ms(now)})
		if res.Error != nil {
			return GroupChange{}, res.Error
		}
		if res.RowsAffected == 0 {
			continue
		}
		if err := s.recordEvent(tx, tenantID, id, models.EventApprovalsChanged, now,
			map[string]any{"group": group, "change": change, "user_id": userID}); err != nil {
			return GroupChange{}, err
		}
		out.Changed = append(out.Changed, id)
		if !added {
			continue
		}
		met, err := approvalsMet(tx, tenantID, id)
		if err != nil {
			return GroupChange{}, err
		}
		if !met {
			continue
		}
		queued, err := insertOnce(tx, &reconsiderRow{ProposalID: id, TenantID: tenantID, QueuedAt: ms(now), NextAttemptAt: ms(now)})
		if err != nil {
			return GroupChange{}, err
		}
		if queued {
			out.Queued = append(out.Queued, Reconsideration{TenantID: tenantID, ProposalID: id, Next: now})
		}
	}
	return out, nil
}

// approvalsMet applies models.ApprovalsMet to the proposal as it stands in
// tx, with the memberships as they stand there.
func approvalsMet(tx *gorm.DB, tenantID, id string) (bool, error) {
	p, err := loadProposal(tx, tenantID, id)
	if err != nil {
		return false, err
	}
	groups, err := approverGroups(tx, tenantID, p)
	if err != nil {
		return false, err
	}
	met, _ := models.ApprovalsMet(p, groups)
	return met, nil
}

// DueReconsiderations returns up to limit queued proposals whose next
// attempt is due, oldest first.
func (s *Store) DueReconsiderations(ctx context.Context, now time.Time, limit int) ([]Reconsideration, error) {
	var rows []reconsiderRow
	err := s.read.WithContext(ctx).Where("next_attempt_at <= ?", ms(now)).
		Order("next_attempt_at, proposal_id").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	out := make([]Reconsideration, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// QueuedReconsideration returns the proposal's place in the queue, and
// false when it is not queued.
func (s *Store) QueuedReconsideration(ctx context.Context, tenantID, proposalID string) (Reconsideration, bool, error) {
	var rows []reconsiderRow
	err := s.read.WithContext(ctx).Where("tenant_id = ? AND proposal_id = ?", tenantID, proposalID).Limit(1).Find(&rows).Error
	if err != nil || len(rows) == 0 {
		return Reconsideration{}, false, dbErr(err)
	}
	return rows[0].model(), true, nil
}

// PutOffReconsideration counts a failed attempt at a queued proposal (the
// business system could not be asked) and sets the next one at next.
func (s *Store) PutOffReconsideration(ctx context.Context, r Reconsideration, next time.Time) error {
	return dbErr(s.db.WithContext(ctx).Model(&reconsiderRow{}).
		Where("tenant_id = ? AND proposal_id = ?", r.TenantID, r.ProposalID).
		Updates(map[string]any{"attempts": gorm.Expr("attempts + 1"), "next_attempt_at": ms(next)}).Error)
}

// DropReconsideration takes a proposal off the queue without deciding it:
// its business state changed since it was previewed, so its approvals no
// longer confirm it.
func (s *Store) DropReconsideration(ctx context.Context, r Reconsideration) error {
	return dbErr(s.db.WithContext(ctx).Where("tenant_id = ? AND proposal_id = ?", r.TenantID, r.ProposalID).
		Delete(&reconsiderRow{}).Error)
}

// Reconsider takes a queued proposal off the queue and, in the same
// transaction, confirms it when it still waits and its approvals meet what
// its tier requires with the memberships as they then stand (models.Decide,
// as for a decision): it stores the token issue builds, or grants the
// mandate. The proposal's row is locked first, so a decision or another
// instance's Reconsider on it waits and then finds it decided. It returns
// the proposal as it stands after, and whether this call confirmed it; a
// proposal that was decided, expired or no longer meets its tier is
// returned unchanged. The business state is the caller's to check before.
// Errors: ENotFound, EUnavailable.
func (s *Store) Reconsider(ctx context.Context, r Reconsideration, now time.Time, issue IssueFunc) (*models.Proposal, bool, error) {
	var (
		out       *models.Proposal
		confirmed bool
	)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		// A no-op update: the row lock on PostgreSQL (the writer holds all on
		// SQLite), taken only while the proposal waits, and before the queue
		// row, in the order regroup takes them (proposal, then queue row),
		// so that a membership change and this never deadlock.
		res := tx.Model(&proposalRow{}).
			Where("tenant_id = ? AND id = ? AND status = ? AND expires_at > ?",
				r.TenantID, r.ProposalID, string(models.StatusAwaitingConfirmation), ms(now)).
			Update("status", string(models.StatusAwaitingConfirmation))
		if res.Error != nil {
			return res.Error
		}
		if err := tx.Where("tenant_id = ? AND proposal_id = ?", r.TenantID, r.ProposalID).Delete(&reconsiderRow{}).Error; err != nil {
			return err
		}
		p, err := loadProposal(tx, r.TenantID, r.ProposalID)
		if err != nil {
			return err
		}
		out = p
		if res.RowsAffected == 0 {
			return nil
		}
		groups, err := approverGroups(tx, r.TenantID, p)
		if err != nil {
			return err
		}
		if models.Decide(p, models.DecisionApprove, groups) != models.VerdictConfirmed {
			return nil
		}
		events := pendingAudit{}
		if err := s.confirmIn(tx, p, now, issue, &events); err != nil {
			return err
		}
		if out, err = loadProposal(tx, r.TenantID, r.ProposalID); err != nil {
			return err
		}
		confirmed = true
		return events.flush(tx, now)
	})
	if err != nil {
		return nil, false, err
	}
	return out, confirmed, nil
}
