package demoledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
)

var _ models.DescribeAdapter = (*Ledger)(nil)

// Describe tells a reviewer what a write would do in the demo ledger as it
// stands now: for a refund the order's paid amount, and its refunded and
// refundable amounts before → after; for an e-mail the customer; for a
// deletion how many of the entries exist before → after. A target that
// does not exist is a fact too.
func (l *Ledger) Describe(ctx context.Context, req models.DescribeRequest) (models.Description, error) {
	db := l.db.WithContext(ctx)
	switch req.Tool {
	case "refund_order":
		var a refundArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return models.Description{}, err
		}
		var o demoOrderRow
		err := db.Where("tenant_id = ? AND id = ?", req.Tenant, a.OrderID).Take(&o).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return describeFacts(models.Fact{Label: "Order", Value: fmt.Sprintf("%s does not exist", a.OrderID)}), nil
		}
		if err != nil {
			return models.Description{}, store.DBError(err)
		}
		money := func(minor int64) string {
			s, err := registry.FormatMoney(minor, o.Currency)
			if err != nil {
				return fmt.Sprintf("%d %s (minor units)", minor, o.Currency)
			}
			return s + " " + o.Currency
		}
		change := func(field, label string, before, after int64) models.Change {
			return models.Change{Field: field, Label: label,
				Before: []byte(strconv.FormatInt(before, 10)), After: []byte(strconv.FormatInt(after, 10)),
				BeforeDisplay: money(before), AfterDisplay: money(after)}
		}
		left := o.PayableMinor - o.RefundedMinor
		return models.Description{
			Facts: []models.Fact{{Label: "Order", Value: o.Label}, {Label: "Paid", Value: money(o.PayableMinor)}},
			Changes: []models.Change{
				change("refunded_minor", "Refunded", o.RefundedMinor, o.RefundedMinor+a.AmountMinor),
				change("refundable_minor", "Refundable", left, left-a.AmountMinor),
			},
		}, nil
	case "send_customer_email":
		var a emailArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return models.Description{}, err
		}
		var c demoCustomerRow
		err := db.Where("tenant_id = ? AND id = ?", req.Tenant, a.CustomerID).Take(&c).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return describeFacts(models.Fact{Label: "Customer", Value: fmt.Sprintf("%s does not exist", a.CustomerID)}), nil
		}
		if err != nil {
			return models.Description{}, store.DBError(err)
		}
		return describeFacts(models.Fact{Label: "Customer", Value: c.Name}, models.Fact{Label: "E-mail address", Value: c.Email}), nil
	case "delete_logs":
		var a deleteLogsArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return models.Description{}, err
		}
		var live int64
		if err := db.Model(&demoLogRow{}).Where("tenant_id = ? AND id IN ? AND deleted_at IS NULL", req.Tenant, a.LogIDs).
			Count(&live).Error; err != nil {
			return models.Description{}, store.DBError(err)
		}
		return models.Description{
			Facts: []models.Fact{{Label: "Missing or already deleted", Value: fmt.Sprintf("%d of %d", int64(len(a.LogIDs))-live, len(a.LogIDs))}},
			Changes: []models.Change{{Field: "existing_entries", Label: "Entries that exist",
				Before: []byte(strconv.FormatInt(live, 10)), After: []byte("0"),
				BeforeDisplay: fmt.Sprintf("%d of %d", live, len(a.LogIDs)), AfterDisplay: fmt.Sprintf("0 of %d", len(a.LogIDs))}},
		}, nil
	}
	return models.Description{}, models.ErrNoDescription
}

func describeFacts(facts ...models.Fact) models.Description {
	return models.Description{Facts: facts, Changes: []models.Change{}}
}
