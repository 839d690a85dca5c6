package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/countersign/countersign/models"
)

type executionRow struct {
	ID           string `gorm:"primaryKey"`
	TenantID     string
	ProposalID   string
	TokenJTI     string `gorm:"column:token_jti"`
	RequestKey   string
	Operation    string
	ArgsDigest   string
	Status       string
	Attempts     int
	ProviderRef  string
	Result       string
	ErrorCode    string
	ErrorMessage string
	LeaseUntil   int64
	// OwnerInstance is the instance holding the current attempt (see
	// RegisterInstance); empty for executions from before instances.
	OwnerInstance string
	DownstreamKey string
	CreatedAt     int64 `gorm:"autoCreateTime:false"`
	UpdatedAt     int64 `gorm:"autoUpdateTime:false"`
	CompletedAt   *int64
	Receipt       string
}

func (executionRow) TableName() string { return "executions" }

// executionCols lists an execution's columns in the order scan reads them.
const executionCols = `id, tenant_id, proposal_id, token_jti, request_key, operation, args_digest, status, attempts,
 provider_ref, result, error_code, error_message, lease_until, owner_instance, downstream_key, created_at, updated_at,
 completed_at, receipt`

// scan reads the columns of executionCols.
func (r *executionRow) scan(row interface{ Scan(...any) error }) error {
	return row.Scan(&r.ID, &r.TenantID, &r.ProposalID, &r.TokenJTI, &r.RequestKey, &r.Operation, &r.ArgsDigest,
		&r.Status, &r.Attempts, &r.ProviderRef, &r.Result, &r.ErrorCode, &r.ErrorMessage, &r.LeaseUntil,
		&r.OwnerInstance, &r.DownstreamKey, &r.CreatedAt, &r.UpdatedAt, &r.CompletedAt, &r.Receipt)
}

// insertExecutionSQL inserts an execution unless one already holds its
// downstream key. Only that key may conflict: a clash on the id, the
// proposal or the token is a broken invariant and fails the statement.
var insertExecutionSQL = "INSERT INTO executions (" + executionCols + ") VALUES (" +
	placeholders(1, strings.Count(executionCols, ",")+1) + ") ON CONFLICT (tenant_id, downstream_key) DO NOTHING"

// insertExecution inserts a new execution, unless one already holds its
// downstream key (inserted=false).
func insertExecution(tx *gorm.DB, r *executionRow) (inserted bool, err error) {
	ctx, c := raw(tx)
	n, err := execCount(ctx, c, insertExecutionSQL,
		r.ID, r.TenantID, r.ProposalID, r.TokenJTI, r.RequestKey, r.Operation, r.ArgsDigest, r.Status, r.Attempts,
		r.ProviderRef, r.Result, r.ErrorCode, r.ErrorMessage, r.LeaseUntil, r.OwnerInstance, r.DownstreamKey,
		r.CreatedAt, r.UpdatedAt, r.CompletedAt, r.Receipt)
	return n == 1, err
}

func (r executionRow) model() models.Execution {
	e := models.Execution{ID: r.ID, TenantID: r.TenantID, ProposalID: r.ProposalID, TokenJTI: r.TokenJTI,
		RequestKey: r.RequestKey, DownstreamKey: r.DownstreamKey, Operation: r.Operation, ArgsDigest: r.ArgsDigest,
		Status: models.Status(r.Status), Attempts: r.Attempts, ProviderRef: r.ProviderRef,
		ErrorCode: r.ErrorCode, ErrorMessage: r.ErrorMessage, LeaseUntil: fromMS(r.LeaseUntil),
		CreatedAt: fromMS(r.CreatedAt), UpdatedAt: fromMS(r.UpdatedAt), CompletedAt: fromMSPtr(r.CompletedAt),
		ReceiptJWS: r.Receipt}
	if r.Result != "" {
		e.Result = json.RawMessage(r.Result)
	}
	return e
}

