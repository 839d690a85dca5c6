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

type mandateRow struct {
	ID          string `gorm:"primaryKey"`
	TenantID    string
	ProposalID  string
	Tool        string
	Terms       string
	TermsDigest string
	Status      string
	Budget      *int64
	Spent       int64
	MaxUses     *int64
	Uses        int64
	ExpiresAt   int64
	Grantors    string
	GrantedAt   int64
	RevokedAt   *int64
	RevokedBy   string
	// GrantorDisabled is read with mandateColumns, never written.
	GrantorDisabled bool `gorm:"->;-:migration"`
}

func (mandateRow) TableName() string { return "mandates" }

type mandateGrantorRow struct {
	MandateID string `gorm:"primaryKey"`
	UserID    string `gorm:"primaryKey"`
}

func (mandateGrantorRow) TableName() string { return "mandate_grantors" }

// grantorDisabled is the condition, on a statement over mandates, that one
// of the mandate's grantors is disabled now.
const grantorDisabled = "EXISTS (SELECT 1 FROM mandate_grantors g JOIN users u ON u.id = g.user_id" +
	" WHERE g.mandate_id = mandates.id AND u.disabled)"

// mandateColumns reads a mandate row with whether a grantor is disabled.
const mandateColumns = "mandates.*, " + grantorDisabled + " AS grantor_disabled"

