// Package demoledger is the built-in demo business system, kept in the same
// database as countersign's store (tables demo_*): refunds over demo orders,
// customer emails into an outbox and deletion of demo log entries.
package demoledger

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// Ledger is the built-in demo business system: refunds over demo orders,
// customer emails into an outbox and deletion of demo log entries. It keeps
// the HTTP adapter contract in-process: validation answers a state version,
// execution is idempotent on the idempotency key, the execution's downstream
// key (its own record, whose request_key column holds that key, is written in
// the same transaction as the change) and guarded by optimistic concurrency
// on that version.
type Ledger struct {
	db     *gorm.DB
	reader *sql.DB
	clock  models.Clock
}

// Handle is what the ledger needs of the store: its database handles and
// clock (*store.Store has them).
type Handle interface {
	Gorm() *gorm.DB
	ReadDB() *sql.DB
	Clock() models.Clock
}

// New returns the demo business system over the store's database.
func New(h Handle) *Ledger { return &Ledger{db: h.Gorm(), reader: h.ReadDB(), clock: h.Clock()} }

var _ models.Adapter = (*Ledger)(nil)

type demoOrderRow struct {
	TenantID      string `gorm:"primaryKey"`
	ID            string `gorm:"primaryKey"`
	Label         string
	Currency      string
	PayableMinor  int64
	RefundedMinor int64
	Version       int64
}

func (demoOrderRow) TableName() string { return "demo_orders" }

type demoCustomerRow struct {
	TenantID string `gorm:"primaryKey"`
	ID       string `gorm:"primaryKey"`
	Name     string
	Email    string
	Version  int64
}

func (demoCustomerRow) TableName() string { return "demo_customers" }

type demoLogRow struct {
	TenantID  string `gorm:"primaryKey"`
	ID        string `gorm:"primaryKey"`
	Message   string
	DeletedAt *int64
}

func (demoLogRow) TableName() string { return "demo_logs" }

type demoOutboxRow struct {
	TenantID   string `gorm:"primaryKey"`
	RequestKey string `gorm:"primaryKey"`
	CustomerID string
	Template   string
	Subject    string
	Body       string
	SendAt     *int64
	CreatedAt  int64 `gorm:"autoCreateTime:false"`
}

func (demoOutboxRow) TableName() string { return "demo_outbox" }

type demoLedgerExecRow struct {
	TenantID    string `gorm:"primaryKey"`
	RequestKey  string `gorm:"primaryKey"`
	Tool        string
	Status      string
	ProviderRef string
	Result      string
	CreatedAt   int64 `gorm:"autoCreateTime:false"`
}

func (demoLedgerExecRow) TableName() string { return "demo_ledger_executions" }

