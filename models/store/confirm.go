package store

import (
	"context"
	"database/sql"
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
	EffectSeen string
	AMR        string `gorm:"column:amr"`
	Evidence   string
	CreatedAt  int64 `gorm:"autoCreateTime:false"`
	VoidedAt   *int64
}

func (decisionRow) TableName() string { return "decisions" }

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
	args := make([]any, len(proposalIDs))
	for i, id := range proposalIDs {
		args[i] = id
	}
	ctx, c := raw(tx)
	rows, err := c.QueryContext(ctx, `SELECT `+decisionCols+`
FROM decisions AS d `+decisionUsers+`
WHERE d.proposal_id IN (`+placeholders(1, len(args))+`) ORDER BY d.created_at, d.id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []models.Decision{}
	for rows.Next() {
		var ds decisionScan
		if err := rows.Scan(ds.dest()...); err != nil {
			return nil, err
		}
		d, ok, err := ds.decision()
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, rows.Err()
}

// decisionCols are the columns of a decision and its decider that
// decisionScan reads, from decisions d joined with decisionUsers.
const decisionCols = `d.id, d.proposal_id, d.user_id, d.kind, d.reason, d.digest_seen, d.effect_seen, d.amr,
 d.evidence, d.created_at, d.voided_at, u.id, u.name, u.created_at, u.created_by, e.name, u.password_reset_at,
 u.password_reset_by, r.name`

// decisionUsers joins a decision d with its decider u, who enrolled them
// (e) and who last reset their password (r). A decision whose decider is
// missing is left out (decisionScan.decision).
const decisionUsers = `LEFT JOIN users u ON u.id = d.user_id
 LEFT JOIN users e ON e.id = u.created_by AND e.tenant_id = u.tenant_id
 LEFT JOIN users r ON r.id = u.password_reset_by AND r.tenant_id = u.tenant_id`

// decisionScan receives decisionCols, all of which may be NULL: the
// decisions may be LEFT JOINed to a row that has none.
type decisionScan struct {
	id, proposalID, userID, kind, reason, digestSeen, effectSeen, amr, evidence sql.NullString
	createdAt                                                                   sql.NullInt64
	voidedAt                                                                    *int64
	deciderID, userName                                                         sql.NullString
	userCreatedAt                                                               sql.NullInt64
	createdBy                                                                   sql.NullString
	enrollerName                                                                *string
	passwordResetAt                                                             *int64
	resetBy                                                                     sql.NullString
	resetterName                                                                *string
}

func (s *decisionScan) dest() []any {
	return []any{&s.id, &s.proposalID, &s.userID, &s.kind, &s.reason, &s.digestSeen, &s.effectSeen, &s.amr,
		&s.evidence, &s.createdAt, &s.voidedAt, &s.deciderID, &s.userName, &s.userCreatedAt, &s.createdBy, &s.enrollerName,
		&s.passwordResetAt, &s.resetBy, &s.resetterName}
}

// decision is the decision scanned; ok is false when the row holds none,
// or one whose decider is missing.
func (s *decisionScan) decision() (d models.Decision, ok bool, err error) {
	if !s.id.Valid || !s.deciderID.Valid {
		return models.Decision{}, false, nil
	}
	d = models.Decision{ID: s.id.String, ProposalID: s.proposalID.String, UserID: s.userID.String, UserName: s.userName.String,
		Kind: models.DecisionKind(s.kind.String), Reason: s.reason.String, DigestSeen: s.digestSeen.String,
		EffectSeen: s.effectSeen.String, CreatedAt: fromMS(s.createdAt.Int64), VoidedAt: fromMSPtr(s.voidedAt)}
	d.Decider = models.Enrolment{EnrolledBy: nameOf(s.createdBy.String, s.enrollerName), EnrolledAt: fromMS(s.userCreatedAt.Int64),
		PasswordResetBy: nameOf(s.resetBy.String, s.resetterName), PasswordResetAt: fromMSPtr(s.passwordResetAt)}
	if s.evidence.String != "" {
		d.Evidence = json.RawMessage(s.evidence.String)
	}
	if err := json.Unmarshal([]byte(s.amr.String), &d.AMR); err != nil {
		return models.Decision{}, false, err
	}
	return d, true, nil
}

func nameOf(id string, name *string) string {
	if name != nil {
		return *name
	}
	return id
}

// IssueFunc builds the token for a proposal whose quorum is complete, given
// the proposal as it stands inside the deciding transaction (with every
// approval, the new one included). It must not touch the database.
type IssueFunc func(p *models.Proposal) (models.Token, error)

// RecordDecision stores one reviewer's decision on an awaiting proposal and
// applies models.Decide to the proposal as it then stands (with group
// memberships read in this transaction): a decline declines it; an approval
// that completes what the tier requires confirms the proposal and stores
// the token that issue builds, all in one transaction. The proposal row is updated
// first, which serializes concurrent deciders on it (a row lock on
// PostgreSQL, the single writer on SQLite), so the approval count is exact.
//
// Before anything else the transaction locks the reviewer's row and
// re-checks it: a reviewer disabled meanwhile is EForbidden (disabling
// locks the same row, so an approval is either refused or in place to be
// voided), and an approval that separation of duties forbids
// (models.DutyConflict against the agent) is EDutyConflict.
//
// Errors: ENotFound, EForbidden, EDutyConflict, EProposalExpired,
// EInvalidState (no longer awaiting), EAlreadyDecided (this reviewer decided
// before: double submits record one decision), EUnavailable,
// EOutcomeUncertain (the commit failed and reading back could not show the
// decision stored).
func (s *Store) RecordDecision(ctx context.Context, d models.Decision, tenantID string, now time.Time, issue IssueFunc) (*models.Proposal, error) {
	amr, err := json.Marshal(d.AMR)
	if err != nil {
		return nil, models.Wrap(models.EInternal, err, "cannot encode amr")
	}
	row := decisionRow{ID: d.ID, TenantID: tenantID, ProposalID: d.ProposalID, UserID: d.UserID,
		Kind: string(d.Kind), Reason: d.Reason, DigestSeen: d.DigestSeen, EffectSeen: d.EffectSeen, AMR: string(amr),
		Evidence: string(d.Evidence), CreatedAt: ms(now)}
	var out *models.Proposal
	err = s.tx(ctx, func(tx *gorm.DB) error {
		reviewer, err := lockActiveUser(tx, tenantID, d.UserID)
		if err != nil {
			return err
		}
		if d.Kind == models.DecisionApprove {
			if err := checkDuties(tx, tenantID, d.ProposalID, reviewer); err != nil {
				return err
			}
		}
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
		var groups map[string][]string
		if d.Kind == models.DecisionApprove {
			if groups, err = approverGroups(tx, tenantID, p); err != nil {
				return err
			}
		}
		verdict := models.Decide(p, d.Kind, groups)
		events := pendingAudit{}
		events.add(tenantID, decisionEvent(d))
		switch {
		case verdict == models.VerdictDeclined:
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
		case verdict == models.VerdictConfirmed:
			if err := s.confirmIn(tx, p, now, issue, &events); err != nil {
				return err
			}
		}
		if out, err = loadProposal(tx, tenantID, d.ProposalID); err != nil {
			return err
		}
		return events.flush(tx, now)
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

// confirmIn confirms p, whose approvals meet what its tier requires, inside
// the deciding transaction tx: a mandate proposal grants its mandate, any
// other gets the token issue builds, stored with the move to confirmed.
// The audit entries go to events.
func (s *Store) confirmIn(tx *gorm.DB, p *models.Proposal, now time.Time, issue IssueFunc, events *pendingAudit) error {
	if p.Kind == models.KindMandate {
		ev, err := s.grantMandate(tx, p, now)
		if err != nil {
			return err
		}
		events.add(p.TenantID, ev)
		return nil
	}
	tok, err := issue(p)
	if err != nil {
		return err
	}
	ok, err := transition(tx, p.TenantID, p.ID, models.StatusConfirmed, now, "")
	if err != nil {
		return err
	}
	if !ok {
		return models.Errorf(models.EInvalidState, "the proposal changed while it was being confirmed")
	}
	if err := s.recordEvent(tx, p.TenantID, p.ID, models.StatusEvent(models.StatusConfirmed), now,
		map[string]any{"token_expires_at": models.FormatTime(tok.ExpiresAt)}); err != nil {
		return err
	}
	if err := tx.Create(&tokenRow{JTI: tok.JTI, TenantID: p.TenantID, ProposalID: p.ID, AgentID: tok.AgentID,
		KID: tok.KeyID, Status: string(models.TokenIssued), Compact: tok.Compact,
		IssuedAt: ms(tok.IssuedAt), ExpiresAt: ms(tok.ExpiresAt)}).Error; err != nil {
		return err
	}
	events.add(p.TenantID, tokenIssuedEvent(p, tok))
	return nil
}

// lockActiveUser takes the user's row lock (a no-op UPDATE that only
// matches an enabled user) and returns the row; EForbidden when the user is
// disabled or unknown.
func lockActiveUser(tx *gorm.DB, tenantID, userID string) (models.User, error) {
	res := tx.Model(&userRow{}).Where("tenant_id = ? AND id = ? AND disabled = ?", tenantID, userID, false).
		Update("disabled", false)
	if res.Error != nil {
		return models.User{}, res.Error
	}
	if res.RowsAffected == 0 {
		return models.User{}, models.Errorf(models.EForbidden, "your account may not decide proposals")
	}
	var row userRow
	if err := tx.Where("tenant_id = ? AND id = ?", tenantID, userID).Take(&row).Error; err != nil {
		return models.User{}, err
	}
	return row.model(), nil
}

// checkDuties refuses an approval that models.DutyConflict forbids, with
// the rows as they are inside the deciding transaction.
func checkDuties(tx *gorm.DB, tenantID, proposalID string, reviewer models.User) error {
	var ag agentRow
	err := tx.Table("agents AS a").Select("a.*").
		Joins("JOIN proposals p ON p.agent_id = a.id AND p.tenant_id = a.tenant_id").
		Where("p.tenant_id = ? AND p.id = ?", tenantID, proposalID).Take(&ag).Error
	if err != nil {
		return notFound(err, "no proposal %q", proposalID)
	}
	return dutyError(tx, reviewer, ag.model())
}

// dutyError is nil when models.DutyConflict allows reviewer to approve
// agent's proposals, else EDutyConflict naming the administrator.
func dutyError(tx *gorm.DB, reviewer models.User, agent models.Agent) error {
	adminID, conflict := models.DutyConflict(reviewer, agent)
	if !conflict {
		return nil
	}
	name := "an administrator"
	var admin userRow
	if tx.Where("tenant_id = ? AND id = ?", reviewer.TenantID, adminID).Take(&admin).Error == nil {
		name = admin.Name
	}
	return models.DutyConflictError(name, agent.Name)
}