func (r mandateRow) model() (models.Mandate, error) {
	m := models.Mandate{ID: r.ID, TenantID: r.TenantID, ProposalID: r.ProposalID, TermsDigest: r.TermsDigest,
		Status: models.MandateStatus(r.Status), Spent: r.Spent, Uses: r.Uses, GrantedAt: fromMS(r.GrantedAt),
		RevokedAt: fromMSPtr(r.RevokedAt), RevokedBy: r.RevokedBy, GrantorDisabled: r.GrantorDisabled}
	if err := json.Unmarshal([]byte(r.Terms), &m.Terms); err != nil {
		return m, fmt.Errorf("mandate %s terms: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(r.Grantors), &m.Grantors); err != nil {
		return m, fmt.Errorf("mandate %s grantors: %w", r.ID, err)
	}
	return m, nil
}

// grantMandate makes the mandate of a confirmed mandate proposal live,
// inside the deciding transaction: the proposal becomes confirmed (no token:
// the mandate is what it grants) and the mandate row is inserted with the
// approvers as grantors. The terms are the proposal's stored arguments, so
// the mandate is exactly what the grantors saw (its digest is the one they
// approved).
//
// It returns the audit event of the grant, for the caller to append with
// the decision's.
func (s *Store) grantMandate(tx *gorm.DB, p *models.Proposal, now time.Time) (models.AuditEvent, error) {
	var ev models.AuditEvent
	var terms models.MandateTerms
	if err := json.Unmarshal(p.Arguments, &terms); err != nil {
		return ev, models.Wrap(models.EInternal, err, "stored mandate terms are unreadable")
	}
	grantors, decisions := []string{}, []string{}
	for _, d := range p.Approvals() {
		grantors = append(grantors, d.UserID)
		decisions = append(decisions, d.ID)
	}
	g, err := json.Marshal(grantors)
	if err != nil {
		return ev, err
	}
	row := mandateRow{ID: models.NewID("mdt"), TenantID: p.TenantID, ProposalID: p.ID, Tool: terms.Tool,
		Terms: string(p.Arguments), TermsDigest: p.ArgsDigest, Status: string(models.MandateActive),
		ExpiresAt: ms(terms.ExpiresAt), Grantors: string(g), GrantedAt: ms(now)}
	if terms.Money != nil && terms.Money.Budget > 0 {
		row.Budget = &terms.Money.Budget
	}
	if terms.MaxUses > 0 {
		row.MaxUses = &terms.MaxUses
	}
	if err := tx.Create(&row).Error; err != nil {
		return ev, err
	}
	for _, g := range grantors {
		if err := tx.Create(&mandateGrantorRow{MandateID: row.ID, UserID: g}).Error; err != nil {
			return ev, err
		}
	}
	ok, err := transition(tx, p.TenantID, p.ID, models.StatusConfirmed, now, "")
	if err != nil {
		return ev, err
	}
	if !ok {
		return ev, models.Errorf(models.EInvalidState, "the proposal changed while it was being confirmed")
	}
	if err := tx.Model(&proposalRow{}).Where("tenant_id = ? AND id = ?", p.TenantID, p.ID).
		Update("mandate_id", row.ID).Error; err != nil {
		return ev, err
	}
	data := map[string]any{"mandate_id": row.ID, "terms_digest": row.TermsDigest, "tool": row.Tool, "grantors": grantors,
		"decisions": decisions, "expires_at": row.ExpiresAt, "risk_tier": p.Tier.Name}
	addFactors(data, p)
	ev = proposalEvent(models.AuditMandateGranted, models.ActorSystem, p.ID, data)
	return ev, s.recordEvent(tx, p.TenantID, p.ID, models.StatusEvent(models.StatusConfirmed), now,
		map[string]any{"mandate_id": row.ID})
}

// loadGrantors fills p.MandateGrantors from its mandate.
func loadGrantors(tx *gorm.DB, p *models.Proposal) error {
	var row mandateRow
	if err := tx.Select("grantors").Where("tenant_id = ? AND id = ?", p.TenantID, p.MandateID).Take(&row).Error; err != nil {
		return err
	}
	return json.Unmarshal([]byte(row.Grantors), &p.MandateGrantors)
}

// MandateRefused is the error of ConfirmByMandate when the mandate's
// conditional update matched nothing: Reason says why, as the proposal's
// mandate note shows it.
type MandateRefused struct{ Reason string }

func (e *MandateRefused) Error() string { return "mandate refused: " + e.Reason }

// ConfirmByMandate confirms an awaiting write proposal under a standing
// mandate, in one transaction: one conditional UPDATE spends amount from
// the mandate's budget and one use from its count — only while the
// mandate is active, unexpired at now (right-open), and the budget and
// count hold it — then the proposal becomes confirmed, naming the mandate,
// and the token that issue builds is stored. issue sees the proposal with
// MandateID and MandateGrantors set.
//
// When the mandate cannot pay, nothing changes and the error is a
// *MandateRefused with the reason (models.Mandate.Fit on the row as it is
// now). Errors otherwise: ENotFound, EInvalidState (the proposal no longer
// awaits), EUnavailable.
func (s *Store) ConfirmByMandate(ctx context.Context, tenantID, proposalID, mandateID string, amount int64, now time.Time, issue IssueFunc) (*models.Proposal, error) {
	var out *models.Proposal
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&mandateRow{}).
			Where("tenant_id = ? AND id = ? AND status = ? AND expires_at > ?",
				tenantID, mandateID, string(models.MandateActive), ms(now)).
			Where("(budget IS NULL OR spent + ? <= budget) AND (max_uses IS NULL OR uses < max_uses)", amount).
			Where("NOT " + grantorDisabled).
			Updates(map[string]any{"spent": gorm.Expr("spent + ?", amount), "uses": gorm.Expr("uses + 1")})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var row mandateRow
			if err := tx.Select(mandateColumns).Where("tenant_id = ? AND id = ?", tenantID, mandateID).Take(&row).Error; err != nil {
				return notFound(err, "no mandate %q", mandateID)
			}
			m, err := row.model()
			if err != nil {
				return err
			}
			p, err := loadProposal(tx, tenantID, proposalID)
			if err != nil {
				return err
			}
			_, reason := m.Fit(p, now)
			if reason == "" {
				reason = models.MandateBudgetOut
			}
			return &MandateRefused{Reason: reason}
		}
		ok, err := transition(tx, tenantID, proposalID, models.StatusConfirmed, now,
			"status = ? AND expires_at > ? AND kind = ''", string(models.StatusAwaitingConfirmation), ms(now))
		if err != nil {
			return err
		}
		if !ok {
			return explainNotAwaiting(tx, tenantID, proposalID, "", now)
		}
		if err := tx.Model(&proposalRow{}).Where("tenant_id = ? AND id = ?", tenantID, proposalID).
			Updates(map[string]any{"mandate_id": mandateID, "mandate_note": ""}).Error; err != nil {
			return err
		}
		p, err := loadProposal(tx, tenantID, proposalID)
		if err != nil {
			return err
		}
		tok, err := issue(p)
		if err != nil {
			return err
		}
		if err := s.recordEvent(tx, tenantID, p.ID, models.StatusEvent(models.StatusConfirmed), now,
			map[string]any{"token_expires_at": models.FormatTime(tok.ExpiresAt), "mandate_id": mandateID}); err != nil {
			return err
		}
		if err := tx.Create(&tokenRow{JTI: tok.JTI, TenantID: tenantID, ProposalID: p.ID, AgentID: tok.AgentID,
			KID: tok.KeyID, Status: string(models.TokenIssued), Compact: tok.Compact,
			IssuedAt: ms(tok.IssuedAt), ExpiresAt: ms(tok.ExpiresAt)}).Error; err != nil {
			return err
		}
		if out, err = loadProposal(tx, tenantID, proposalID); err != nil {
			return err
		}
		grantors := p.MandateGrantors
		if grantors == nil {
			grantors = []string{}
		}
		return appendAudit(tx, tenantID, now, proposalEvent(models.AuditTokenIssued, models.ActorSystem, p.ID, map[string]any{
			"jti": tok.JTI, "kid": tok.KeyID, "agent": tok.AgentID, "args_digest": p.ArgsDigest, "approvers": []string{},
			"expires_at": ms(tok.ExpiresAt), "mandate_id": mandateID, "mandate_grantors": grantors, "amount": amount}))
	})
	if commitUncertain(err) {
		// Read back: confirmed under this mandate means the commit went
		// through; else nothing was spent and a person decides.
		p, rerr := s.GetProposal(ctx, tenantID, proposalID)
		if rerr == nil && p.MandateID == mandateID && p.Token != nil {
			return p, nil
		}
		return nil, models.Wrap(models.EOutcomeUncertain, errors.Join(err, rerr), "the database failed while confirming under a mandate")
	}
	return out, err
}

