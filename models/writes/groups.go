package writes

import (
	"context"
	"log/slog"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// groupActor checks that admin may manage reviewer groups: an enabled
// administrator (the store re-checks inside each transaction).
func groupActor(admin models.User) (store.GroupActor, error) {
	if admin.Role != models.RoleAdmin || admin.Disabled {
		return store.GroupActor{}, models.Errorf(models.EForbidden, "only an administrator may manage reviewer groups")
	}
	return store.GroupActor{TenantID: admin.TenantID, Admin: &admin}, nil
}

// Groups returns the administrator's tenant's reviewer groups with their
// members. Errors: EForbidden, EUnavailable.
func (s *Service) Groups(ctx context.Context, admin models.User) ([]models.ReviewerGroup, error) {
	a, err := groupActor(admin)
	if err != nil {
		return nil, err
	}
	return s.store.ListGroups(ctx, a.TenantID)
}

// CreateGroup creates a reviewer group in the administrator's tenant.
// Errors: EForbidden, EInvalidRequest, EAlreadyExists, EUnavailable.
func (s *Service) CreateGroup(ctx context.Context, admin models.User, name string) (models.ReviewerGroup, error) {
	a, err := groupActor(admin)
	if err != nil {
		return models.ReviewerGroup{}, err
	}
	return s.store.CreateGroup(ctx, a, name, s.clock.Now())
}

// GroupOutcome is what a change of group membership did to the waiting
// proposals the member had approved that need the group.
type GroupOutcome struct {
	Moved     int // proposals whose progress moved (each woke its long-polls)
	Confirmed int // of them, confirmed by the change
	Pending   int // of them, complete but put off: the business system could not be asked yet
}

// SetGroupMember adds (member) or removes a user, by name, to or from a
// group of the administrator's tenant; see store.SetGroupMember. The
// waiting proposals whose progress it moved wake their long-polls, and
// those whose approvals it completed are confirmed before it returns
// (Reconsider), when the business system still describes their targets as
// previewed; one it cannot ask is left queued for the background pass.
// Errors: EForbidden, ENotFound, EUnavailable.
func (s *Service) SetGroupMember(ctx context.Context, admin models.User, group, userName string, member bool) (GroupOutcome, error) {
	a, err := groupActor(admin)
	if err != nil {
		return GroupOutcome{}, err
	}
	ch, err := s.store.SetGroupMember(ctx, a, group, userName, member, s.clock.Now())
	if err != nil {
		return GroupOutcome{}, err
	}
	out := GroupOutcome{Moved: len(ch.Changed)}
	for _, id := range ch.Changed {
		s.changed(a.TenantID, id)
	}
	for _, r := range ch.Queued {
		switch s.reconsider(ctx, r) {
		case reconsiderConfirmed:
			out.Confirmed++
		case reconsiderPutOff:
			out.Pending++
		}
	}
	return out, nil
}

// QueuedConfirmation tells whether the proposal waits in the queue of
// proposals a change of group membership completed, and when it is next
// taken up (a server's background pass, or the retry after the business
// system could not be asked).
func (s *Service) QueuedConfirmation(ctx context.Context, tenantID, id string) (time.Time, bool, error) {
	r, ok, err := s.store.QueuedReconsideration(ctx, tenantID, id)
	return r.Next, ok, err
}

// reconsiderBatch bounds the queued proposals one background pass takes up.
const reconsiderBatch = 50

// Reconsider takes up the queued proposals that are due: those a change of
// group membership completed (by the command line, or by a server that
// stopped or could not reach the business system meanwhile). It returns
// how many it took up. The background pass runs it.
func (s *Service) Reconsider(ctx context.Context) (int, error) {
	due, err := s.store.DueReconsiderations(ctx, s.clock.Now(), reconsiderBatch)
	if err != nil {
		return 0, err
	}
	for _, r := range due {
		s.reconsider(ctx, r)
	}
	return len(due), nil
}

// What became of a queued proposal (reconsider); the names are
// Event.Outcome's.
type reconsidered string

const (
	reconsiderUnchanged reconsidered = "unchanged" // decided, expired or no longer complete: left as it was
	reconsiderConfirmed reconsidered = "confirmed"
	reconsiderDropped   reconsidered = "dropped" // its target changed since the preview
	reconsiderPutOff    reconsidered = "put_off" // the business system or the database could not be asked; tried again later
)

// reconsider is reconsiderOne, traced and observed.
func (s *Service) reconsider(ctx context.Context, r store.Reconsideration) reconsidered {
	ctx, c := s.begin(ctx, OpReconsider, AttrProposalID.String(r.ProposalID), AttrTenantID.String(r.TenantID))
	outcome, p, err := s.reconsiderOne(ctx, r)
	c.end(Event{Op: OpReconsider, Proposal: p, Outcome: string(outcome), Err: err})
	return outcome
}

// reconsiderOne confirms one queued proposal as an approval completing its
// tier would: the business state and the effect preview are checked as
// they are for every approval (the approvers saw this preview), then the
// store confirms it with the memberships as they stand. A proposal whose
// target changed leaves the queue unconfirmed (an approval would now be
// refused the same way); one that cannot be checked now is put off, with
// backoff, until it is decided or expires. It returns the proposal as it
// last read it, and for a proposal put off the reason.
func (s *Service) reconsiderOne(ctx context.Context, r store.Reconsideration) (reconsidered, *models.Proposal, error) {
	log := s.log.With("proposal", r.ProposalID)
	p, err := s.store.GetProposal(ctx, r.TenantID, r.ProposalID)
	if err == nil && p.Status == models.StatusAwaitingConfirmation {
		if err = s.stateUnchanged(ctx, p); err == nil {
			err = s.effectUnchanged(ctx, p, p.EffectDigest)
		}
	}
	switch models.ErrorCode(err) {
	case "":
	case models.EStateChanged, models.EEffectChanged, models.ENotFound:
		log.Info("group change: the target changed since the preview; not confirmed", "err", err)
		if err := s.store.DropReconsideration(ctx, r); err != nil {
			log.Warn("group change: dequeue", "err", err)
		}
		return reconsiderDropped, p, nil
	default:
		return s.putOff(ctx, log, r, err), p, err
	}
	now := s.clock.Now()
	out, confirmed, err := s.store.Reconsider(ctx, r, now, func(p *models.Proposal) (models.Token, error) {
		return s.issue(ctx, p, now)
	})
	if err != nil {
		return s.putOff(ctx, log, r, err), p, err
	}
	if !confirmed {
		return reconsiderUnchanged, out, nil
	}
	log.Info("group change: confirmed", "status", out.Status)
	s.changed(r.TenantID, r.ProposalID)
	return reconsiderConfirmed, out, nil
}

// putOff sets the next attempt at a queued proposal after a failed one:
// 1 s, doubling, at most 5 minutes.
func (s *Service) putOff(ctx context.Context, log *slog.Logger, r store.Reconsideration, cause error) reconsidered {
	next := s.clock.Now().Add(models.BackoffDelay(r.Attempts, 0, time.Second, 5*time.Minute))
	log.Warn("group change: cannot confirm yet", "err", cause, "next", next)
	if err := s.store.PutOffReconsideration(ctx, r, next); err != nil {
		log.Warn("group change: put off", "err", err)
	}
	return reconsiderPutOff
}
