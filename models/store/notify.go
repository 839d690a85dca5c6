package store

import (
	"context"
	"net/mail"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/countersign/countersign/models"
)

type notificationAddressRow struct {
	UserID    string `gorm:"primaryKey"`
	TenantID  string
	Email     string
	UpdatedAt int64 `gorm:"autoUpdateTime:false"`
}

func (notificationAddressRow) TableName() string { return "notification_addresses" }

// SetNotificationEmail sets (or, with "", removes) the address a console
// user of the tenant is notified at. EInvalidRequest for an address that is
// not a plain addr-spec; ENotFound for users of other tenants.
func (s *Store) SetNotificationEmail(ctx context.Context, tenantID, userID, email string, now time.Time) error {
	if email != "" {
		a, err := mail.ParseAddress(email)
		if err != nil || a.Address != email || a.Name != "" {
			return models.Errorf(models.EInvalidRequest, "%q is not an e-mail address (give name@example.com)", email)
		}
	}
	return s.tx(ctx, func(tx *gorm.DB) error {
		var u userRow
		if err := tx.Select("id").Where("tenant_id = ? AND id = ?", tenantID, userID).Take(&u).Error; err != nil {
			return notFound(err, "no user %q", userID)
		}
		if email == "" {
			return tx.Where("user_id = ?", userID).Delete(&notificationAddressRow{}).Error
		}
		return tx.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "user_id"}},
			DoUpdates: clause.AssignmentColumns([]string{"email", "updated_at"})}).
			Create(&notificationAddressRow{UserID: userID, TenantID: tenantID, Email: email, UpdatedAt: ms(now)}).Error
	})
}

// Recipient is a reviewer a notification goes to.
type Recipient struct {
	UserID string
	Name   string
	Email  string // "" when the reviewer has no address
}

// NotificationRecipients returns the reviewers who may decide a proposal of
// the tenant: enabled users of the tenant, without the requester (the
// agent's owner) when the tier forbids self-approval, and without those who
// decided it already. ENotFound for unknown or foreign proposals.
func (s *Store) NotificationRecipients(ctx context.Context, tenantID, proposalID string) ([]Recipient, error) {
	var out []Recipient
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		p, err := loadProposal(tx, tenantID, proposalID)
		if err != nil {
			return err
		}
		var agent agentRow
		if err := tx.Select("owner_user_id").Where("id = ?", p.AgentID).Take(&agent).Error; err != nil {
			return err
		}
		exclude := map[string]bool{}
		if models.SelfApprovalForbidden(p.Tier) && agent.OwnerUserID != nil {
			exclude[*agent.OwnerUserID] = true
		}
		for _, d := range p.Decisions {
			exclude[d.UserID] = true
		}
		var rows []struct {
			ID    string
			Name  string
			Email *string
		}
		err = tx.Table("users AS u").Select("u.id, u.name, n.email").
			Joins("LEFT JOIN notification_addresses n ON n.user_id = u.id").
			Where("u.tenant_id = ? AND NOT u.disabled", tenantID).Order("u.name").Find(&rows).Error
		if err != nil {
			return err
		}
		for _, r := range rows {
			if !exclude[r.ID] {
				out = append(out, Recipient{UserID: r.ID, Name: r.Name, Email: deref(r.Email)})
			}
		}
		return nil
	}, nil)
	if err != nil {
		return nil, dbErr(err)
	}
	return out, nil
}

// NotificationEmail returns the address a console user of the tenant is
// notified at ("" for none). ENotFound for users of other tenants.
func (s *Store) NotificationEmail(ctx context.Context, tenantID, userID string) (string, error) {
	var u userRow
	if err := s.read.WithContext(ctx).Select("id").Where("tenant_id = ? AND id = ?", tenantID, userID).Take(&u).Error; err != nil {
		return "", notFound(err, "no user %q", userID)
	}
	var rows []notificationAddressRow
	if err := s.read.WithContext(ctx).Where("tenant_id = ? AND user_id = ?", tenantID, userID).Limit(1).Find(&rows).Error; err != nil {
		return "", dbErr(err)
	}
	if len(rows) == 0 {
		return "", nil
	}
	return rows[0].Email, nil
}
