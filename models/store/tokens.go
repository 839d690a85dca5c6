package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
)

// The confirmation token's records: the row, its redemption (read, then
// consumed once), its revocation and its lookup. Tokens are issued inside
// the decision that confirms a proposal (confirm.go, mandates.go) and
// expired by the sweep (proposals.go).

type tokenRow struct {
	JTI         string `gorm:"column:jti;primaryKey"`
	TenantID    string
	ProposalID  string
	AgentID     string
	KID         string `gorm:"column:kid"`
	Status      string
	Compact     string
	IssuedAt    int64
	ExpiresAt   int64
	ConsumedAt  *int64
	ExecutionID *string
}

func (tokenRow) TableName() string { return "tokens" }

func (r tokenRow) model() models.Token {
	t := models.Token{JTI: r.JTI, TenantID: r.TenantID, ProposalID: r.ProposalID, AgentID: r.AgentID,
		KeyID: r.KID, Status: models.TokenStatus(r.Status), Compact: r.Compact,
		IssuedAt: fromMS(r.IssuedAt), ExpiresAt: fromMS(r.ExpiresAt), ConsumedAt: fromMSPtr(r.ConsumedAt)}
	if r.ExecutionID != nil {
		t.ExecutionID = *r.ExecutionID
	}
	return t
}

// Consume is the one atomic step that turns a confirmation into an execution.
type Consume struct {
	TenantID   string
	AgentID    string
	ProposalID string
	JTI        string
	Execution  models.Execution // ID, RequestKey, DownstreamKey, Operation, ArgsDigest, LeaseUntil set by the caller
	Now        time.Time
	// Settle, when set, performs the write in the transaction that consumes
	// the token (a business system kept in this database, see TxAdapter)
	// and returns its outcome and the time it was reached; the outcome is
	// recorded in that same transaction, so the consumption, the write and
	// its outcome are committed together or not at all. An error from
	// Settle rolls all of it back: the token stays issued.
	Settle func(tx *gorm.DB, e models.Execution) (Outcome, time.Time, error)
}

// ConsumeToken redeems a token exactly once. In one transaction it flips the
// token from issued to consumed with a conditional UPDATE (bound to the
// tenant, agent, proposal and an unexpired window), creates the execution
// record for the request key and moves the proposal from confirmed to
// executing; with c.Settle, the same transaction also performs the write
// and records its outcome, and the execution returned is settled (the
// execution and the proposal are then written once, settled: see
// settleConsumed).
// consumed=false (and nothing written) means another redemption, a
// revocation or the expiry came first; the caller reads the token to tell
// which. A downstream key that already has an execution for another digest
// is EIdempotencyKeyReuse. An empty downstream key is EInternal: it would
// reach the business system as no key at all.
func (s *Store) ConsumeToken(ctx context.Context, c Consume) (exec models.Execution, consumed bool, err error) {
	return s.consumeToken(ctx, func(*gorm.DB) (Consume, error) { return c, nil })
}

// Redeeming is what a redemption is decided on, read in the transaction
// that consumes the token (Redeem).
type Redeeming struct {
	// Proposal is the stored snapshot with its decisions (and a mandate's
	// grantors), without its token, execution or agent name.
	Proposal *models.Proposal
	// Token is the tenant's token recorded under the jti presented
	// (whichever proposal it confirms: the caller checks), nil when there
	// is none, and then Proposal carries no decisions either.
	Token *models.Token
	// Mandate and Grant are, for a proposal a standing mandate confirmed,
	// the mandate and the proposal that granted it: its receipt names them.
	Mandate *models.Mandate
	Grant   *models.Proposal
}

