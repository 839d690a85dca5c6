package writes

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// Execute redeems a confirmation token and performs its write exactly once.
// It is accepted only if all hold: the signature is ours, aud is this
// service, the caller is sub, the tenant matches, op, policy, resource,
// request key and args_digest match the stored proposal, now < exp, and the
// token is consumed atomically right now (one conditional UPDATE). Then the
// adapter executes with the execution's downstream key
// (models.DownstreamKey: installation, tenant, agent and request key) as
// idempotency key and the expected state version, and the outcome is
// recorded.
//
// A token that was consumed before answers EAlreadyConsumed with the
// original execution (Details: execution_id, execution_status, receipt) and
// never reaches the business system again — except to retry a
// failed_retryable execution with the same key before the token's exp, or
// to ask the business system about an unknown one.
//
// Errors: EInvalidSignature, EAudienceMismatch, ETenantMismatch,
// ESubjectMismatch, ENotFound, EOperationMismatch, EArgsMismatch,
// EUnknownToken, ETokenExpired, ERevoked, EAlreadyConsumed, EStateChanged,
// EIdempotencyKeyReuse, EUnavailable (nothing was consumed),
// EOutcomeUncertain (the database failed while consuming and it cannot be
// told whether it did; presenting the same token again is safe). Once the
// token is consumed, the execution is returned, whatever happens after
// (EStateChanged aside, which carries it in Details).
func (s *Service) execute(ctx context.Context, agent models.Agent, proposalID, compact string) (out *models.Execution, err error) {
	c, err := s.tokens.Verify(ctx, compact)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Issuer != s.tokens.Issuer():
		return nil, models.Errorf(models.EInvalidSignature, "the token was not issued by this service")
	case c.Audience != s.tokens.Audience():
		return nil, models.Errorf(models.EAudienceMismatch, "the token is for another service")
	case c.Tenant != agent.TenantID:
		return nil, models.Errorf(models.ETenantMismatch, "the token belongs to another tenant")
	case c.Subject != agent.ID:
		return nil, models.Errorf(models.ESubjectMismatch, "the token was issued to another agent")
	}
	// The adapter is the token's tool's (the proposal's, as decide checks).
	ta, inDB := s.adapters[c.Operation].(store.TxAdapter)
	rctx := ctx
	if inDB {
		// The business system's data is in this database: the write and
		// its outcome commit with the consumption, all or nothing, within
		// the tool's lease (the redemption's transaction only: answering a
		// replay or an expiry afterwards is not bound by it).
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, s.lease(c.Operation))
		defer cancel()
	}
	var (
		p   *models.Proposal
		tok models.Token
		now time.Time
	)
	// The proposal's snapshot, the token's record and the decisions are
	// read, checked and consumed in one transaction (decide writes
	// nothing; it may run more than once).
	decide := func(r store.Redeeming) (store.Consume, error) {
		p, now = r.Proposal, s.clock.Now()
		if p.TenantID != agent.TenantID || p.AgentID != agent.ID {
			// Another agent's proposal is as unknown to this one as it
			// is everywhere else in the API, even to an agent that may
			// read it: reading never includes acting.
			return store.Consume{}, models.Errorf(models.ENotFound, "no proposal %q", proposalID)
		}
		if err := bindsTo(c, p); err != nil {
			return store.Consume{}, err
		}
		if r.Token == nil {
			return store.Consume{}, models.Errorf(models.EUnknownToken, "no such token")
		}
		tok = *r.Token
		if tok.ProposalID != p.ID || tok.AgentID != agent.ID {
			return store.Consume{}, models.Errorf(models.EArgsMismatch, "the token confirms another proposal")
		}
		if subtle.ConstantTimeCompare([]byte(tok.Compact), []byte(compact)) != 1 {
			// Validly signed but not what was issued under this jti (e.g. a
			// signing key leaked and claims were re-signed): refuse.
			return store.Consume{}, models.Errorf(models.EInvalidSignature, "this is not the token that was issued")
		}
		if p.MandateID == "" && !p.ApprovedBy(c.Approvers) {
			// The decisions are read with the token (Redeem), and none of a
			// confirmed proposal changes after its token is issued.
			return store.Consume{}, models.Errorf(models.EArgsMismatch, "the stored approvals of %s are not the ones its confirmation was issued for; "+
				"they were changed outside countersign, and nothing was written", p.ID)
		}
		switch tok.Status {
		case models.TokenConsumed:
			return store.Consume{}, errRedeemed
		case models.TokenRevoked:
			return store.Consume{}, models.Errorf(models.ERevoked, "the confirmation was revoked")
		case models.TokenExpired:
			return store.Consume{}, expiredErr(tok)
		}
		if err := s.currentPolicy(c); err != nil {
			return store.Consume{}, err
		}
		if !now.Before(time.Unix(c.Expiry, 0)) || !now.Before(tok.ExpiresAt) {
			return store.Consume{}, errLapsed
		}
		consume := store.Consume{
			TenantID: agent.TenantID, AgentID: agent.ID, ProposalID: p.ID, JTI: tok.JTI, Now: now,
			Execution: models.Execution{ID: models.NewID("exe"), RequestKey: p.RequestKey,
				DownstreamKey: models.DownstreamKey(s.installation, p.TenantID, p.AgentID, p.RequestKey),
				Operation:     p.Tool, ArgsDigest: p.ArgsDigest, LeaseUntil: now.Add(s.lease(p.Tool))},
		}
		if inDB {
			consume.Settle = s.settleIn(rctx, p, ta, s.receiptOptionsOf(p, r.Mandate, r.Grant))
		}
		return consume, nil
	}
	exec, consumed, err := s.store.Redeem(rctx, agent.TenantID, proposalID, c.ID, decide)
	if p != nil && p.MandateID != "" {
		// The receipt names the standing mandate that confirmed the write.
		defer func() {
			if out != nil {
				out.MandateID, out.MandateGrantors = p.MandateID, p.MandateGrantors
			}
		}()
	}
	switch {
	case errors.Is(err, errRedeemed):
		return s.alreadyConsumed(ctx, p, tok, c)
	case errors.Is(err, errLapsed):
		if _, err := s.store.ExpireDue(ctx, p.TenantID, p.ID, now); err != nil {
			return nil, err
		}
		s.changed(p.TenantID, p.ID)
		return nil, expiredErr(tok)
	case models.IsCode(err, models.EOutcomeUncertain):
		return nil, &models.Error{Code: models.EOutcomeUncertain,
			Message: "the token may or may not have been redeemed; present the same token again, which never writes twice",
			Details: map[string]any{"proposal_id": proposalID}, Err: err}
	case err != nil:
		return nil, err
	}
	if !consumed {
		// Someone else redeemed, revoked or expired it between our read and
		// the update: report what happened.
		tok, err := s.store.TokenByJTI(ctx, agent.TenantID, c.ID)
		if err != nil {
			return nil, err
		}
		switch tok.Status {
		case models.TokenConsumed:
			return s.alreadyConsumed(ctx, p, tok, c)
		case models.TokenRevoked:
			return nil, models.Errorf(models.ERevoked, "the confirmation was revoked")
		default:
			return nil, expiredErr(tok)
		}
	}
	s.changed(p.TenantID, p.ID)
	if inDB {
		return &exec, stateChanged(exec)
	}
	return s.attempt(ctx, p, exec)
}

