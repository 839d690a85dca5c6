package writes

import (
	"context"
	"errors"

	"github.com/countersign/countersign/models"
)

// describe asks the business system of a tool what the write would do now
// (models.DescribeAdapter) and returns the checked description and its
// digest; nil and "" when the adapter describes nothing for the tool.
//
// Errors: EUnavailable when the business system could not be asked or
// answered a description out of bounds.
func (s *Service) describe(ctx context.Context, tool string, args []byte, tenantID string) (*models.Description, string, error) {
	da, ok := s.adapters[tool].(models.DescribeAdapter)
	if !ok {
		return nil, "", nil
	}
	d, err := da.Describe(ctx, models.DescribeRequest{Tool: tool, Arguments: args, Tenant: tenantID})
	if errors.Is(err, models.ErrNoDescription) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", adapterErr(err)
	}
	return checkedDescription(d)
}

// checkedDescription checks a business system's description of a write
// and returns it with its digest.
//
// Errors: EUnavailable when the description is out of bounds.
func checkedDescription(d models.Description) (*models.Description, string, error) {
	if err := d.Check(); err != nil {
		return nil, "", models.Wrap(models.EUnavailable, err, "the business system described the write out of bounds")
	}
	digest, err := models.DescriptionDigest(d)
	if err != nil {
		return nil, "", models.Wrap(models.EInternal, err, "the description cannot be digested")
	}
	return &d, digest, nil
}

// answerOutOfBounds is the refusal of a validate answer outside the
// bounds (models.ValidateResult.Check): nothing is stored.
func answerOutOfBounds(err error) error {
	return models.Wrap(models.EUnavailable, err, "the business system answered the validation out of bounds; nothing was stored")
}

// validate asks the business system of a new proposal's tool whether the
// write may happen and, when it may, what it would do (describe): in one
// call when the adapter answers both from one look at its state
// (models.ValidateDescribeAdapter), else Validate and then Describe.
//
// Errors: those of the adapter (adapterErr) and of describe.
func (s *Service) validate(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, *models.Description, string, error) {
	a := s.adapters[req.Tool]
	if vd, ok := a.(models.ValidateDescribeAdapter); ok {
		vr, d, err := vd.ValidateDescribe(ctx, req)
		if err != nil {
			return models.ValidateResult{}, nil, "", adapterErr(err)
		}
		if err := vr.Check(); err != nil {
			return models.ValidateResult{}, nil, "", answerOutOfBounds(err)
		}
		if !vr.OK || d == nil {
			return vr, nil, "", nil
		}
		effect, digest, err := checkedDescription(*d)
		return vr, effect, digest, err
	}
	vr, err := a.Validate(ctx, req)
	if err != nil {
		return models.ValidateResult{}, nil, "", adapterErr(err)
	}
	if err := vr.Check(); err != nil {
		return models.ValidateResult{}, nil, "", answerOutOfBounds(err)
	}
	if !vr.OK {
		return vr, nil, "", nil
	}
	effect, digest, err := s.describe(ctx, req.Tool, req.Arguments, req.Tenant)
	return vr, effect, digest, err
}

// EffectNamed refuses an approval of p that names an effect digest (seen)
// other than the stored one: another one (a page of something else, a
// tampered request) or none when the proposal has an effect preview (a
// page from before the preview existed, a hand-made request), since its
// reviewer was then not shown what the write would do. A proposal without
// a preview is approved naming none. It reads nothing, so a step-up
// approval can be refused with it before its ceremony is consumed.
//
// Errors: EEffectChanged, with Details effect_digest (the stored one) and
// effect_seen (the one named, possibly "").
func EffectNamed(p *models.Proposal, seen string) error {
	if seen == p.EffectDigest {
		return nil
	}
	msg := "the effect you were shown is not the one stored with the proposal; reload it"
	if seen == "" {
		msg = "this write has an effect preview and the approval names none: its reviewer was not shown what the write would do; " +
			"reload the proposal and look at the effect before approving"
	}
	return &models.Error{Code: models.EEffectChanged, Message: msg,
		Details: map[string]any{"effect_digest": p.EffectDigest, detailEffectSeen: seen}}
}

// detailEffectSeen is the Details key by which an EffectNamed refusal
// carries the digest the approval named.
const detailEffectSeen = "effect_seen"

// StaleEffect tells whether err is EffectNamed's refusal — the approval
// named another effect digest than the stored one, or none ("" in seen):
// the page it came from was out of date, and reloading it is the remedy —
// rather than the business system now describing the write differently,
// which needs a new proposal.
func StaleEffect(err error) (seen string, ok bool) {
	var me *models.Error
	if !errors.As(err, &me) || me.Code != models.EEffectChanged {
		return "", false
	}
	seen, ok = me.Details[detailEffectSeen].(string)
	return seen, ok
}

// effectUnchanged refuses an approval that does not name the stored effect
// digest (EffectNamed), and any approval when the business system now
// describes the write differently than when it was proposed: the stored
// preview is then no longer what the write would do.
func (s *Service) effectUnchanged(ctx context.Context, p *models.Proposal, seen string) error {
	if err := EffectNamed(p, seen); err != nil {
		return err
	}
	if p.Kind == models.KindMandate {
		return nil
	}
	_, now, err := s.describe(ctx, p.Tool, p.Arguments, p.TenantID)
	if err != nil {
		return err
	}
	if now != p.EffectDigest {
		return &models.Error{Code: models.EEffectChanged,
			Message: "the business system now describes this write differently than the preview you approved; the agent must propose again",
			Details: map[string]any{"effect_digest": p.EffectDigest, "described_now": now}}
	}
	return nil
}
