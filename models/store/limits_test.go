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

// EffectiveLimits applies the defaults, then the tenant's override, then
// the agent's own, field by field (unset fields inherit, 0 lifts a
// limit), and never another agent's.
func TestEffectiveLimitsLayerTheOverrides(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		d := seed(t, st)
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		other, err := st.CreateAgent(ctx, d.Tenant.ID, "other", "", "sha256:k2")
		if err != nil {
			t.Fatal(err)
		}
		defaults := models.Limits{ProposalsPerMinute: 60, OpenProposals: 100, ConcurrentWaits: 10}
		if got, err := st.EffectiveLimits(ctx, d.Tenant.ID, d.Agent.ID, defaults); err != nil || got != defaults {
			t.Fatalf("without overrides: %+v (%v)", got, err)
		}
		n := func(v int) *int { return &v }
		for _, o := range []struct {
			agent string
			lo    models.LimitOverride
		}{
			{"", models.LimitOverride{ProposalsPerMinute: n(30), OpenProposals: n(50)}},
			{d.Agent.ID, models.LimitOverride{OpenProposals: n(0), ConcurrentWaits: n(3)}},
			{other.ID, models.LimitOverride{ProposalsPerMinute: n(1), OpenProposals: n(1), ConcurrentWaits: n(1)}},
		} {
			if err := st.SetLimitOverride(ctx, d.Tenant.ID, o.agent, o.lo, now); err != nil {
				t.Fatal(err)
			}
		}
		want := models.Limits{ProposalsPerMinute: 30, OpenProposals: 0, ConcurrentWaits: 3}
		if got, err := st.EffectiveLimits(ctx, d.Tenant.ID, d.Agent.ID, defaults); err != nil || got != want {
			t.Fatalf("agent's limits %+v (%v), want %+v", got, err, want)
		}
		tenant, agent, err := st.LimitOverrides(ctx, d.Tenant.ID, "")
		if err != nil || agent != (models.LimitOverride{}) || tenant.ProposalsPerMinute == nil || *tenant.ProposalsPerMinute != 30 ||
			tenant.ConcurrentWaits != nil {
			t.Fatalf("the tenant's alone: %+v %+v (%v)", tenant, agent, err)
		}
		if got, err := st.EffectiveLimits(ctx, "ten_elsewhere", d.Agent.ID, defaults); err != nil || got != defaults {
			t.Fatalf("another tenant sees %+v (%v)", got, err)
		}
	})
}