// errRedeemed and errLapsed end a redemption's transaction with nothing
// written when the token read was consumed before (execute then answers
// with what it did) or its time ran out (execute then expires it, in a
// transaction of its own).
var (
	errRedeemed = errors.New("the token was redeemed before")
	errLapsed   = errors.New("the token's time ran out")
)

// settleIn returns the Settle of an execute whose business system writes in
// the consuming transaction. It signs the receipt, with options opt, over
// the outcome before that transaction records it, as finish does. An answer
// other than a write, a state conflict or a refusal (the database failed
// under the adapter) rolls everything back: the token stays issued and
// nothing is written, so presenting it again is safe.
func (s *Service) settleIn(ctx context.Context, p *models.Proposal, ta store.TxAdapter, opt models.ReceiptOptions) func(tx *gorm.DB, e models.Execution) (store.Outcome, time.Time, error) {
	return func(tx *gorm.DB, e models.Execution) (store.Outcome, time.Time, error) {
		res, err := ta.ExecuteIn(tx, models.ExecuteRequest{Tool: p.Tool, Arguments: p.Arguments,
			Tenant: p.TenantID, IdempotencyKey: e.DownstreamKey, ExpectedStateVersion: p.StateVersion})
		if err != nil && !errors.Is(err, models.ErrStateConflict) && !refused(err) {
			return store.Outcome{}, time.Time{}, models.Wrap(models.EUnavailable, err,
				"the business system could not make the write; nothing was written and the confirmation was not used: present it again")
		}
		o, now := s.receipted(ctx, p, e, s.outcome(e, res, err), &opt)
		return o, now, nil
	}
}

