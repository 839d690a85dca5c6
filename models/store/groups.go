package store

import (
	"context"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

type groupRow struct {
	ID        string `gorm:"primaryKey"`
	TenantID  string
	Name      string
	CreatedBy string
	CreatedAt int64 `gorm:"autoCreateTime:false"`
}

func (groupRow) TableName() string { return "reviewer_groups" }

type groupMemberRow struct {
	GroupID  string `gorm:"primaryKey"`
	UserID   string `gorm:"primaryKey"`
	TenantID string
	AddedBy  string
	AddedAt  int64
}

func (groupMemberRow) TableName() string { return "reviewer_group_members" }

type factorRow struct {
	ProposalID string `gorm:"primaryKey"`
	Position   int    `gorm:"primaryKey"`
	GroupName  string
	Count      int
}

func (factorRow) TableName() string { return "proposal_factors" }

// GroupActor says who changes a tenant's reviewer groups: one of its
// administrators (Admin, re-checked inside each transaction), or the
// command line (Admin nil), which acts for the operator of the
// installation.
type GroupActor struct {
	TenantID string
	Admin    *models.User
}

func (a GroupActor) check(tx *gorm.DB) error {
	if a.Admin == nil {
		return nil
	}
	if a.Admin.TenantID != a.TenantID {
		return models.Errorf(models.EForbidden, "only administrators of the tenant can manage its reviewer groups")
	}
	return requireAdmin(tx, *a.Admin)
}

// actor is the audit log's actor: the administrator, or the system for
// the command line.
func (a GroupActor) actor() string {
	if a.Admin == nil {
		return models.ActorSystem
	}
	return a.Admin.ID
}

func (a GroupActor) by() string {
	if a.Admin == nil {
		return models.EnrolledByCLI
	}
	return a.Admin.ID
}

// CreateGroup creates a reviewer group. Errors: EInvalidRequest (name not
// models.GroupNamePattern), EAlreadyExists, EForbidden.
func (s *Store) CreateGroup(ctx context.Context, a GroupActor, name string, now time.Time) (models.ReviewerGroup, error) {
	if !models.GroupNamePattern.MatchString(name) {
		return models.ReviewerGroup{}, models.Errorf(models.EInvalidRequest,
			"a group name is a lower-case letter then up to 63 of a–z 0–9 _ -, got %q", name)
	}
	row := groupRow{ID: models.NewID("grp"), TenantID: a.TenantID, Name: name, CreatedBy: a.by(), CreatedAt: ms(now)}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := a.check(tx); err != nil {
			return err
		}
		ok, err := insertOnce(tx, &row)
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EAlreadyExists, "group %q already exists", name)
		}
		return appendAudit(tx, a.TenantID, now, adminEvent(models.AuditGroupChanged, a.actor(),
			map[string]any{"group": name, "change": "created"}))
	})
	if err != nil {
		return models.ReviewerGroup{}, err
	}
	return models.ReviewerGroup{ID: row.ID, TenantID: row.TenantID, Name: row.Name, CreatedAt: fromMS(row.CreatedAt)}, nil
}

// SetGroupMember adds (member true) or removes a user, by name, to or from
// a group, by name. Adding a member twice or removing a non-member changes
// nothing and is no error. Approvals count toward a group's factor as
// memberships stand when the proposal is decided, so in the same
// transaction the change moves the progress of the waiting proposals the
// user approved that count on the group (a new revision and a
// proposal.approvals_changed event each, which wakes their long-polls),
// and, when a member is added, queues those whose approvals now meet what
// their tier requires, to be confirmed once their business state is
// checked (see Reconsider). A change that changes nothing returns the zero
// GroupChange.
// Errors: ENotFound (no such group or user in the tenant), EForbidden.
func (s *Store) SetGroupMember(ctx context.Context, a GroupActor, group, userName string, member bool, now time.Time) (GroupChange, error) {
	var out GroupChange
	err := s.tx(ctx, func(tx *gorm.DB) error {
		out = GroupChange{}
		if err := a.check(tx); err != nil {
			return err
		}
		var g groupRow
		if err := tx.Where("tenant_id = ? AND name = ?", a.TenantID, group).Take(&g).Error; err != nil {
			return notFound(err, "no group %q", group)
		}
		// The user's row is locked (a no-op update) as their decisions lock
		// it: a decision of theirs and this change take turns, so one sees
		// the other (it reads the memberships, or this reads its approval).
		if err := tx.Model(&userRow{}).Where("tenant_id = ? AND name = ?", a.TenantID, userName).
			Update("disabled", gorm.Expr("disabled")).Error; err != nil {
			return err
		}
		var u userRow
		if err := tx.Where("tenant_id = ? AND name = ?", a.TenantID, userName).Take(&u).Error; err != nil {
			return notFound(err, "no user %q", userName)
		}
		var changed int64
		if member {
			ok, err := insertOnce(tx, &groupMemberRow{GroupID: g.ID, UserID: u.ID, TenantID: a.TenantID, AddedBy: a.by(), AddedAt: ms(now)})
			if err != nil {
				return err
			}
			if ok {
				changed = 1
			}
		} else {
			res := tx.Where("group_id = ? AND user_id = ?", g.ID, u.ID).Delete(&groupMemberRow{})
			if res.Error != nil {
				return res.Error
			}
			changed = res.RowsAffected
		}
		if changed == 0 {
			return nil
		}
		change := "member_added"
		if !member {
			change = "member_removed"
		}
		// The proposals' rows are locked before the audit chain, as every
		// decision locks them (appendAudit).
		var err error
		if out, err = s.regroup(tx, a.TenantID, group, u.ID, change, member, now); err != nil {
			return err
		}
		return appendAudit(tx, a.TenantID, now, adminEvent(models.AuditGroupChanged, a.actor(),
			map[string]any{"group": group, "change": change, "user_id": u.ID}))
	})
	if err != nil {
		return GroupChange{}, err
	}
	return out, nil
}