// Redeem decides and performs one redemption of a presented token in one
// transaction. It reads the proposal, the token recorded under jti and,
// when there is that token, the proposal's decisions, in one statement,
// hands them to decide, and performs the consumption decide returns, as
// ConsumeToken does. The read and the consumption are one transaction: on
// SQLite under the writer's lock, where the pages just written are still in
// the connection's cache (a reader's cache is dropped at every commit); on
// PostgreSQL one round trip more inside the transaction instead of one
// before it. A token read as issued or consumed guarantees that the
// decisions read with it are final (a proposal's approvals are fixed in the
// transaction that issues its token). Nothing is locked by the read: the
// token's conditional UPDATE still decides. An error from decide ends the
// transaction with nothing written and is returned as it is (decide may run
// more than once, as any transaction may). ENotFound for an unknown
// proposal.
func (s *Store) Redeem(ctx context.Context, tenantID, proposalID, jti string, decide func(Redeeming) (Consume, error)) (models.Execution, bool, error) {
	return s.consumeToken(ctx, func(tx *gorm.DB) (Consume, error) {
		r, err := redemption(tx, tenantID, proposalID, jti)
		if err != nil {
			return Consume{}, err
		}
		if p := r.Proposal; r.Token != nil && p.MandateID != "" && p.Kind == "" {
			m, err := mandateIn(tx, tenantID, p.MandateID)
			if err != nil {
				return Consume{}, err
			}
			if r.Grant, err = loadProposal(tx, tenantID, m.ProposalID); err != nil {
				return Consume{}, err
			}
			r.Mandate = &m
		}
		return decide(r)
	})
}

// consumeToken is ConsumeToken of the Consume that consume returns in the
// transaction, before anything is written.
func (s *Store) consumeToken(ctx context.Context, consume func(tx *gorm.DB) (Consume, error)) (exec models.Execution, consumed bool, err error) {
	var (
		c       Consume
		row     executionRow
		settled executionRow
		renewed bool
	)
	err = s.tx(ctx, func(tx *gorm.DB) error {
		consumed, renewed = false, false
		var err error
		if c, err = consume(tx); err != nil {
			return err
		}
		if c.Execution.DownstreamKey == "" {
			return models.Errorf(models.EInternal, "execution without a downstream key")
		}
		now := ms(c.Now)
		row = executionRow{ID: c.Execution.ID, TenantID: c.TenantID, ProposalID: c.ProposalID, TokenJTI: c.JTI,
			RequestKey: c.Execution.RequestKey, DownstreamKey: c.Execution.DownstreamKey, Operation: c.Execution.Operation, ArgsDigest: c.Execution.ArgsDigest,
			Status: string(models.StatusExecuting), Attempts: 1, LeaseUntil: ms(c.Execution.LeaseUntil),
			OwnerInstance: s.instanceID(), CreatedAt: now, UpdatedAt: now}
		ctx, conn := raw(tx)
		n, err := execCount(ctx, conn, `UPDATE tokens SET status = $1, consumed_at = $2, execution_id = $3
 WHERE jti = $4 AND tenant_id = $5 AND agent_id = $6 AND proposal_id = $7 AND status = $8 AND expires_at > $2`,
			string(models.TokenConsumed), now, c.Execution.ID, c.JTI, c.TenantID, c.AgentID, c.ProposalID, string(models.TokenIssued))
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if c.Settle != nil {
			done, err := s.settleConsumed(tx, c, row)
			if err != nil {
				return err
			}
			consumed, settled = true, done
			return nil
		}
		// The execution stays open for the business system's answer:
		// this instance holds its attempt.
		if renewed, err = s.vouch(tx, c.Now); err != nil {
			return err
		}
		if err := s.claimKey(tx, c, &row); err != nil {
			return err
		}
		moved, err := transition(tx, c.TenantID, c.ProposalID, models.StatusExecuting, c.Now, "status = ?", string(models.StatusConfirmed))
		if err != nil {
			return err
		}
		if !moved {
			return errNoLongerConfirmed()
		}
		if err := s.recordEvent(tx, c.TenantID, c.ProposalID, models.StatusEvent(models.StatusExecuting), c.Now,
			executionData(row)); err != nil {
			return err
		}
		consumed = true
		return appendAudit(tx, c.TenantID, c.Now, executionEvent(models.AuditTokenConsumed, c.AgentID, row, nil))
	})
	if commitUncertain(err) {
		return s.consumedAfterAll(ctx, c, row, err)
	}
	if err == nil && renewed {
		s.seen(c.Now)
	}
	if err != nil || !consumed {
		return models.Execution{}, false, err
	}
	if c.Settle != nil {
		return settled.model(), true, nil
	}
	return row.model(), true, nil
}

func errNoLongerConfirmed() error {
	return models.Errorf(models.EInvalidState, "the proposal is no longer confirmed")
}