// receipted is outcome o of execution e stamped with the time it is
// recorded at and, when it settles e, its signed receipt (written by the
// same UPDATE as the outcome). The time is in milliseconds, as stored, so
// that the receipt signed now and one rebuilt from the database later
// state the same times. Failing to sign must not lose the outcome: the
// receipt is then made on first request (Receipt). opt, when not nil, is
// what receiptOptions read already (nothing is read then).
func (s *Service) receipted(ctx context.Context, p *models.Proposal, e models.Execution, o store.Outcome, opt *models.ReceiptOptions) (store.Outcome, time.Time) {
	now := time.UnixMilli(s.clock.Now().UnixMilli()).UTC()
	if settled := settledAs(e, o, now); settled.Settled() {
		var err error
		if opt != nil {
			o.Receipt, err = s.signReceiptWith(ctx, p, settled, *opt)
		} else {
			o.Receipt, err = s.signReceipt(ctx, p, settled)
		}
		if err != nil {
			s.log.Warn("receipt not signed", "execution", e.ID, "err", err)
			o.Receipt = ""
		}
	}
	return o, now
}

// bindsTo checks that the verified claims name exactly this stored proposal.
func bindsTo(c models.Claims, p *models.Proposal) error {
	switch {
	case c.ProposalID != p.ID:
		return models.Errorf(models.EArgsMismatch, "the token confirms another proposal")
	case c.Operation != p.Tool:
		return models.Errorf(models.EOperationMismatch, "the token is for operation %s, not %s", c.Operation, p.Tool)
	case c.Policy != p.PolicyVersion:
		return models.Errorf(models.EOperationMismatch, "the token was issued under another policy version")
	case c.ArgsDigest != p.ArgsDigest:
		return models.Errorf(models.EArgsMismatch, "the token's args_digest does not match the stored arguments")
	case c.Resource != p.Resource || c.ResourceSetDigest != p.ResourceSetDigest:
		return models.Errorf(models.EArgsMismatch, "the token is for another resource")
	case c.RequestKey != p.RequestKey:
		return models.Errorf(models.EArgsMismatch, "the token carries another request key")
	}
	return p.Intact()
}

// currentPolicy refuses a token whose tool the registry no longer offers,
// or whose rules changed since it was confirmed: the confirmation approved
// the write under the rules of the policy_version it carries (tier, quorum,
// step-up), and the stored snapshot always carries that same version, so
// only the registry in force can tell that the rules moved on. Nothing is
// consumed; the agent has to propose again.
func (s *Service) currentPolicy(c models.Claims) error {
	tool, ok := s.reg.Tool(c.Operation)
	if !ok {
		return models.Errorf(models.EOperationMismatch, "tool %s is no longer offered; nothing was written", c.Operation)
	}
	if tool.PolicyVersion != c.Policy {
		return models.Errorf(models.EOperationMismatch,
			"the rules of %s changed since this confirmation (policy %s, now %s); propose again", c.Operation, c.Policy, tool.PolicyVersion)
	}
	return nil
}

// adapter returns the adapter of a tool. A proposal may outlive its tool
// (the registry was edited and the server restarted): that is EUnavailable,
// never a nil adapter called.
func (s *Service) adapter(tool string) (models.Adapter, error) {
	a := s.adapters[tool]
	if a == nil {
		return nil, models.Errorf(models.EUnavailable, "no business system is configured for tool %s", tool)
	}
	return a, nil
}