type refundArgs struct {
	OrderID     string `json:"order_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
}

type emailArgs struct {
	CustomerID string  `json:"customer_id"`
	Template   string  `json:"template"`
	Subject    string  `json:"subject"`
	Body       string  `json:"body"`
	SendAt     *string `json:"send_at"`
}

type deleteLogsArgs struct {
	LogIDs []string `json:"log_ids"`
	Reason string   `json:"reason"`
}

func decodeArgs(raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return models.Wrap(models.EInvalidRequest, err, "arguments do not fit the demo ledger")
	}
	return nil
}

// logSetVersion names the state of a set of live log entries: it changes as
// soon as any of them is deleted.
func logSetVersion(live []string) string {
	sum := sha256.Sum256([]byte(strings.Join(live, "\n")))
	return "live:" + hex.EncodeToString(sum[:8])
}

// errConflict rolls back an execute transaction whose expected state moved.
var errConflict = errors.New("demo ledger: state moved")

// errDuplicate rolls back an execute transaction whose key another
// execution recorded first.
var errDuplicate = errors.New("demo ledger: key already recorded")

// errAnswered rolls back an execute transaction that found the outcome
// recorded for its key: nothing of it may stay.
var errAnswered = errors.New("demo ledger: answered from the record")

// Execute performs the write once per idempotency key. The change is made
// first, guarded by the expected state version, and the key's record is
// inserted after it with the outcome, in the same transaction (ON CONFLICT
// DO NOTHING on the key): two statements for a refund instead of a claim, the
// change and an update of the claim. When the guarded change matches
// nothing, or the key was recorded first (by a concurrent execute with the
// same key, which then committed), the transaction rolls back and the
// recorded outcome is the answer.
func (l *Ledger) Execute(ctx context.Context, req models.ExecuteRequest) (models.ExecuteResult, error) {
	return l.execute(l.db.WithContext(ctx), req)
}

// ExecuteIn is Execute inside the caller's transaction tx (the one that
// consumes the token: the ledger's tables are in countersign's database).
// Its changes are made under a savepoint, so that a refused write leaves
// nothing in tx.
// A transaction of another database (one the ledger was not built over) is
// refused before anything is written.
func (l *Ledger) ExecuteIn(tx *gorm.DB, req models.ExecuteRequest) (models.ExecuteResult, error) {
	if tx.Config.ConnPool != l.db.Config.ConnPool {
		return models.ExecuteResult{}, models.Errorf(models.EInternal, "the demo ledger was given a transaction of another database")
	}
	return l.execute(tx, req)
}

var _ store.TxAdapter = (*Ledger)(nil)

// execute runs the write in a transaction of db's, a savepoint when db is
// in a transaction already.
func (l *Ledger) execute(db *gorm.DB, req models.ExecuteRequest) (models.ExecuteResult, error) {
	if req.IdempotencyKey == "" {
		return models.ExecuteResult{}, models.Errorf(models.EInvalidRequest, "missing idempotency key")
	}
	now := l.clock.Now().UnixMilli()
	var out models.ExecuteResult
	err := db.Transaction(func(tx *gorm.DB) error {
		status, result, err := l.apply(tx, req, now)
		if err == nil {
			rec := demoLedgerExecRow{TenantID: req.Tenant, RequestKey: req.IdempotencyKey, Tool: req.Tool,
				Status: string(status), ProviderRef: "dl_" + strings.TrimPrefix(models.NewID("x"), "x_"),
				Result: string(result), CreatedAt: now}
			n, ierr := store.Exec(tx, `INSERT INTO demo_ledger_executions (tenant_id, request_key, tool, status, provider_ref, result, created_at)
 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
				rec.TenantID, rec.RequestKey, rec.Tool, rec.Status, rec.ProviderRef, rec.Result, rec.CreatedAt)
			if ierr != nil {
				return ierr
			}
			if n == 1 {
				out = rec.result()
				return nil
			}
			err = errDuplicate
		}
		if !errors.Is(err, errConflict) && !errors.Is(err, errDuplicate) {
			return err
		}
		// A write with this key may have arrived before: its outcome is the
		// answer, and this transaction's change (if any) is undone.
		var prev demoLedgerExecRow
		ferr := tx.Where("tenant_id = ? AND request_key = ?", req.Tenant, req.IdempotencyKey).Take(&prev).Error
		if errors.Is(ferr, gorm.ErrRecordNotFound) {
			return err
		}
		if ferr != nil {
			return ferr
		}
		out = prev.result()
		return errAnswered
	})
	switch {
	case errors.Is(err, errAnswered):
		return out, nil
	case errors.Is(err, errConflict):
		return models.ExecuteResult{}, models.ErrStateConflict
	case err != nil:
		return models.ExecuteResult{}, fmt.Errorf("demo ledger: %w: %w", models.ErrOutcomeUnknown, err)
	}
	return out, nil
}

func (r demoLedgerExecRow) result() models.ExecuteResult {
	return models.ExecuteResult{Status: models.Status(r.Status), ProviderRef: r.ProviderRef, Result: json.RawMessage(r.Result)}
}

