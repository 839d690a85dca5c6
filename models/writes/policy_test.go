package writes_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// withPolicy returns the demo registry with refund_order's policy_version
// changed, as after an operator tightened its rules and restarted.
func withPolicy(t testing.TB, version string) *registry.Registry {
	t.Helper()
	y := bytes.Replace(registry.DemoYAML(), []byte("policy_version: refund-2026-11.1"), []byte("policy_version: "+version), 1)
	if bytes.Equal(y, registry.DemoYAML()) {
		t.Fatal("demo registry no longer has refund_order's policy_version line")
	}
	reg, err := registry.Parse(y)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// A token confirmed under a tool's old rules must not run once the rules
// changed: the claim names the policy it was approved under, and the stored
// snapshot always names that same one, so only the registry in force can
// refuse it. Nothing is consumed or written.
func TestExecuteRefusesTokenOfChangedPolicy(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		p := e.confirm(e.propose("ord_1001", 19900))
		svc := e.newService(withPolicy(t, "refund-2026-12.1"))

		_, err := svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		wantCode(t, err, models.EOperationMismatch)
		if got := e.order("ord_1001").RefundedMinor; got != 0 {
			t.Errorf("refunded %d under a policy nobody approved", got)
		}
		got, err := svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != models.StatusConfirmed || got.Token.Status != models.TokenIssued || got.Execution != nil {
			t.Errorf("after refusal: proposal %s, token %s, execution %v; want nothing changed", got.Status, got.Token.Status, got.Execution)
		}
		// The same token under the rules it was approved under still runs.
		ex, err := e.svc.Execute(e.ctx, e.agent, p.ID, p.Token.Compact)
		if err != nil || ex.Status != models.StatusSucceeded {
			t.Fatalf("execute under the original policy: %v, %+v", err, ex)
		}
	})
}

// A tool removed from the registry: its token is refused before it is
// consumed, and neither the reconciler nor a reviewer's approval calls a
// missing adapter (that used to panic, and in the background loop it would
// take the process down at every start).
func TestToolRemovedFromRegistry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", nil)
	confirmed := e.confirm(e.propose("ord_1001", 19900))
	pending := e.propose("ord_1002", 100)

	// An execution whose outcome is unknown, left for the reconciler.
	unknown := e.confirm(e.propose("ord_1003", 100))
	e.adapter["refund_order"] = outcomeUnknown{e.ledger}
	if _, err := e.newService(registry.Demo()).Execute(e.ctx, e.agent, unknown.ID, unknown.Token.Compact); err != nil {
		t.Fatal(err)
	}

	smaller := withoutTool(t, "refund_order")
	delete(e.adapter, "refund_order")
	svc := e.newService(smaller)

	_, err := svc.Execute(e.ctx, e.agent, confirmed.ID, confirmed.Token.Compact)
	wantCode(t, err, models.EOperationMismatch)
	if got, _ := svc.Get(e.ctx, e.tenant, confirmed.ID); got.Token.Status != models.TokenIssued {
		t.Errorf("token %s after refusal, want issued", got.Token.Status)
	}

	_, err = svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: pending.ID, DigestSeen: pending.ArgsDigest, EffectSeen: pending.EffectDigest, Evidence: auth.ApprovalEvidence(e.alice, nil)})
	wantCode(t, err, models.EUnavailable)

	e.clock.Advance(time.Hour)
	if _, err := svc.Reconcile(e.ctx); err != nil {
		t.Fatal(err)
	}
	got, err := svc.Get(e.ctx, e.tenant, unknown.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Execution == nil || got.Execution.Status != models.StatusUnknown {
		t.Errorf("execution after reconcile without its tool: %+v, want still unknown", got.Execution)
	}
	if got := e.order("ord_1001").RefundedMinor; got != 0 {
		t.Errorf("refunded %d through a removed tool", got)
	}
}

type outcomeUnknown struct{ models.Adapter }

func (outcomeUnknown) Execute(context.Context, models.ExecuteRequest) (models.ExecuteResult, error) {
	return models.ExecuteResult{}, models.ErrOutcomeUnknown
}

// withoutTool returns the demo registry without the named tool.
func withoutTool(t testing.TB, name string) *registry.Registry {
	t.Helper()
	y := registry.DemoYAML()
	from := bytes.Index(y, []byte("  - name: "+name+"\n"))
	if from < 0 {
		t.Fatalf("demo registry has no %s", name)
	}
	to := bytes.Index(y[from+1:], []byte("  - name: "))
	if to < 0 {
		t.Fatalf("%s is the demo registry's last tool", name)
	}
	cut := append(bytes.Clone(y[:from]), y[from+1+to:]...)
	reg, err := registry.Parse(cut)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Tool(name); ok {
		t.Fatalf("%s still in the registry", name)
	}
	return reg
}
