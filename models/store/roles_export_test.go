package store

import (
	"context"

	"github.com/countersign/countersign/models"
)

// TenantUsersForTest returns every user of the tenant, by name.
func (s *Store) TenantUsersForTest(ctx context.Context, tenantID string) ([]models.User, error) {
	var rows []userRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ?", tenantID).Order("name").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]models.User, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}

// ResetAdminsForTest makes every user of the tenant an active
// administrator, directly, logging nothing.
func (s *Store) ResetAdminsForTest(ctx context.Context, tenantID string) error {
	return s.db.WithContext(ctx).Model(&userRow{}).Where("tenant_id = ?", tenantID).
		Updates(map[string]any{"role": string(models.RoleAdmin), "disabled": false}).Error
}
