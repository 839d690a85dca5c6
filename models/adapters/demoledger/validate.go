package demoledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/store"
)

var _ models.ValidateDescribeAdapter = (*Ledger)(nil)

func describeFacts(facts ...models.Fact) models.Description {
	return models.Description{Facts: facts, Changes: []models.Change{}}
}

// target is what the demo ledger knows of a write's target, read once:
// Validate's answer and Describe's are both made from it.
type target struct {
	tool  string
	found bool // the order or customer exists (refunds, e-mails)

	refund   refundArgs
	order    demoOrderRow
	email    emailArgs
	customer demoCustomerRow
	logs     deleteLogsArgs
	live     []string // the entries of logs.LogIDs that exist, by id
}

// errUnhandled: the demo ledger has no such tool.
var errUnhandled = errors.New("demo ledger: unhandled tool")

// read decodes a write's arguments and reads its target as it stands now,
// with one statement. An unknown tool is errUnhandled.
func (l *Ledger) read(ctx context.Context, tool, tenant string, args json.RawMessage) (target, error) {
	db := l.db.WithContext(ctx)
	t := target{tool: tool}
	switch tool {
	case "refund_order":
		if err := decodeArgs(args, &t.refund); err != nil {
			return t, err
		}
		err := db.Where("tenant_id = ? AND id = ?", tenant, t.refund.OrderID).Take(&t.order).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return t, nil
		}
		if err != nil {
			return t, store.DBError(err)
		}
		t.found = true
	case "send_customer_email":
		if err := decodeArgs(args, &t.email); err != nil {
			return t, err
		}
		err := db.Where("tenant_id = ? AND id = ?", tenant, t.email.CustomerID).Take(&t.customer).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return t, nil
		}
		if err != nil {
			return t, store.DBError(err)
		}
		t.found = true
	case "delete_logs":
		if err := decodeArgs(args, &t.logs); err != nil {
			return t, err
		}
		err := db.Model(&demoLogRow{}).Where("tenant_id = ? AND id IN ? AND deleted_at IS NULL", tenant, t.logs.LogIDs).
			Order("id").Pluck("id", &t.live).Error
		if err != nil {
			return t, store.DBError(err)
		}
	default:
		return t, errUnhandled
	}
	return t, nil
}

// Validate answers the resource's state version and label, or the business
// problems that forbid the write.
func (l *Ledger) Validate(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, error) {
	t, err := l.read(ctx, req.Tool, req.Tenant, req.Arguments)
	if errors.Is(err, errUnhandled) {
		return models.ValidateResult{}, models.Errorf(models.EBusinessRule, "the demo ledger does not handle %s", req.Tool)
	}
	if err != nil {
		return models.ValidateResult{}, err
	}
	return t.validation(), nil
}

// Describe tells a reviewer what a write would do in the demo ledger as it
// stands now: for a refund the order's paid amount, and its refunded and
// refundable amounts before → after; for an e-mail the customer; for a
// deletion how many of the entries exist before → after. A target that
// does not exist is a fact too.
func (l *Ledger) Describe(ctx context.Context, req models.DescribeRequest) (models.Description, error) {
	t, err := l.read(ctx, req.Tool, req.Tenant, req.Arguments)
	if errors.Is(err, errUnhandled) {
		return models.Description{}, models.ErrNoDescription
	}
	if err != nil {
		return models.Description{}, err
	}
	return t.description(), nil
}

// ValidateDescribe is Validate and, for an allowed write, Describe, over
// one read of the target.
func (l *Ledger) ValidateDescribe(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, *models.Description, error) {
	t, err := l.read(ctx, req.Tool, req.Tenant, req.Arguments)
	if errors.Is(err, errUnhandled) {
		return models.ValidateResult{}, nil, models.Errorf(models.EBusinessRule, "the demo ledger does not handle %s", req.Tool)
	}
	if err != nil {
		return models.ValidateResult{}, nil, err
	}
	vr := t.validation()
	if !vr.OK {
		return vr, nil, nil
	}
	d := t.description()
	return vr, &d, nil
}

// validation is Validate's answer over the target.
func (t target) validation() models.ValidateResult {
	switch t.tool {
	case "refund_order":
		a, o := t.refund, t.order
		if !t.found {
			return models.ValidateResult{Problems: []string{fmt.Sprintf("order %s does not exist", a.OrderID)}}
		}
		res := models.ValidateResult{OK: true, StateVersion: strconv.FormatInt(o.Version, 10), ResourceLabel: o.Label}
		if a.Currency != o.Currency {
			res.OK = false
			res.Problems = append(res.Problems, fmt.Sprintf("order %s was paid in %s, not %s", o.ID, o.Currency, a.Currency))
		}
		if left := o.PayableMinor - o.RefundedMinor; a.AmountMinor > left {
			res.OK = false
			res.Problems = append(res.Problems, fmt.Sprintf("amount %d exceeds the refundable balance %d (minor units)", a.AmountMinor, left))
		}
		return res
	case "send_customer_email":
		if !t.found {
			return models.ValidateResult{Problems: []string{fmt.Sprintf("customer %s does not exist", t.email.CustomerID)}}
		}
		c := t.customer
		return models.ValidateResult{OK: true, StateVersion: strconv.FormatInt(c.Version, 10),
			ResourceLabel: fmt.Sprintf("%s <%s>", c.Name, c.Email)}
	default: // delete_logs
		ids, live := t.logs.LogIDs, t.live
		if len(live) != len(ids) {
			return models.ValidateResult{Problems: []string{fmt.Sprintf("%d of the %d log entries do not exist or are already deleted",
				len(ids)-len(live), len(ids))}}
		}
		return models.ValidateResult{OK: true, StateVersion: logSetVersion(live),
			ResourceLabel: fmt.Sprintf("%d log entries", len(live))}
	}
}

// description is Describe's answer over the target.
func (t target) description() models.Description {
	switch t.tool {
	case "refund_order":
		a, o := t.refund, t.order
		if !t.found {
			return describeFacts(models.Fact{Label: "Order", Value: fmt.Sprintf("%s does not exist", a.OrderID)})
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
		}
	case "send_customer_email":
		if !t.found {
			return describeFacts(models.Fact{Label: "Customer", Value: fmt.Sprintf("%s does not exist", t.email.CustomerID)})
		}
		return describeFacts(models.Fact{Label: "Customer", Value: t.customer.Name}, models.Fact{Label: "E-mail address", Value: t.customer.Email})
	default: // delete_logs
		ids, live := t.logs.LogIDs, int64(len(t.live))
		return models.Description{
			Facts: []models.Fact{{Label: "Missing or already deleted", Value: fmt.Sprintf("%d of %d", int64(len(ids))-live, len(ids))}},
			Changes: []models.Change{{Field: "existing_entries", Label: "Entries that exist",
				Before: []byte(strconv.FormatInt(live, 10)), After: []byte("0"),
				BeforeDisplay: fmt.Sprintf("%d of %d", live, len(ids)), AfterDisplay: fmt.Sprintf("0 of %d", len(ids))}},
		}
	}
}