// retryExpired answers a redemption of a failed attempt at or after the
// token's exp.
func retryExpired(tok models.Token, e models.Execution) error {
	return &models.Error{Code: models.ETokenExpired,
		Message: fmt.Sprintf("the confirmation expired at %s; the failed attempt is not retried after that. "+
			"Nothing was written: propose again with a new request key", tok.ExpiresAt.Format(time.RFC3339)),
		Details: map[string]any{"execution_id": e.ID, "execution_status": e.Status, "receipt": e.Receipt()}}
}

func expiredErr(tok models.Token) error {
	return models.Errorf(models.ETokenExpired, "the confirmation expired at %s; ask for a new one", tok.ExpiresAt.Format(time.RFC3339))
}

// alreadyConsumed answers a redemption of a consumed token. It never writes
// with a new key: a failed_retryable execution is retried with its own
// downstream key, but only before the confirmation's exp (a retry is a
// write, and the reviewer confirmed a write before exp); an unknown (or
// abandoned executing) one is reconciled by asking the business system
// about that key, which stays allowed after exp because asking writes
// nothing.
func (s *Service) alreadyConsumed(ctx context.Context, p *models.Proposal, tok models.Token, c models.Claims) (*models.Execution, error) {
	e, err := s.store.Execution(ctx, p.TenantID, tok.ExecutionID)
	if err != nil {
		return nil, err
	}
	now := s.clock.Now()
	switch {
	case e.Status == models.StatusFailedRetryable:
		if !now.Before(tok.ExpiresAt) || !now.Before(time.Unix(c.Expiry, 0)) {
			// Settle it now rather than at the next sweep: the execution
			// ends failed_terminal (token_expired), the proposal expired.
			if _, err := s.store.ExpireDue(ctx, p.TenantID, p.ID, now); err != nil {
				return nil, err
			}
			s.changed(p.TenantID, p.ID)
			if e, err = s.store.Execution(ctx, p.TenantID, tok.ExecutionID); err != nil {
				return nil, err
			}
			return nil, retryExpired(tok, e)
		}
		// ClaimRetry re-checks the expiry and the state in one conditional
		// UPDATE, so neither a revocation nor the clock can slip between
		// this check and the claim.
		claimed, ok, err := s.store.ClaimRetry(ctx, e.TenantID, e.ID, now, now.Add(s.lease(e.Operation)))
		if err != nil {
			return nil, err
		}
		if ok {
			s.changed(p.TenantID, p.ID)
			return s.attempt(ctx, p, claimed)
		}
	case e.Status == models.StatusUnknown || e.Status == models.StatusExecuting:
		// Settle it now if no attempt holds it (its lease ran out, or its
		// instance died); the claim in reconcile decides atomically, and
		// leaves an execution that is in flight alone.
		if err := s.reconcile(ctx, e); err != nil {
			return nil, err
		}
	}
	if e, err = s.store.Execution(ctx, p.TenantID, tok.ExecutionID); err != nil {
		return nil, err
	}
	if e.ErrorCode == string(models.ETokenExpired) {
		return nil, retryExpired(tok, e)
	}
	if e.ErrorCode == string(models.ERevoked) {
		return nil, &models.Error{Code: models.ERevoked, Message: "the confirmation was revoked before a retry; nothing was written",
			Details: map[string]any{"execution_id": e.ID, "execution_status": e.Status, "receipt": e.Receipt()}}
	}
	return nil, &models.Error{Code: models.EAlreadyConsumed, Message: "this confirmation was already redeemed",
		Details: map[string]any{"execution_id": e.ID, "execution_status": e.Status, "receipt": e.Receipt(), "signed_receipt": e.ReceiptJWS}}
}

// lease is how long one attempt at a tool's write holds its execution: the
// adapter's timeout plus the margin to record the outcome. New made sure it
// is within the configured maximum.
func (s *Service) lease(tool string) time.Duration {
	if d, ok := s.timeouts[tool]; ok {
		return d + s.margin
	}
	return DefaultAdapterTimeout + s.margin
}