// NoteMandate records on an awaiting proposal why a mandate covering it
// could not confirm it, for the agent and the reviewers to read.
func (s *Store) NoteMandate(ctx context.Context, tenantID, proposalID, note string, now time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&proposalRow{}).
			Where("tenant_id = ? AND id = ? AND status = ?", tenantID, proposalID, string(models.StatusAwaitingConfirmation)).
			Updates(map[string]any{"mandate_note": note, "revision": gorm.Expr("revision + 1"), "updated_at": ms(now)})
		return res.Error
	})
}

// LiveMandates returns the tenant's active mandates for the tool, soonest
// expiry first, whatever their expiry (Fit tells an expired one).
func (s *Store) LiveMandates(ctx context.Context, tenantID, tool string) ([]models.Mandate, error) {
	var rows []mandateRow
	err := s.read.WithContext(ctx).Select(mandateColumns).Where("tenant_id = ? AND tool = ? AND status = ?", tenantID, tool, string(models.MandateActive)).
		Order("expires_at, id").Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	return mandateModels(rows)
}

// ListMandates returns the tenant's mandates, newest grant first, at most
// 200.
func (s *Store) ListMandates(ctx context.Context, tenantID string) ([]models.Mandate, error) {
	var rows []mandateRow
	err := s.read.WithContext(ctx).Select(mandateColumns).Where("tenant_id = ?", tenantID).Order("granted_at DESC, id DESC").Limit(200).Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	out, err := mandateModels(rows)
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	var users []userRow
	if err := s.read.WithContext(ctx).Select("id", "name").Where("tenant_id = ?", tenantID).Find(&users).Error; err != nil {
		return nil, dbErr(err)
	}
	for _, u := range users {
		names[u.ID] = u.Name
	}
	for i := range out {
		for _, g := range out[i].Grantors {
			out[i].GrantorNames = append(out[i].GrantorNames, names[g])
		}
	}
	return out, nil
}

// GetMandate returns a mandate of the tenant, or ENotFound (also for other
// tenants' ids).
func (s *Store) GetMandate(ctx context.Context, tenantID, id string) (models.Mandate, error) {
	return mandateIn(s.read.WithContext(ctx), tenantID, id)
}

// mandateIn is GetMandate's read through db (a pool or a transaction).
func mandateIn(db *gorm.DB, tenantID, id string) (models.Mandate, error) {
	var row mandateRow
	if err := db.Select(mandateColumns).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
		return models.Mandate{}, notFound(err, "no mandate %q", id)
	}
	m, err := row.model()
	if err != nil {
		return m, models.Wrap(models.EInternal, err, "corrupt mandate")
	}
	return m, nil
}

// RevokeMandate ends an active mandate at once: from this commit on, its
// conditional update matches nothing, so no further token is issued under
// it. Tokens already issued keep their own revoke rules. ENotFound for
// unknown or foreign ids, EInvalidState when it is already revoked.
func (s *Store) RevokeMandate(ctx context.Context, tenantID, id, by string, now time.Time) error {
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&mandateRow{}).Where("tenant_id = ? AND id = ? AND status = ?", tenantID, id, string(models.MandateActive)).
			Updates(map[string]any{"status": string(models.MandateRevoked), "revoked_at": ms(now), "revoked_by": by})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var row mandateRow
			if err := tx.Select("status").Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
				return notFound(err, "no mandate %q", id)
			}
			return models.Errorf(models.EInvalidState, "the mandate is already %s", row.Status)
		}
		return appendAudit(tx, tenantID, now, adminEvent(models.AuditMandateRevoked, by, map[string]any{"mandate_id": id}))
	})
}

func mandateModels(rows []mandateRow) ([]models.Mandate, error) {
	out := make([]models.Mandate, 0, len(rows))
	for _, r := range rows {
		m, err := r.model()
		if err != nil {
			return nil, models.Wrap(models.EInternal, err, "corrupt mandate")
		}
		out = append(out, m)
	}
	return out, nil
}