// claimKey inserts the execution row, which claims its downstream key. A
// key that already has an execution for other arguments is
// EIdempotencyKeyReuse, for the same arguments EAlreadyConsumed.
func (s *Store) claimKey(tx *gorm.DB, c Consume, row *executionRow) error {
	ok, err := insertExecution(tx, row)
	if err != nil || ok {
		return err
	}
	ctx, conn := raw(tx)
	var otherDigest string
	if err := conn.QueryRowContext(ctx, "SELECT args_digest FROM executions WHERE tenant_id = $1 AND downstream_key = $2",
		c.TenantID, c.Execution.DownstreamKey).Scan(&otherDigest); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			// The insert conflicts only on the downstream key.
			return models.Errorf(models.EInternal, "execution insert refused, yet no execution holds its downstream key")
		}
		return err
	}
	if otherDigest != row.ArgsDigest {
		return models.Errorf(models.EIdempotencyKeyReuse, "request key %q was used for other arguments", row.RequestKey)
	}
	return models.Errorf(models.EAlreadyConsumed, "request key %q already has an execution", row.RequestKey)
}

// settleConsumed is the rest of a consumption whose write joins its
// transaction (c.Settle), after the token's UPDATE: the write, then the
// execution, the proposal and its events as they stand after it, each
// written once. Nobody can see the transaction before it commits, so the
// proposal goes from confirmed to the outcome in one UPDATE (two revisions
// on, as through executing) and the execution is inserted settled, while
// the events still tell both steps, executing and the outcome, as for a
// write made outside the transaction. The checks that come first when the
// write is outside it (the downstream key unclaimed, the proposal still
// confirmed) come after the write here: if one fails, the transaction rolls
// the write back with everything else. The proposal's move goes through
// the state machine as the two steps would (transitionThrough).
func (s *Store) settleConsumed(tx *gorm.DB, c Consume, row executionRow) (executionRow, error) {
	o, at, err := c.Settle(tx, row.model())
	if err != nil {
		return executionRow{}, err
	}
	done := row.settled(o, at)
	if err := s.claimKey(tx, c, &done); err != nil {
		return executionRow{}, err
	}
	moved, err := transitionThrough(tx, c.TenantID, c.ProposalID, models.StatusExecuting, models.Status(done.Status), at,
		"status = ?", string(models.StatusConfirmed))
	if err != nil {
		return executionRow{}, err
	}
	if !moved {
		return executionRow{}, errNoLongerConfirmed()
	}
	if err := s.recordEvents(tx, c.TenantID, c.ProposalID, at,
		outboxEvent{typ: models.StatusEvent(models.StatusExecuting), data: executionData(row),
			status: models.StatusExecuting, back: 1, at: c.Now},
		outboxEvent{typ: models.StatusEvent(models.Status(done.Status)), data: executionData(done)}); err != nil {
		return executionRow{}, err
	}
	// The audit entries come last, in one statement: on PostgreSQL the
	// chain is held from the append to the commit.
	return done, appendTimed(tx, c.TenantID,
		timedEvent{at: c.Now, ev: executionEvent(models.AuditTokenConsumed, c.AgentID, row, nil)},
		timedEvent{at: at, ev: outcomeEvent(done)})
}

// consumedAfterAll settles a consumption whose commit failed by reading the
// token back: consumed for this execution means the commit went through;
// consumed for another, revoked or expired means someone else's change
// stands (consumed=false). A token still issued, or one that cannot be
// read, is EOutcomeUncertain: the commit may yet land, and presenting the
// same token again is safe.
func (s *Store) consumedAfterAll(ctx context.Context, c Consume, row executionRow, cause error) (models.Execution, bool, error) {
	var tok tokenRow
	rerr := s.db.WithContext(ctx).Where("tenant_id = ? AND jti = ?", c.TenantID, c.JTI).Take(&tok).Error
	switch {
	case rerr != nil:
		cause = errors.Join(cause, rerr)
	case tok.Status == string(models.TokenConsumed) && tok.ExecutionID != nil && *tok.ExecutionID == row.ID:
		if c.Settle == nil {
			return row.model(), true, nil
		}
		// The write and its outcome were committed with the consumption.
		e, err := s.Execution(ctx, c.TenantID, row.ID)
		if err == nil {
			return e, true, nil
		}
		cause = errors.Join(cause, err)
	case tok.Status != string(models.TokenIssued):
		return models.Execution{}, false, nil
	}
	return models.Execution{}, false, models.Wrap(models.EOutcomeUncertain, cause,
		"the database failed while redeeming the token, which may or may not have been redeemed; retry with the same token")
}