// timeout bounds one adapter call for tool.
func (s *Service) timeout(tool string) time.Duration {
	if d, ok := s.timeouts[tool]; ok {
		return d
	}
	return DefaultAdapterTimeout
}

// attempt calls the adapter for an execution this process owns (its lease)
// and records the outcome. A transport problem is unknown, never failed.
//
// The token behind e is consumed, so whatever goes wrong from here on the
// caller gets the execution, never an error that suggests nothing happened:
// when the outcome cannot be recorded (or no adapter is configured), the
// execution is returned as recorded (executing) and the reconciler settles
// it once the lease has run out. The only error is EStateChanged, a settled
// outcome (failed_terminal, nothing written) that needs a new proposal.
func (s *Service) attempt(ctx context.Context, p *models.Proposal, e models.Execution) (*models.Execution, error) {
	ad, err := s.adapter(p.Tool)
	if err != nil {
		// The execution stays executing; once its lease runs out the
		// reconciler asks again (and an operator can restore the tool).
		s.log.Error("execution left to the reconciler", "execution", e.ID, "err", err)
		return &e, nil
	}
	if err := p.Intact(); err != nil || e.ArgsDigest != p.ArgsDigest {
		// The proposal read for this attempt is not the one confirmed (its
		// rows were edited since): nothing is sent. An earlier attempt may
		// still land, so the execution is not settled as failed; the
		// reconciler asks the business system again later.
		s.log.Error("stored arguments do not match the confirmed digest; the write is not sent",
			"execution", e.ID, "proposal", p.ID, "err", err)
		done, ferr := s.finish(ctx, p, e, store.Outcome{Status: models.StatusUnknown, ErrorCode: string(models.EArgsMismatch),
			ErrorMessage: "the stored arguments no longer match the digest that was confirmed; the write was not sent, " +
				"and the business system will be asked again",
			RetryAt: s.clock.Now().Add(backoff(e.Attempts))})
		if ferr != nil {
			return &e, nil
		}
		return done, nil
	}
	// The write must not be abandoned half-way because the caller went away:
	// detach from the request, bounded by the adapter's timeout, which the
	// lease outlasts.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout(p.Tool))
	res, err := ad.Execute(actx, models.ExecuteRequest{Tool: p.Tool, Arguments: p.Arguments,
		Tenant: p.TenantID, IdempotencyKey: e.DownstreamKey, ExpectedStateVersion: p.StateVersion})
	cancel()
	o := s.outcome(e, res, err)
	done, err := s.finish(ctx, p, e, o)
	if err != nil && !models.IsCode(err, models.EStateChanged) {
		s.log.Error("recording an execution outcome failed; the reconciler will ask the business system",
			"execution", e.ID, "request_key", e.RequestKey, "outcome", o.Status, "err", err)
		return &e, nil
	}
	return done, err
}

// outcome classifies an adapter's answer.
func (s *Service) outcome(e models.Execution, res models.ExecuteResult, err error) store.Outcome {
	now := s.clock.Now()
	var de *models.Error
	switch {
	case err == nil:
		switch res.Status {
		case models.StatusSucceeded, models.StatusFailedTerminal, models.StatusFailedRetryable:
			return store.Outcome{Status: res.Status, ProviderRef: res.ProviderRef, Result: res.Result}
		}
		return store.Outcome{Status: models.StatusUnknown, ErrorCode: "bad_answer",
			ErrorMessage: "the business system gave no valid status", RetryAt: now.Add(backoff(e.Attempts))}
	case errors.Is(err, models.ErrStateConflict):
		return store.Outcome{Status: models.StatusFailedTerminal, ErrorCode: string(models.EStateChanged),
			ErrorMessage: "the target changed after the confirmation; nothing was written"}
	case refused(err):
		// Refused before anything was written.
		errors.As(err, &de)
		return store.Outcome{Status: models.StatusFailedTerminal, ErrorCode: string(de.Code), ErrorMessage: de.Message}
	default:
		s.log.Warn("execution outcome unknown", "execution", e.ID, "request_key", e.RequestKey,
			"downstream_key", e.DownstreamKey, "err", err)
		return store.Outcome{Status: models.StatusUnknown, ErrorCode: "outcome_unknown",
			ErrorMessage: "the business system did not answer; the outcome will be asked for by request key",
			RetryAt:      now.Add(backoff(e.Attempts))}
	}
}