// ClaimExecution takes an execution for one more attempt, atomically: it
// matches only while the execution is in one of from and no other attempt
// holds it — its lease ran out, or it is executing and the instance that
// holds it has a stale heartbeat (it crashed). The execution and its
// proposal move to executing, attempts grows by one, this store's instance
// owns it and the lease runs to leaseUntil. ok=false means someone else
// holds it or it settled.
func (s *Store) ClaimExecution(ctx context.Context, tenantID, id string, from []models.Status, now, leaseUntil time.Time) (models.Execution, bool, error) {
	var (
		out     models.Execution
		ok      bool
		renewed bool
	)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ok, renewed = false, false
		lapsed, args := s.lapsed(now)
		row, found, err := updateExecution(tx.
			Where("tenant_id = ? AND id = ? AND status IN ?", tenantID, id, statusStrings(from)).
			Where(lapsed, args...),
			map[string]any{"status": string(models.StatusExecuting), "attempts": gorm.Expr("attempts + 1"),
				"lease_until": ms(leaseUntil), "updated_at": ms(now), "owner_instance": s.instanceID()})
		if err != nil || !found {
			return err
		}
		if renewed, err = s.vouch(tx, now); err != nil {
			return err
		}
		if err := s.mirror(tx, row, now); err != nil {
			return err
		}
		out, ok = row.model(), true
		return appendAudit(tx, tenantID, now, executionEvent(models.AuditExecutionAttempt, models.ActorSystem, row, nil))
	})
	if err == nil && renewed {
		s.seen(now)
	}
	return out, ok, err
}

// ExtendLease moves the lease of the attempt numbered attempt to
// leaseUntil, atomically and only while that attempt still owns the
// execution (status executing, same attempt count). ok=false means another
// attempt took it over or it settled.
func (s *Store) ExtendLease(ctx context.Context, tenantID, id string, attempt int, leaseUntil time.Time) (bool, error) {
	res := s.db.WithContext(ctx).Model(&executionRow{}).
		Where("tenant_id = ? AND id = ? AND status = ? AND attempts = ?", tenantID, id, string(models.StatusExecuting), attempt).
		Update("lease_until", ms(leaseUntil))
	if res.Error != nil {
		return false, dbErr(res.Error)
	}
	return res.RowsAffected == 1, nil
}

// ClaimRetry takes a failed_retryable execution for one more attempt, like
// ClaimExecution, and only while its token's expiry is after now (windows
// are right-open): the same conditional UPDATE checks the execution's state
// and the token's immutable expires_at, so no retry can be claimed at or
// after exp. A revocation moves the execution out of failed_retryable in
// its own conditional UPDATE of the same row, so exactly one of the two
// wins. ok=false means it is expired, revoked, settled or held by another
// attempt; the caller reads the records to tell which.
func (s *Store) ClaimRetry(ctx context.Context, tenantID, id string, now, leaseUntil time.Time) (models.Execution, bool, error) {
	var (
		out     models.Execution
		ok      bool
		renewed bool
	)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		ok, renewed = false, false
		row, found, err := updateExecution(tx.
			Where("tenant_id = ? AND id = ? AND status = ? AND lease_until <= ?",
				tenantID, id, string(models.StatusFailedRetryable), ms(now)).
			Where("EXISTS (SELECT 1 FROM tokens t WHERE t.jti = executions.token_jti AND t.tenant_id = ? AND t.status = ? AND t.expires_at > ?)",
				tenantID, string(models.TokenConsumed), ms(now)),
			map[string]any{"status": string(models.StatusExecuting), "attempts": gorm.Expr("attempts + 1"),
				"lease_until": ms(leaseUntil), "updated_at": ms(now), "owner_instance": s.instanceID()})
		if err != nil || !found {
			return err
		}
		if renewed, err = s.vouch(tx, now); err != nil {
			return err
		}
		if err := s.mirror(tx, row, now); err != nil {
			return err
		}
		out, ok = row.model(), true
		return appendAudit(tx, tenantID, now, executionEvent(models.AuditExecutionAttempt, models.ActorSystem, row, nil))
	})
	if err == nil && renewed {
		s.seen(now)
	}
	return out, ok, err
}

