package store

import (
	"context"
	"fmt"

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

// SeedDemo creates the demo tenant with its orders (ord_1001…ord_1020 each
// payable 19900 CNY, ord_2001…ord_2010 each payable 500000 CNY), customers
// and log entries, a reviewer, an admin and an agent. It is idempotent:
// existing business rows are left as they are, and the reviewer's and
// admin's passwords and the agent's key are replaced by the given hashes, so
// every demo start can print working credentials.
func (s *Store) SeedDemo(ctx context.Context, seed DemoSeed) (DemoResult, error) {
	now := ms(s.clock.Now())
	var out DemoResult
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if _, err := insertOnce(tx, &tenantRow{ID: models.NewID("ten"), Name: DemoTenant, CreatedAt: now}); err != nil {
			return err
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
		return seedDemoBusiness(tx, t.ID)
	})
	return out, err
}

var demoStreets = []string{"Yunqi Rd 88, Hangzhou", "Nanjing Rd 1200, Shanghai", "Zhongguancun St 27, Beijing",
	"Tianfu Ave 999, Chengdu", "Shennan Blvd 6008, Shenzhen"}

func seedDemoBusiness(tx *gorm.DB, tenantID string) error {
	for i := 1; i <= 20; i++ {
		id := fmt.Sprintf("ord_%d", 1000+i)
		row := demoOrderRow{TenantID: tenantID, ID: id, Currency: "CNY", PayableMinor: 19900, Version: 1,
			Label: fmt.Sprintf("Order …%d · %s", 1000+i, demoStreets[i%len(demoStreets)])}
		if _, err := insertOnce(tx, &row); err != nil {
			return err
		}
	}
	for i := 1; i <= 10; i++ {
		id := fmt.Sprintf("ord_%d", 2000+i)
		row := demoOrderRow{TenantID: tenantID, ID: id, Currency: "CNY", PayableMinor: 500000, Version: 1,
			Label: fmt.Sprintf("Order …%d · bulk purchase · %s", 2000+i, demoStreets[i%len(demoStreets)])}
		if _, err := insertOnce(tx, &row); err != nil {
			return err
		}
	}
	names := []string{"Li Wei", "Wang Fang", "Zhang Min", "Chen Jing", "Liu Yang"}
	for i := 1; i <= 5; i++ {
		row := demoCustomerRow{TenantID: tenantID, ID: fmt.Sprintf("cus_%03d", i), Name: names[i-1],
			Email: fmt.Sprintf("customer%d@example.com", i), Version: 1}
		if _, err := insertOnce(tx, &row); err != nil {
			return err
		}
	}
	for i := 1; i <= 200; i++ {
		row := demoLogRow{TenantID: tenantID, ID: fmt.Sprintf("log_%04d", i),
			Message: fmt.Sprintf("debug trace %d of the checkout service", i)}
		if _, err := insertOnce(tx, &row); err != nil {
			return err
		}
	}
	return nil
}