// refused reports whether a business system refused a write before
// writing anything (an invalid request or a business rule).
func refused(err error) bool {
	var de *models.Error
	return errors.As(err, &de) && (de.Code == models.EInvalidRequest || de.Code == models.EBusinessRule)
}

// finish records an attempt's outcome and turns a state conflict into the
// caller's EStateChanged. It runs detached from ctx's cancellation and
// within the lease margin: the adapter has answered, and its answer must
// not be dropped because the request ended.
func (s *Service) finish(ctx context.Context, p *models.Proposal, e models.Execution, o store.Outcome) (*models.Execution, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.margin)
	defer cancel()
	o, now := s.receipted(ctx, p, e, o, nil)
	done, ok, err := s.store.FinishExecution(ctx, e.TenantID, e.ID, e.Attempts, o, now)
	if err != nil {
		return nil, err
	}
	if !ok {
		// Superseded: another attempt (the reconciler, after our lease ran
		// out) owns it now. Report what is recorded.
		if done, err = s.store.Execution(ctx, e.TenantID, e.ID); err != nil {
			return nil, err
		}
	}
	s.changed(p.TenantID, p.ID)
	return &done, stateChanged(done)
}

// stateChanged is the caller's EStateChanged for an execution settled
// because its target moved after the confirmation, nil for any other.
func stateChanged(done models.Execution) error {
	if done.ErrorCode != string(models.EStateChanged) {
		return nil
	}
	return &models.Error{Code: models.EStateChanged,
		Message: "the target changed after the confirmation; nothing was written and a new proposal is needed",
		Details: map[string]any{"execution_id": done.ID, "execution_status": done.Status, "receipt": done.Receipt(), "signed_receipt": done.ReceiptJWS}}
}

// backoff is how long to wait before asking again about an unknown outcome.
func backoff(attempts int) time.Duration {
	d := time.Second << min(attempts, 8)
	return min(d, 5*time.Minute)
}

// Reconcile resolves executions that are unknown, or executing with an
// expired lease (their process crashed), by asking the business system with
// the same request key. It returns how many it looked at.
func (s *Service) Reconcile(ctx context.Context) (int, error) {
	due, err := s.store.ExecutionsDue(ctx, s.clock.Now(), 50)
	if err != nil {
		return 0, err
	}
	for _, e := range due {
		if err := s.reconcile(ctx, e); err != nil {
			s.log.Warn("reconcile", "execution", e.ID, "err", err)
		}
	}
	return len(due), nil
}

// errNotClaimed is reconcileOne's answer when another instance claimed the
// execution first, or settled it meanwhile: nothing was attempted.
var errNotClaimed = errors.New("claimed by another instance")