// Outcome is the result of one execution attempt.
type Outcome struct {
	Status       models.Status // succeeded, failed_terminal, failed_retryable or unknown
	ProviderRef  string
	Result       json.RawMessage
	ErrorCode    string
	ErrorMessage string
	// RetryAt, for unknown, is when the reconciler may ask again (the
	// execution's lease runs until then).
	RetryAt time.Time
	// Receipt, for a settled outcome, is the signed receipt (compact JWS),
	// stored by the same UPDATE.
	Receipt string
}

// FinishExecution records the outcome of the attempt numbered attempt. It
// matches only while that attempt still owns the execution (status executing
// and the same attempt count), so a late answer of a superseded attempt
// changes nothing (ok=false). The proposal's status follows in the same
// transaction.
func (s *Store) FinishExecution(ctx context.Context, tenantID, id string, attempt int, o Outcome, now time.Time) (models.Execution, bool, error) {
	var (
		out models.Execution
		ok  bool
	)
	err := s.tx(ctx, func(tx *gorm.DB) error {
		row, found, err := s.finish(tx, tenantID, id, attempt, o, now)
		if err != nil || !found {
			ok = false
			return err
		}
		out, ok = row.model(), true
		return appendAudit(tx, tenantID, now, outcomeEvent(row))
	})
	return out, ok, err
}

// finish records the outcome o of attempt in tx, with the proposal's
// status and event, and returns the execution as updated (found=false when
// the attempt no longer owns it). The caller appends the audit entry.
func (s *Store) finish(tx *gorm.DB, tenantID, id string, attempt int, o Outcome, now time.Time) (executionRow, bool, error) {
	set := "status = $1, updated_at = $2, error_code = $3, error_message = $4, lease_until = $5"
	args := make([]any, 0, 13)
	args = append(args, string(o.Status), ms(now), o.ErrorCode, o.ErrorMessage, o.leaseUntil(now))
	add := func(col string, v any) {
		args = append(args, v)
		set += ", " + col + " = $" + strconv.Itoa(len(args))
	}
	if o.ProviderRef != "" {
		add("provider_ref", o.ProviderRef)
	}
	if o.Result != nil {
		add("result", string(o.Result))
	}
	if o.completes() {
		add("completed_at", ms(now))
		if o.Receipt != "" {
			add("receipt", o.Receipt)
		}
	}
	n := len(args)
	q := "UPDATE executions SET " + set + " WHERE tenant_id = $" + strconv.Itoa(n+1) + " AND id = $" + strconv.Itoa(n+2) +
		" AND status = $" + strconv.Itoa(n+3) + " AND attempts = $" + strconv.Itoa(n+4) + " RETURNING " + executionCols
	args = append(args, tenantID, id, string(models.StatusExecuting), attempt)
	ctx, c := raw(tx)
	var row executionRow
	if err := row.scan(c.QueryRowContext(ctx, q, args...)); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return executionRow{}, false, nil
		}
		return executionRow{}, false, err
	}
	if err := s.mirror(tx, row, now); err != nil {
		return executionRow{}, false, err
	}
	return row, true, nil
}

// leaseUntil is how long the execution stays held after outcome o, reached
// at now: to RetryAt when the business system is to be asked again later,
// otherwise not past now.
func (o Outcome) leaseUntil(now time.Time) int64 {
	if o.RetryAt.After(now) {
		return ms(o.RetryAt)
	}
	return ms(now)
}

// completes reports whether outcome o ends the execution (it then has a
// completion time and may carry a receipt).
func (o Outcome) completes() bool {
	return o.Status == models.StatusSucceeded || o.Status == models.StatusFailedTerminal
}