// redemption is what a presented token is checked against before it is
// consumed, and what the execution's receipt names: the stored proposal's
// snapshot with its decisions (and a mandate's grantors), without its
// token, execution or agent name, and the token recorded under jti, nil
// when there is none (and then no decisions either). The proposal, the
// token and the decisions come from one statement, so they are one
// snapshot. Redeem reads it in the transaction that consumes the token.
func redemption(db *gorm.DB, tenantID, proposalID, jti string) (Redeeming, error) {
	qctx, c := raw(db)
	var (
		pr  proposalRow
		tok struct {
			jti, tenantID, proposalID, agentID, kid, status, compact, executionID sql.NullString
			issuedAt, expiresAt, consumedAt                                       sql.NullInt64
		}
		ds        decisionScan
		decisions = []models.Decision{}
		found     bool
	)
	dest := append(pr.fields(), &tok.jti, &tok.tenantID, &tok.proposalID, &tok.agentID, &tok.kid, &tok.status, &tok.compact,
		&tok.issuedAt, &tok.expiresAt, &tok.consumedAt, &tok.executionID)
	dest = append(dest, ds.dest()...)
	rows, err := c.QueryContext(qctx, redemptionSQL, jti, tenantID, proposalID)
	if err != nil {
		return Redeeming{}, err
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return Redeeming{}, err
		}
		found = true
		d, ok, err := ds.decision()
		if err != nil {
			rows.Close()
			return Redeeming{}, err
		}
		if ok {
			decisions = append(decisions, d)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return Redeeming{}, err
	}
	if !found {
		return Redeeming{}, models.Errorf(models.ENotFound, "no proposal %q", proposalID)
	}
	p, err := pr.model("")
	if err != nil {
		return Redeeming{}, err
	}
	if p.MandateID != "" && p.Kind == "" {
		// The execution's receipt names the mandate's grantors.
		if err := loadGrantors(db, p); err != nil {
			return Redeeming{}, err
		}
	}
	if !tok.jti.Valid {
		return Redeeming{Proposal: p}, nil
	}
	p.Decisions = decisions
	row := tokenRow{JTI: tok.jti.String, TenantID: tok.tenantID.String, ProposalID: tok.proposalID.String,
		AgentID: tok.agentID.String, KID: tok.kid.String, Status: tok.status.String, Compact: tok.compact.String,
		IssuedAt: tok.issuedAt.Int64, ExpiresAt: tok.expiresAt.Int64}
	if tok.consumedAt.Valid {
		row.ConsumedAt = &tok.consumedAt.Int64
	}
	if tok.executionID.Valid {
		row.ExecutionID = &tok.executionID.String
	}
	t := row.model()
	return Redeeming{Proposal: p, Token: &t}, nil
}

// redemptionSQL reads a proposal and, beside it, the tenant's token with a
// given jti (whichever proposal that token confirms; the caller checks)
// and, when there is that token, the proposal's decisions: one row per
// decision, in their order, or one row without any.
const redemptionSQL = `SELECT ` + proposalCols + `, t.jti, t.tenant_id, t.proposal_id, t.agent_id, t.kid, t.status, t.compact,
 t.issued_at, t.expires_at, t.consumed_at, t.execution_id, ` + decisionCols + `
FROM proposals p LEFT JOIN tokens t ON t.tenant_id = p.tenant_id AND t.jti = $1
 LEFT JOIN decisions d ON t.jti IS NOT NULL AND d.proposal_id = p.id
 ` + decisionUsers + `
WHERE p.tenant_id = $2 AND p.id = $3 ORDER BY d.created_at, d.id`

