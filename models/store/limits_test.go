package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/store"
)

// TestSetLimitOverrideConcurrently: administrators setting one agent's
// override at the same moment all succeed, and the override left is one of
// theirs, whole; an empty override removes it.
func TestSetLimitOverrideConcurrently(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Go(func() {
				n, m := i+1, 100+i
				errs[i] = st.SetLimitOverride(ctx, d.Tenant.ID, d.Agent.ID, models.LimitOverride{OpenProposals: &n, ConcurrentWaits: &m}, now)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("setter %d: %v", i, err)
			}
		}
		_, agent, err := st.LimitOverrides(ctx, d.Tenant.ID, d.Agent.ID)
		if err != nil || agent.OpenProposals == nil || agent.ConcurrentWaits == nil || agent.ProposalsPerMinute != nil ||
			*agent.ConcurrentWaits != *agent.OpenProposals+99 {
			t.Fatalf("override left: %+v (%v)", agent, err)
		}
		if err := st.SetLimitOverride(ctx, d.Tenant.ID, d.Agent.ID, models.LimitOverride{}, now); err != nil {
			t.Fatal(err)
		}
		if _, agent, err = st.LimitOverrides(ctx, d.Tenant.ID, d.Agent.ID); err != nil || agent != (models.LimitOverride{}) {
			t.Fatalf("after removing: %+v (%v)", agent, err)
		}
	})
}