// apply makes the business change inside the execute transaction. A moved
// state version returns errConflict (the whole transaction rolls back:
// nothing happened for that key, unless an earlier execute with the key
// recorded an outcome, which Execute then answers).
func (l *Ledger) apply(tx *gorm.DB, req models.ExecuteRequest, now int64) (models.Status, json.RawMessage, error) {
	version, _ := strconv.ParseInt(req.ExpectedStateVersion, 10, 64)
	switch req.Tool {
	case "refund_order":
		var a refundArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return "", nil, err
		}
		n, err := store.Exec(tx, `UPDATE demo_orders SET refunded_minor = refunded_minor + $1, version = version + 1
 WHERE tenant_id = $2 AND id = $3 AND version = $4 AND currency = $5 AND refunded_minor + $1 <= payable_minor`,
			a.AmountMinor, req.Tenant, a.OrderID, version, a.Currency)
		if err != nil {
			return "", nil, err
		}
		if n == 0 {
			var o demoOrderRow
			err := tx.Where("tenant_id = ? AND id = ?", req.Tenant, a.OrderID).Take(&o).Error
			if err != nil || o.Version != version {
				return "", nil, errConflict
			}
			if o.Currency != a.Currency {
				r, _ := json.Marshal(map[string]any{"code": "currency_mismatch", "order_currency": o.Currency})
				return models.StatusFailedTerminal, r, nil
			}
			r, _ := json.Marshal(map[string]any{"code": "amount_exceeds_refundable_balance",
				"refundable_minor": o.PayableMinor - o.RefundedMinor})
			return models.StatusFailedTerminal, r, nil
		}
		r, _ := json.Marshal(map[string]any{"order_id": a.OrderID, "refunded_minor": a.AmountMinor, "currency": a.Currency})
		return models.StatusSucceeded, r, nil
	case "send_customer_email":
		var a emailArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return "", nil, err
		}
		// The customer must stay at the version validated until the email
		// is queued: a shared lock on PostgreSQL (a change of the customer
		// waits; other emails to the customer do not), nothing more on
		// SQLite, whose one writer is this transaction.
		q := "SELECT count(*) FROM demo_customers WHERE tenant_id = ? AND id = ? AND version = ?"
		if tx.Dialector.Name() == "postgres" {
			q = "SELECT count(*) FROM (SELECT 1 FROM demo_customers WHERE tenant_id = ? AND id = ? AND version = ? FOR SHARE) AS c"
		}
		var n int64
		if err := tx.Raw(q, req.Tenant, a.CustomerID, version).Scan(&n).Error; err != nil {
			return "", nil, err
		}
		if n == 0 {
			return "", nil, errConflict
		}
		row := demoOutboxRow{TenantID: req.Tenant, RequestKey: req.IdempotencyKey, CustomerID: a.CustomerID,
			Template: a.Template, Subject: a.Subject, Body: a.Body, CreatedAt: now}
		if a.SendAt != nil {
			t, err := time.Parse(time.RFC3339, *a.SendAt)
			if err != nil {
				return "", nil, models.Wrap(models.EInvalidRequest, err, "send_at is not RFC 3339")
			}
			v := t.UnixMilli()
			row.SendAt = &v
		}
		// Keyed by the idempotency key: a second write with it queues
		// nothing, and the key's record tells its outcome.
		ok, err := store.InsertOnce(tx, &row)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			return "", nil, errDuplicate
		}
		r, _ := json.Marshal(map[string]any{"queued": true, "customer_id": a.CustomerID})
		return models.StatusSucceeded, r, nil
	case "delete_logs":
		var a deleteLogsArgs
		if err := decodeArgs(req.Arguments, &a); err != nil {
			return "", nil, err
		}
		var live []string
		if err := tx.Model(&demoLogRow{}).Where("tenant_id = ? AND id IN ? AND deleted_at IS NULL", req.Tenant, a.LogIDs).
			Order("id").Pluck("id", &live).Error; err != nil {
			return "", nil, err
		}
		if len(live) != len(a.LogIDs) || logSetVersion(live) != req.ExpectedStateVersion {
			return "", nil, errConflict
		}
		res := tx.Model(&demoLogRow{}).Where("tenant_id = ? AND id IN ? AND deleted_at IS NULL", req.Tenant, a.LogIDs).
			Update("deleted_at", now)
		if res.Error != nil {
			return "", nil, res.Error
		}
		if int(res.RowsAffected) != len(a.LogIDs) {
			return "", nil, errConflict
		}
		r, _ := json.Marshal(map[string]any{"deleted": len(a.LogIDs)})
		return models.StatusSucceeded, r, nil
	}
	return "", nil, models.Errorf(models.EBusinessRule, "the demo ledger does not handle %s", req.Tool)
}

// Status reports the outcome recorded for an idempotency key, or
// models.ErrNeverArrived.
func (l *Ledger) Status(ctx context.Context, tenant, idempotencyKey string) (models.ExecuteResult, error) {
	var row demoLedgerExecRow
	err := l.db.WithContext(ctx).Where("tenant_id = ? AND request_key = ?", tenant, idempotencyKey).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return models.ExecuteResult{}, models.ErrNeverArrived
	}
	if err != nil {
		return models.ExecuteResult{}, store.DBError(err)
	}
	return row.result(), nil
}

// Order is a demo order's current state, for tests and the demo.
type Order struct {
	ID            string
	Label         string
	Currency      string
	PayableMinor  int64
	RefundedMinor int64
	Version       int64
}

// Order returns a demo order of the tenant, or ENotFound.
func (l *Ledger) Order(ctx context.Context, tenantID, id string) (Order, error) {
	var o demoOrderRow
	if err := l.db.WithContext(ctx).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&o).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return Order{}, models.Errorf(models.ENotFound, "no order %q", id)
		}
		return Order{}, store.DBError(err)
	}
	return Order{ID: o.ID, Label: o.Label, Currency: o.Currency, PayableMinor: o.PayableMinor,
		RefundedMinor: o.RefundedMinor, Version: o.Version}, nil
}

// BumpOrder changes a demo order out of band (another channel touched it):
// its version grows, so pending previews become stale.
func (l *Ledger) BumpOrder(ctx context.Context, tenantID, id string) error {
	res := l.db.WithContext(ctx).Model(&demoOrderRow{}).Where("tenant_id = ? AND id = ?", tenantID, id).
		Update("version", gorm.Expr("version + 1"))
	if res.Error != nil {
		return store.DBError(res.Error)
	}
	if res.RowsAffected == 0 {
		return models.Errorf(models.ENotFound, "no order %q", id)
	}
	return nil
}

// ExecutionsFor counts the demo ledger's applied writes for an idempotency
// key (an execution's DownstreamKey): the business-side proof of
// exactly-once.
func (l *Ledger) ExecutionsFor(ctx context.Context, tenantID, idempotencyKey string) (int, error) {
	var n int64
	err := l.db.WithContext(ctx).Model(&demoLedgerExecRow{}).
		Where("tenant_id = ? AND request_key = ? AND status = ?", tenantID, idempotencyKey, string(models.StatusSucceeded)).Count(&n).Error
	return int(n), store.DBError(err)
}