// RevokeToken withdraws a confirmation, in one transaction, while that can
// still prevent a write:
//   - a confirmed proposal whose token is issued and unexpired at now: the
//     token becomes revoked and the proposal revoked;
//   - a failed_retryable proposal (the business system refused for now and
//     wrote nothing): the execution leaves failed_retryable for
//     failed_terminal (error "revoked") by a conditional UPDATE that races
//     fairly with a retry's claim of the same row, the token becomes revoked
//     and the proposal revoked.
//
// EInvalidState when the token was expired, revoked or consumed by an
// execution that is running, unknown or settled; ENotFound for unknown or
// foreign proposals.
func (s *Store) RevokeToken(ctx context.Context, tenantID, proposalID string, now time.Time) error {
	return s.RevokeTokenBy(ctx, tenantID, proposalID, "", now)
}

// RevokeTokenBy is RevokeToken naming the administrator who revoked, for
// the audit log.
func (s *Store) RevokeTokenBy(ctx context.Context, tenantID, proposalID, actorID string, now time.Time) error {
	if actorID == "" {
		actorID = models.ActorSystem
	}
	return s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&tokenRow{}).
			Where("tenant_id = ? AND proposal_id = ? AND status = ? AND expires_at > ?",
				tenantID, proposalID, string(models.TokenIssued), ms(now)).
			Update("status", string(models.TokenRevoked))
		if res.Error != nil {
			return res.Error
		}
		from := models.StatusConfirmed
		if res.RowsAffected == 0 {
			revoked, err := revokeRetry(tx, tenantID, proposalID, now)
			if err != nil {
				return err
			}
			if !revoked {
				var row proposalRow
				if err := tx.Select("status").Where("tenant_id = ? AND id = ?", tenantID, proposalID).Take(&row).Error; err != nil {
					return notFound(err, "no proposal %q", proposalID)
				}
				return models.Errorf(models.EInvalidState,
					"the proposal is %s: only a confirmed, unused token or a failed_retryable execution can be revoked", row.Status)
			}
			from = models.StatusFailedRetryable
		}
		ok, err := transition(tx, tenantID, proposalID, models.StatusRevoked, now, "status = ?", string(from))
		if err != nil {
			return err
		}
		if !ok {
			return models.Errorf(models.EInvalidState, "the proposal is no longer %s", from)
		}
		if err := s.recordEvent(tx, tenantID, proposalID, models.StatusEvent(models.StatusRevoked), now, nil); err != nil {
			return err
		}
		return appendAudit(tx, tenantID, now, proposalEvent(models.AuditTokenRevoked, actorID, proposalID, nil))
	})
}

// revokeRetry ends a failed_retryable execution of the proposal that no
// attempt holds, and revokes its consumed token.
func revokeRetry(tx *gorm.DB, tenantID, proposalID string, now time.Time) (bool, error) {
	res := tx.Model(&executionRow{}).
		Where("tenant_id = ? AND proposal_id = ? AND status = ? AND lease_until <= ?",
			tenantID, proposalID, string(models.StatusFailedRetryable), ms(now)).
		Updates(map[string]any{"status": string(models.StatusFailedTerminal), "error_code": string(models.ERevoked),
			"error_message": "an administrator revoked the confirmation before a retry; nothing was written",
			"updated_at":    ms(now), "completed_at": ms(now)})
	if res.Error != nil || res.RowsAffected == 0 {
		return false, res.Error
	}
	res = tx.Model(&tokenRow{}).
		Where("tenant_id = ? AND proposal_id = ? AND status = ?", tenantID, proposalID, string(models.TokenConsumed)).
		Update("status", string(models.TokenRevoked))
	if res.Error != nil {
		return false, res.Error
	}
	if res.RowsAffected == 0 {
		return false, models.Errorf(models.EInvalidState, "the confirmation's token is not consumed")
	}
	return true, nil
}

// TokenByJTI returns a token record of the tenant, or EUnknownToken.
func (s *Store) TokenByJTI(ctx context.Context, tenantID, jti string) (models.Token, error) {
	var row tokenRow
	err := s.db.WithContext(ctx).Where("tenant_id = ? AND jti = ?", tenantID, jti).Take(&row).Error
	if err != nil {
		if models.IsCode(notFound(err, ""), models.ENotFound) {
			return models.Token{}, models.Errorf(models.EUnknownToken, "no such token")
		}
		return models.Token{}, dbErr(err)
	}
	return row.model(), nil
}