// settled is r after outcome o was reached at now, as finish records it.
func (r executionRow) settled(o Outcome, now time.Time) executionRow {
	r.Status, r.UpdatedAt, r.ErrorCode, r.ErrorMessage = string(o.Status), ms(now), o.ErrorCode, o.ErrorMessage
	r.LeaseUntil = o.leaseUntil(now)
	if o.ProviderRef != "" {
		r.ProviderRef = o.ProviderRef
	}
	if o.Result != nil {
		r.Result = string(o.Result)
	}
	if o.completes() {
		done := ms(now)
		r.CompletedAt = &done
		if o.Receipt != "" {
			r.Receipt = o.Receipt
		}
	}
	return r
}

// SetReceipt stores the signed receipt of a settled execution that has
// none yet (settled before receipts were signed). The first one stored
// stays; ok reports whether this one was.
func (s *Store) SetReceipt(ctx context.Context, tenantID, id, receipt string) (bool, error) {
	var ok bool
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&executionRow{}).
			Where("tenant_id = ? AND id = ? AND receipt = '' AND status IN ?", tenantID, id,
				[]string{string(models.StatusSucceeded), string(models.StatusFailedTerminal)}).
			Update("receipt", receipt)
		ok = res.RowsAffected == 1
		return res.Error
	})
	return ok, err
}

// updateExecution applies updates to the execution q matches (at most one:
// q names its id) and returns the row as updated, in the same statement
// (RETURNING). found=false means nothing matched.
func updateExecution(q *gorm.DB, updates map[string]any) (row executionRow, found bool, err error) {
	var rows []executionRow
	if err := q.Model(&rows).Clauses(clause.Returning{}).Updates(updates).Error; err != nil {
		return executionRow{}, false, err
	}
	if len(rows) == 0 {
		return executionRow{}, false, nil
	}
	return rows[0], true, nil
}

// mirror copies an execution's status onto its proposal and records the
// event when the proposal's status changed.
func (s *Store) mirror(tx *gorm.DB, row executionRow, now time.Time) error {
	ctx, c := raw(tx)
	n, err := execCount(ctx, c, "UPDATE proposals SET status = $1, revision = revision + 1, updated_at = $2 WHERE id = $3 AND status <> $1",
		row.Status, ms(now), row.ProposalID)
	if err != nil || n == 0 {
		return err
	}
	return s.recordEvent(tx, row.TenantID, row.ProposalID, models.StatusEvent(models.Status(row.Status)), now, executionData(row))
}

// executionData is the data of the event of an execution's change: which
// execution, which attempt and, for a failure, its code.
func executionData(row executionRow) map[string]any {
	data := map[string]any{"execution_id": row.ID, "attempt": row.Attempts}
	if row.ErrorCode != "" {
		data["error_code"] = row.ErrorCode
	}
	return data
}

// Execution returns an execution of the tenant, or ENotFound.
func (s *Store) Execution(ctx context.Context, tenantID, id string) (models.Execution, error) {
	var row executionRow
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND id = ?", tenantID, id).Take(&row).Error; err != nil {
		return models.Execution{}, notFound(err, "no execution %q", id)
	}
	return row.model(), nil
}

// ExecutionsDue lists executions that need reconciling: unknown, or
// executing with a lease that ran out (the process that owned the attempt
// crashed or lost track) or whose owning instance's heartbeat is stale,
// oldest first.
func (s *Store) ExecutionsDue(ctx context.Context, now time.Time, limit int) ([]models.Execution, error) {
	var rows []executionRow
	lapsed, args := s.lapsed(now)
	err := s.db.WithContext(ctx).
		Where(openExecution+" AND status IN ?", []string{string(models.StatusExecuting), string(models.StatusUnknown)}).
		Where(lapsed, args...).
		Order("updated_at").Limit(limit).Find(&rows).Error
	if err != nil {
		return nil, dbErr(err)
	}
	out := make([]models.Execution, len(rows))
	for i, r := range rows {
		out[i] = r.model()
	}
	return out, nil
}
