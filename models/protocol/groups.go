package protocol

import (
	"context"

	"github.com/countersign/countersign/models"
)

// Progress tells where each approver-group factor of p's tier stands, with
// group memberships as stored now (models.ApprovalsMet, the rule the store
// applies when it decides). It is for showing; deciding happens inside the
// deciding transaction. Errors: EUnavailable.
func (s *Service) Progress(ctx context.Context, p *models.Proposal) ([]models.FactorProgress, error) {
	if len(p.Tier.Require) == 0 {
		return nil, nil
	}
	var ids []string
	for _, d := range p.Approvals() {
		ids = append(ids, d.UserID)
	}
	groups, err := s.store.GroupsOf(ctx, p.TenantID, ids)
	if err != nil {
		return nil, err
	}
	_, progress := models.ApprovalsMet(p, groups)
	return progress, nil
}