// ListGroups returns the tenant's reviewer groups by name, each with its
// members by name.
func (s *Store) ListGroups(ctx context.Context, tenantID string) ([]models.ReviewerGroup, error) {
	var groups []groupRow
	var members []struct {
		GroupID  string
		UserID   string
		UserName string
		AddedAt  int64
	}
	err := s.read.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("tenant_id = ?", tenantID).Order("name").Find(&groups).Error; err != nil {
			return err
		}
		return tx.Table("reviewer_group_members AS m").Select("m.group_id, m.user_id, u.name AS user_name, m.added_at").
			Joins("JOIN users u ON u.id = m.user_id").Where("m.tenant_id = ?", tenantID).Order("u.name").Scan(&members).Error
	}, nil)
	if err != nil {
		return nil, dbErr(err)
	}
	out := make([]models.ReviewerGroup, 0, len(groups))
	at := map[string]int{}
	for i, g := range groups {
		at[g.ID] = i
		out = append(out, models.ReviewerGroup{ID: g.ID, TenantID: g.TenantID, Name: g.Name, CreatedAt: fromMS(g.CreatedAt)})
	}
	for _, m := range members {
		if i, ok := at[m.GroupID]; ok {
			out[i].Members = append(out[i].Members, models.GroupMember{UserID: m.UserID, UserName: m.UserName, AddedAt: fromMS(m.AddedAt)})
		}
	}
	return out, nil
}

// GroupsOf returns the names of the groups each of the users is in.
func (s *Store) GroupsOf(ctx context.Context, tenantID string, userIDs []string) (map[string][]string, error) {
	out, err := groupsOf(s.read.WithContext(ctx), tenantID, userIDs)
	return out, dbErr(err)
}

func groupsOf(tx *gorm.DB, tenantID string, userIDs []string) (map[string][]string, error) {
	out := map[string][]string{}
	if len(userIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		UserID string
		Name   string
	}
	err := tx.Table("reviewer_group_members AS m").Select("m.user_id, g.name").
		Joins("JOIN reviewer_groups g ON g.id = m.group_id").
		Where("m.tenant_id = ? AND m.user_id IN ?", tenantID, userIDs).Order("g.name").Scan(&rows).Error
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.UserID] = append(out[r.UserID], r.Name)
	}
	return out, nil
}

// approverGroups reads, inside the deciding transaction, the groups of p's
// approvers, as models.Decide needs them; nil when p's tier names no groups.
func approverGroups(tx *gorm.DB, tenantID string, p *models.Proposal) (map[string][]string, error) {
	if len(p.Tier.Require) == 0 {
		return nil, nil
	}
	var ids []string
	for _, d := range p.Approvals() {
		ids = append(ids, d.UserID)
	}
	return groupsOf(tx, tenantID, ids)
}

// insertFactors stores the group factors of p's tier with the proposal.
func insertFactors(tx *gorm.DB, p *models.Proposal) error {
	for i, f := range p.Tier.Require {
		if err := tx.Create(&factorRow{ProposalID: p.ID, Position: i, GroupName: f.Group, Count: f.Count}).Error; err != nil {
			return err
		}
	}
	return nil
}

// loadFactorsOf sets, for proposals of one tenant whose decisions are
// loaded, each one's Tier.Require from the stored factors and Progress
// from the approvals and memberships as they stand in tx: one query, and
// one more when a tier names groups, whatever the number of proposals.
func loadFactorsOf(tx *gorm.DB, ps []*models.Proposal) error {
	ids := make([]string, len(ps))
	byID := make(map[string]*models.Proposal, len(ps))
	for i, p := range ps {
		ids[i], byID[p.ID] = p.ID, p
	}
	var rows []factorRow
	if err := tx.Where("proposal_id IN ?", ids).Order("proposal_id, position").Find(&rows).Error; err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	var approvers []string
	for _, r := range rows {
		p := byID[r.ProposalID]
		if len(p.Tier.Require) == 0 {
			for _, d := range p.Approvals() {
				approvers = append(approvers, d.UserID)
			}
		}
		p.Tier.Require = append(p.Tier.Require, models.Factor{Group: r.GroupName, Count: r.Count})
	}
	groups, err := groupsOf(tx, ps[0].TenantID, approvers)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if len(p.Tier.Require) > 0 {
			_, p.Progress = models.ApprovalsMet(p, groups)
		}
	}
	return nil
}

// loadFactors sets p.Tier.Require from the stored factors and p.Progress
// from the approvals and memberships as they stand in tx (p.Decisions must
// be loaded): loadFactorsOf for one proposal.
func loadFactors(tx *gorm.DB, p *models.Proposal) error {
	return loadFactorsOf(tx, []*models.Proposal{p})
}