// reconcileOne claims one due execution and settles it: the business system's
// recorded outcome when it has one; when the write never arrived and the
// confirmation has not expired, the same request is sent again with the
// same key (the business system deduplicates on it, so this can never write
// twice); after expiry nothing is sent; when it cannot be asked, it stays
// unknown until the next try.
func (s *Service) reconcileOne(ctx context.Context, e models.Execution) error {
	now := s.clock.Now()
	ad, err := s.adapter(e.Operation)
	if err != nil {
		return err
	}
	claimed, ok, err := s.store.ClaimExecution(ctx, e.TenantID, e.ID,
		[]models.Status{models.StatusExecuting, models.StatusUnknown}, now, now.Add(s.lease(e.Operation)))
	if err != nil {
		return err
	}
	if !ok {
		return errNotClaimed
	}
	p, err := s.store.GetProposal(ctx, e.TenantID, e.ProposalID)
	if err != nil {
		return err
	}
	s.changed(p.TenantID, p.ID)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout(e.Operation))
	res, err := ad.Status(actx, p.TenantID, claimed.DownstreamKey)
	cancel()
	switch {
	case errors.Is(err, models.ErrNeverArrived):
		// Sending it now would be a write. Before the confirmation's exp
		// that is the write the reviewer confirmed, under the same key. At
		// or after exp it is not: the write is never sent, and the
		// execution stays unknown rather than failed, because "never
		// arrived" only says the business system has not seen it yet — an
		// earlier attempt still in flight may land later, and then the
		// next question finds its outcome.
		tok, terr := s.store.TokenByJTI(ctx, claimed.TenantID, claimed.TokenJTI)
		if terr != nil || !s.clock.Now().Before(tok.ExpiresAt) {
			_, err = s.finish(ctx, p, claimed, store.Outcome{Status: models.StatusUnknown, ErrorCode: "not_sent_after_expiry",
				ErrorMessage: "the write had not reached the business system when the confirmation expired; it is not sent " +
					"after expiry, and the business system will be asked again",
				RetryAt: s.clock.Now().Add(backoff(claimed.Attempts))})
			return errors.Join(terr, err)
		}
		// The status call used up part of the lease: renew it before the
		// write, so the write, too, is covered from its start.
		now := s.clock.Now()
		ok, err := s.store.ExtendLease(ctx, claimed.TenantID, claimed.ID, claimed.Attempts, now.Add(s.lease(e.Operation)))
		if err != nil || !ok {
			return err
		}
		_, err = s.attempt(ctx, p, claimed)
		if models.IsCode(err, models.EStateChanged) {
			return nil
		}
		return err
	case err != nil:
		// The business system was asked and its answer refused (a bad
		// signature, a body that does not decode, an HTTP error) or it
		// could not be reached: the operator needs to know which.
		s.log.Warn("asking the business system about an execution failed; it will be asked again",
			"execution", claimed.ID, "tool", e.Operation, "attempts", claimed.Attempts, "err", err)
		_, err = s.finish(ctx, p, claimed, store.Outcome{Status: models.StatusUnknown, ErrorCode: "outcome_unknown",
			ErrorMessage: "the business system could not be asked; will ask again",
			RetryAt:      s.clock.Now().Add(backoff(claimed.Attempts))})
		return err
	}
	o := s.outcome(claimed, res, nil)
	_, err = s.finish(ctx, p, claimed, o)
	if models.IsCode(err, models.EStateChanged) {
		return nil
	}
	return err
}

// RunBackground sweeps expired proposals and reconciles executions every
// interval, and renews this instance's heartbeat every HeartbeatInterval,
// until ctx ends.
func (s *Service) RunBackground(ctx context.Context, interval time.Duration) {
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		s.runHeartbeat(ctx)
	}()
	defer func() { <-beating }()
	t := time.NewTicker(interval)
	defer t.Stop()
	var checkpointed time.Time
	for {
		if n, err := s.Sweep(ctx); err != nil {
			s.log.Warn("sweep", "err", err)
		} else if n > 0 {
			s.log.Info("expired proposals", "count", n)
		}
		if _, err := s.Reconcile(ctx); err != nil {
			s.log.Warn("reconcile", "err", err)
		}
		if _, err := s.Reconsider(ctx); err != nil {
			s.log.Warn("reconsider", "err", err)
		}
		// Record the registry in the chains of organizations created since.
		if _, err := s.store.RecordRegistry(ctx, s.registryRecord(), true); err != nil {
			s.log.Warn("registry record", "err", err)
		}
		// Pick up signing keys rotated by another process (or the CLI).
		if err := s.tokens.EnsureKey(ctx); err != nil {
			s.log.Warn("signing keys", "err", err)
		}
		// Every instance runs this pass; a chain another instance signed
		// within the interval is left to a later one.
		if now := s.clock.Now(); now.Sub(checkpointed) >= s.checkpointEvery {
			if _, err := s.checkpoints.CheckpointDue(ctx, now, s.checkpointEvery); err != nil {
				s.log.Warn("audit checkpoints", "err", err)
			} else {
				checkpointed = now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// runHeartbeat renews this instance's heartbeat every interval until ctx
// ends.
func (s *Service) runHeartbeat(ctx context.Context) {
	t := time.NewTicker(s.beat)
	defer t.Stop()
	for {
		if err := s.Heartbeat(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("heartbeat", "instance", s.instance, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
