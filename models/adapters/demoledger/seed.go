package demoledger

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models/store"
)

// Seed creates the demo ledger's business data in a tenant: orders
// (ord_1001…ord_1020 each payable 19900 CNY, ord_2001…ord_2010 each payable
// 500000 CNY), customers and log entries. It is idempotent: existing rows
// are left as they are.
func (l *Ledger) Seed(ctx context.Context, tenantID string) error {
	err := l.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return seedBusiness(tx, tenantID) })
	return store.DBError(err)
}

var demoStreets = []string{"Yunqi Rd 88, Hangzhou", "Nanjing Rd 1200, Shanghai", "Zhongguancun St 27, Beijing",
	"Tianfu Ave 999, Chengdu", "Shennan Blvd 6008, Shenzhen"}

func seedBusiness(tx *gorm.DB, tenantID string) error {
	for i := 1; i <= 20; i++ {
		id := fmt.Sprintf("ord_%d", 1000+i)
		row := demoOrderRow{TenantID: tenantID, ID: id, Currency: "CNY", PayableMinor: 19900, Version: 1,
			Label: fmt.Sprintf("Order …%d · %s", 1000+i, demoStreets[i%len(demoStreets)])}
		if _, err := store.InsertOnce(tx, &row); err != nil {
			return err
		}
	}
	for i := 1; i <= 10; i++ {
		id := fmt.Sprintf("ord_%d", 2000+i)
		row := demoOrderRow{TenantID: tenantID, ID: id, Currency: "CNY", PayableMinor: 500000, Version: 1,
			Label: fmt.Sprintf("Order …%d · bulk purchase · %s", 2000+i, demoStreets[i%len(demoStreets)])}
		if _, err := store.InsertOnce(tx, &row); err != nil {
			return err
		}
	}
	names := []string{"Li Wei", "Wang Fang", "Zhang Min", "Chen Jing", "Liu Yang"}
	for i := 1; i <= 5; i++ {
		row := demoCustomerRow{TenantID: tenantID, ID: fmt.Sprintf("cus_%03d", i), Name: names[i-1],
			Email: fmt.Sprintf("customer%d@example.com", i), Version: 1}
		if _, err := store.InsertOnce(tx, &row); err != nil {
			return err
		}
	}
	for i := 1; i <= 200; i++ {
		row := demoLogRow{TenantID: tenantID, ID: fmt.Sprintf("log_%04d", i),
			Message: fmt.Sprintf("debug trace %d of the checkout service", i)}
		if _, err := store.InsertOnce(tx, &row); err != nil {
			return err
		}
	}
	return nil
}
