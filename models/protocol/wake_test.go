package protocol_test

import (
	"testing"
)

// TestWaitAnyIsPerTenant: the console's live list of one tenant is not woken
// by another tenant's changes (not even as timing).
func TestWaitAnyIsPerTenant(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		other, err := e.store.CreateTenant(e.ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		own, foreign := e.svc.WaitAny(e.tenant), e.svc.WaitAny(other.ID)
		p := e.propose("ord_1001", 100)
		e.confirm(p)
		select {
		case <-own:
		default:
			t.Fatal("the tenant's own listener was not woken")
		}
		select {
		case <-foreign:
			t.Fatal("another tenant's listener was woken by this tenant's change")
		default:
		}
	})
}
