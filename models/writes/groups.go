package writes

import (
	"context"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// groupActor checks that admin may manage reviewer groups: an enabled
// administrator (the store re-checks inside each transaction).
func groupActor(admin models.User) (store.GroupActor, error) {
	if admin.Role != models.RoleAdmin || admin.Disabled {
		return store.GroupActor{}, models.Errorf(models.EForbidden, "only an administrator may manage reviewer groups")
	}
	return store.GroupActor{TenantID: admin.TenantID, Admin: &admin}, nil
}

// Groups returns the administrator's tenant's reviewer groups with their
// members. Errors: EForbidden, EUnavailable.
func (s *Service) Groups(ctx context.Context, admin models.User) ([]models.ReviewerGroup, error) {
	a, err := groupActor(admin)
	if err != nil {
		return nil, err
	}
	return s.store.ListGroups(ctx, a.TenantID)
}

// CreateGroup creates a reviewer group in the administrator's tenant.
// Errors: EForbidden, EInvalidRequest, EAlreadyExists, EUnavailable.
func (s *Service) CreateGroup(ctx context.Context, admin models.User, name string) (models.ReviewerGroup, error) {
	a, err := groupActor(admin)
	if err != nil {
		return models.ReviewerGroup{}, err
	}
	return s.store.CreateGroup(ctx, a, name, s.clock.Now())
}

// SetGroupMember adds (member) or removes a user, by name, to or from a
// group of the administrator's tenant; see store.SetGroupMember.
// Errors: EForbidden, ENotFound, EUnavailable.
func (s *Service) SetGroupMember(ctx context.Context, admin models.User, group, userName string, member bool) error {
	a, err := groupActor(admin)
	if err != nil {
		return err
	}
	return s.store.SetGroupMember(ctx, a, group, userName, member, s.clock.Now())
}
