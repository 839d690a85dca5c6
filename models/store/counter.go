package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type counterRow struct {
	RevisedID      string `gorm:"primaryKey"`
	OriginalID     string
	TenantID       string
	EditorID       string
	Reason         string
	Changes        string
	Version        int
	RootRequestKey string
	CreatedAt      int64 `gorm:"autoCreateTime:false"`
}

func (counterRow) TableName() string { return "counter_proposals" }

func (r counterRow) model(editorName string) (*models.Counter, error) {
	c := &models.Counter{OriginalID: r.OriginalID, RevisedID: r.RevisedID, EditorID: r.EditorID, EditorName: editorName,
		Reason: r.Reason, Version: r.Version, RootRequestKey: r.RootRequestKey, CreatedAt: fromMS(r.CreatedAt)}
	if err := json.Unmarshal([]byte(r.Changes), &c.Changes); err != nil {
		return nil, fmt.Errorf("counter-proposal %s changes: %w", r.RevisedID, err)
	}
	return c, nil
}

// SupersedeProposal records a reviewer's edit in one transaction: the
// original proposal moves from awaiting_confirmation to superseded by a
// conditional UPDATE that also requires it unexpired, of revised's agent,
// and still at the digest the editor saw (digestSeen); revised is stored
// as the new version awaiting confirmation; and c links the two. A
// concurrent approval, decline, cancel or second edit of the original
// changes the same row first or finds it superseded: exactly one wins, and
// the original's token can never be issued once it is superseded.
//
// The editor's row is locked and re-checked as in RecordDecision.
//
// Errors: ENotFound, EForbidden (editor disabled), EProposalExpired,
// EInvalidState (no longer awaiting), EArgsMismatch (the editor saw other
// arguments), EIdempotencyKeyReuse (the agent already used revised's
// request key),
// EUnavailable, EOutcomeUncertain.
func (s *Store) SupersedeProposal(ctx context.Context, originalID, digestSeen string, revised *models.Proposal, c models.Counter, now time.Time) (*models.Proposal, error) {
	row, err := proposalToRow(revised)
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot encode proposal")
	}
	changes, err := json.Marshal(c.Changes)
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot encode changes")
	}
	tenantID := revised.TenantID
	link := counterRow{RevisedID: revised.ID, OriginalID: originalID, TenantID: tenantID, EditorID: c.EditorID,
		Reason: c.Reason, Changes: string(changes), Version: c.Version, RootRequestKey: c.RootRequestKey, CreatedAt: ms(now)}
	var out *models.Proposal
	err = s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := lockActiveUser(tx, tenantID, c.EditorID); err != nil {
			return err
		}
		ok, err := transition(tx, tenantID, originalID, models.StatusSuperseded, now,
			"status = ? AND expires_at > ? AND args_digest = ? AND agent_id = ?",
			string(models.StatusAwaitingConfirmation), ms(now), digestSeen, revised.AgentID)
		if err != nil {
			return err
		}
		if !ok {
			return explainNotSuperseded(tx, tenantID, originalID, digestSeen, now)
		}
		inserted, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !inserted {
			return models.Errorf(models.EIdempotencyKeyReuse,
				"the agent already used request key %q, which this edit's version would take; the edit was not made", revised.RequestKey)
		}
		if err := tx.Create(&link).Error; err != nil {
			return err
		}
		if err := insertFactors(tx, revised); err != nil {
			return err
		}
		if err := s.recordEvent(tx, tenantID, originalID, models.StatusEvent(models.StatusSuperseded), now,
			map[string]any{"superseded_by": revised.ID, "editor_id": c.EditorID, "reason": c.Reason}); err != nil {
			return err
		}
		data := map[string]any{"tool": revised.Tool, "risk_tier": revised.Tier.Name, "supersedes": originalID,
			"expires_at": models.FormatTime(revised.ExpiresAt)}
		if err := s.recordEvent(tx, tenantID, revised.ID, models.EventCreated, now, data); err != nil {
			return err
		}
		if err := s.recordEvent(tx, tenantID, revised.ID, models.StatusEvent(revised.Status), now, data); err != nil {
			return err
		}
		created := proposalCreatedEvent(revised)
		created.Actor = c.EditorID
		if data, ok := created.Data.(map[string]any); ok {
			data["supersedes"] = originalID
		}
		if err := appendAudit(tx, tenantID, now,
			proposalEvent(models.AuditProposalSuperseded, c.EditorID, originalID,
				map[string]any{"superseded_by": revised.ID, "reason": c.Reason, "changes": c.Changes}),
			created); err != nil {
			return err
		}
		out, err = loadProposal(tx, tenantID, revised.ID)
		return err
	})
	if commitUncertain(err) {
		var n int64
		rerr := s.db.WithContext(ctx).Model(&counterRow{}).Where("revised_id = ? AND tenant_id = ?", revised.ID, tenantID).Count(&n).Error
		if rerr == nil && n == 1 {
			return s.GetProposal(ctx, tenantID, revised.ID)
		}
		return nil, models.Wrap(models.EOutcomeUncertain, errors.Join(err, rerr),
			"the database failed while storing the edit, which may or may not be stored; reload the original proposal")
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// explainNotSuperseded says why an edit found its original not editable.
func explainNotSuperseded(tx *gorm.DB, tenantID, id, digestSeen string, now time.Time) error {
	var row proposalRow
	if err := tx.Select("status", "expires_at", "args_digest").Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
		return notFound(err, "no proposal %q", id)
	}
	if row.Status == string(models.StatusAwaitingConfirmation) && row.ExpiresAt > ms(now) && row.ArgsDigest != digestSeen {
		return models.Errorf(models.EArgsMismatch, "the arguments you saw are not the ones stored; reload the proposal")
	}
	return explainNotAwaiting(tx, tenantID, id, "", now)
}

// loadCounters sets p.Supersedes and p.SupersededBy from the edits that
// name p.
func loadCounters(tx *gorm.DB, p *models.Proposal) error {
	var rows []struct {
		Row        counterRow `gorm:"embedded"`
		EditorName string
	}
	err := tx.Table("counter_proposals AS c").Select("c.*, u.name AS editor_name").
		Joins("JOIN users u ON u.id = c.editor_id").
		Where("c.tenant_id = ? AND (c.revised_id = ? OR c.original_id = ?)", p.TenantID, p.ID, p.ID).
		Find(&rows).Error
	if err != nil {
		return err
	}
	for _, r := range rows {
		c, err := r.Row.model(r.EditorName)
		if err != nil {
			return err
		}
		if c.RevisedID == p.ID {
			p.Supersedes = c
		} else {
			p.SupersededBy = c
		}
	}
	return nil
}
