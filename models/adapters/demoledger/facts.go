package demoledger

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
)

var _ models.FactsAdapter = (*Ledger)(nil)

// Facts tells a reviewer what the demo ledger knows about a write's target
// now: for a refund the order's paid, already refunded and refundable
// amounts; for an email the customer; for a deletion how many of the
// entries still exist. A target that does not exist is a fact too.
func (l *Ledger) Facts(ctx context.Context, req models.FactsRequest) ([]models.Fact, error) {
	db := l.db.WithContext(ctx)
	switch req.Tool {
	case "refund_order":
		var a refundArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return nil, err
		}
		var o demoOrderRow
		err := db.Where("tenant_id = ? AND id = ?", req.Tenant, a.OrderID).Take(&o).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return []models.Fact{{Label: "Order", Value: fmt.Sprintf("%s does not exist", a.OrderID)}}, nil
		}
		if err != nil {
			return nil, store.DBError(err)
		}
		money := func(minor int64) string {
			s, err := registry.FormatMoney(minor, o.Currency)
			if err != nil {
				return fmt.Sprintf("%d %s (minor units)", minor, o.Currency)
			}
			return s + " " + o.Currency
		}
		return []models.Fact{
			{Label: "Paid", Value: money(o.PayableMinor)},
			{Label: "Already refunded", Value: money(o.RefundedMinor)},
			{Label: "Refundable", Value: money(o.PayableMinor - o.RefundedMinor)},
		}, nil
	case "send_customer_email":
		var a emailArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return nil, err
		}
		var c demoCustomerRow
		err := db.Where("tenant_id = ? AND id = ?", req.Tenant, a.CustomerID).Take(&c).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return []models.Fact{{Label: "Customer", Value: fmt.Sprintf("%s does not exist", a.CustomerID)}}, nil
		}
		if err != nil {
			return nil, store.DBError(err)
		}
		return []models.Fact{{Label: "Customer", Value: c.Name}, {Label: "E-mail address", Value: c.Email}}, nil
	case "delete_logs":
		var a deleteLogsArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return nil, err
		}
		var live int64
		if err := db.Model(&demoLogRow{}).Where("tenant_id = ? AND id IN ? AND deleted_at IS NULL", req.Tenant, a.LogIDs).
			Count(&live).Error; err != nil {
			return nil, store.DBError(err)
		}
		return []models.Fact{
			{Label: "Entries that exist", Value: fmt.Sprintf("%d of %d", live, len(a.LogIDs))},
			{Label: "Missing or already deleted", Value: fmt.Sprintf("%d", int64(len(a.LogIDs))-live)},
		}, nil
	}
	return nil, nil
}
