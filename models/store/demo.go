package store

import (
	"context"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// DemoTenant is the tenant the demo data lives in.
const DemoTenant = "demo"

// DemoSeed is what SeedDemo creates or refreshes.
type DemoSeed struct {
	ReviewerName         string // e.g. "alice"
	ReviewerPasswordHash string
	AdminName            string // e.g. "admin"
	AdminPasswordHash    string
	AgentName            string // e.g. "demo-agent"
	AgentKeyHash         string
}

// DemoResult names what SeedDemo left in place.
type DemoResult struct {
	Tenant   models.Tenant
	Reviewer models.User
	Admin    models.User
	Agent    models.Agent
}

// SeedDemo creates the demo tenant with a reviewer, an admin and an agent
// (the demo business data is the demo ledger's, see
// models/adapters/demoledger.Seed). It is idempotent: the reviewer's and
// admin's passwords and the agent's key are replaced by the given hashes, so
// every demo start can print working credentials.
func (s *Store) SeedDemo(ctx context.Context, seed DemoSeed) (DemoResult, error) {
	now := ms(s.clock.Now())
	var out DemoResult
	err := s.tx(ctx, func(tx *gorm.DB) error {
		created := tenantRow{ID: models.NewID("ten"), Name: DemoTenant, CreatedAt: now}
		fresh, err := insertOnce(tx, &created)
		if err != nil {
			return err
		}
		if fresh {
			if err := recordSigningKeys(tx, created.ID, fromMS(now)); err != nil {
				return err
			}
		}
		var t tenantRow
		if err := tx.Where("name = ?", DemoTenant).Take(&t).Error; err != nil {
			return err
		}
		out.Tenant = models.Tenant{ID: t.ID, Name: t.Name, CreatedAt: fromMS(t.CreatedAt)}

		users := []struct {
			name, hash string
			role       models.Role
			dst        *models.User
		}{
			{seed.ReviewerName, seed.ReviewerPasswordHash, models.RoleReviewer, &out.Reviewer},
			{seed.AdminName, seed.AdminPasswordHash, models.RoleAdmin, &out.Admin},
		}
		for _, u := range users {
			if _, err := insertOnce(tx, &userRow{ID: models.NewID("usr"), TenantID: t.ID, Name: u.name,
				Role: string(u.role), PasswordHash: u.hash, CreatedAt: now, CreatedBy: models.EnrolledByCLI}); err != nil {
				return err
			}
			if err := tx.Model(&userRow{}).Where("tenant_id = ? AND name = ?", t.ID, u.name).
				Updates(map[string]any{"password_hash": u.hash, "disabled": false}).Error; err != nil {
				return err
			}
			var row userRow
			if err := tx.Where("tenant_id = ? AND name = ?", t.ID, u.name).Take(&row).Error; err != nil {
				return err
			}
			*u.dst = row.model()
		}

		if _, err := insertOnce(tx, &agentRow{ID: models.NewID("agt"), TenantID: t.ID, Name: seed.AgentName,
			KeyHash: seed.AgentKeyHash, CreatedBy: models.EnrolledByCLI, CreatedAt: now}); err != nil {
			return err
		}
		if err := tx.Model(&agentRow{}).Where("tenant_id = ? AND name = ?", t.ID, seed.AgentName).
			Updates(map[string]any{"key_hash": seed.AgentKeyHash, "revoked_at": nil}).Error; err != nil {
			return err
		}
		var a agentRow
		if err := tx.Where("tenant_id = ? AND name = ?", t.ID, seed.AgentName).Take(&a).Error; err != nil {
			return err
		}
		out.Agent = a.model()
		return nil
	})
	return out, err
}
