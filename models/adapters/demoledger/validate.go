package demoledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
// with one statement, as plain SQL on the store's read pool: validation and
// description are asked outside any transaction, and on SQLite they need
// not queue behind the writer. An unknown tool is errUnhandled.
func (l *Ledger) read(ctx context.Context, tool, tenant string, args json.RawMessage) (target, error) {
	t := target{tool: tool}
	var err error
	switch tool {
	case "refund_order":
		if err := decodeArgs(args, &t.refund); err != nil {
			return t, err
		}
		o := &t.order
		err = l.reader.QueryRowContext(ctx, `SELECT tenant_id, id, label, currency, payable_minor, refunded_minor, version
 FROM demo_orders WHERE tenant_id = $1 AND id = $2`, tenant, t.refund.OrderID).
			Scan(&o.TenantID, &o.ID, &o.Label, &o.Currency, &o.PayableMinor, &o.RefundedMinor, &o.Version)
	case "send_customer_email":
		if err := decodeArgs(args, &t.email); err != nil {
			return t, err
		}
		c := &t.customer
		err = l.reader.QueryRowContext(ctx, `SELECT tenant_id, id, name, email, version
 FROM demo_customers WHERE tenant_id = $1 AND id = $2`, tenant, t.email.CustomerID).
			Scan(&c.TenantID, &c.ID, &c.Name, &c.Email, &c.Version)
	case "delete_logs":
		if err := decodeArgs(args, &t.logs); err != nil {
			return t, err
		}
		t.live, err = l.liveLogs(ctx, tenant, t.logs.LogIDs)
		return t, err
	default:
		return t, errUnhandled
	}
	if errors.Is(err, sql.ErrNoRows) {
		return t, nil
	}
	if err != nil {
		return t, store.DBError(err)
	}
	t.found = true
	return t, nil
}

// liveLogs returns the entries of ids that exist and are not deleted, by
// id.
func (l *Ledger) liveLogs(ctx context.Context, tenant string, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var q strings.Builder
	q.WriteString("SELECT id FROM demo_logs WHERE tenant_id = $1 AND deleted_at IS NULL AND id IN (")
	args := make([]any, 0, len(ids)+1)
	args = append(args, tenant)
	for i, id := range ids {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("$" + strconv.Itoa(i+2))
		args = append(args, id)
	}
	q.WriteString(") ORDER BY id")
	rows, err := l.reader.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, store.DBError(err)
	}
	defer rows.Close()
	var live []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, store.DBError(err)
		}
		live = append(live, id)
	}
	return live, store.DBError(rows.Err())
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
