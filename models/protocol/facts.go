package protocol

import (
	"context"

	"github.com/countersign/countersign/models"
)

// Facts asks the business system of p's tool what it knows about the
// write's target now (models.FactsAdapter). It returns no facts and no
// error when the adapter does not offer them. Facts are for a reviewer's
// eyes only: Confirm re-validates the business state whatever they said.
//
// Errors: EUnavailable when the business system could not be asked.
func (s *Service) Facts(ctx context.Context, p *models.Proposal) ([]models.Fact, error) {
	a := s.adapters[p.Tool]
	fa, ok := a.(models.FactsAdapter)
	if !ok {
		return nil, nil
	}
	facts, err := fa.Facts(ctx, models.FactsRequest{Tool: p.Tool, Arguments: p.Arguments, Tenant: p.TenantID})
	if err != nil {
		return nil, adapterErr(err)
	}
	return facts, nil
}
