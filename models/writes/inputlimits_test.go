package writes_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// TestRequestKeysTheAdapterCannotSend: keys that could not travel as a
// header and a path segment, or that read as path steps, are refused at
// propose time; nothing is stored and the business system is not asked.
func TestRequestKeysTheAdapterCannotSend(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		for _, key := range []string{".", "..", "a b", "a/b", "clé", "a\nb", "ключ", "k\u200bey", strings.Repeat("k", 201)} {
			_, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
				Arguments: refundArgs("ord_1003", 100), RequestKey: key})
			wantCode(t, err, models.EInvalidRequest)
		}
		// The limits are inclusive.
		p, created, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1003", 100), RequestKey: strings.Repeat("k", 198) + "..",
			Context: strings.Repeat("é", writes.MaxContext)})
		if err != nil || !created {
			t.Fatalf("200-character key and %d-character context: %v", writes.MaxContext, err)
		}
		_, _, err = e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord_1004", 100), Context: strings.Repeat("é", writes.MaxContext+1)})
		wantCode(t, err, models.EInvalidRequest)
		page, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{})
		if err != nil || len(page.Items) != 1 || page.Items[0].ID != p.ID {
			t.Fatalf("refused proposals were stored: %d items (%v)", len(page.Items), err)
		}
	})
}

// TestDerivedKeyFromAnUnsendableResource: without a request_key the key is
// derived from the resource id; a resource id no key can carry is refused
// before the business system is asked, with a hint to send a key.
func TestDerivedKeyFromAnUnsendableResource(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		asked := 0
		e2 := newEnv(t, e.dbKind, func(e2 *env) *registry.Registry {
			yaml := strings.Replace(string(registry.DemoYAML()), `pattern: "^ord_[0-9]{4}$"`, `minLength: 1`, 1)
			reg, err := registry.Parse([]byte(yaml))
			if err != nil {
				t.Fatal(err)
			}
			e2.adapter["refund_order"] = countingAdapter{Adapter: e2.ledger, calls: &asked}
			return reg
		})
		for _, order := range []string{"ord 1001", "заказ-1", "ord/1001"} {
			_, _, err := e2.svc.Propose(e2.ctx, e2.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs(order, 100)})
			wantCode(t, err, models.EInvalidRequest)
			if !strings.Contains(err.Error(), "request_key") {
				t.Errorf("%q: %v; want a hint to send a request_key", order, err)
			}
		}
		if asked != 0 {
			t.Fatalf("the business system was asked %d times", asked)
		}
		// With a key of its own, the same write goes through to validation.
		_, _, err := e2.svc.Propose(e2.ctx, e2.agent, writes.ProposeInput{Tool: "refund_order",
			Arguments: refundArgs("ord 1001", 100), RequestKey: "refund-ord-1001"})
		wantCode(t, err, models.EBusinessRule) // no such order in the demo ledger
		if asked != 1 {
			t.Fatalf("asked %d times, want 1", asked)
		}
	})
}

// countingAdapter counts validations.
type countingAdapter struct {
	models.Adapter
	calls *int
}

func (c countingAdapter) Validate(ctx context.Context, req models.ValidateRequest) (models.ValidateResult, error) {
	*c.calls++
	return c.Adapter.Validate(ctx, req)
}

// Free text holding U+0000, which PostgreSQL cannot store in a text
// column, is refused as bad input on both databases, at its field: the
// agent's context (of a proposal and of a mandate request), a reviewer's
// comment, decline reason and edit reason. Nothing is stored.
func TestNULInFreeTextIsRefusedOnEveryDatabase(t *testing.T) {
	t.Parallel()
	eachDB(t, func(t *testing.T, e *env) {
		nul := "before\x00after"
		_, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1001", 100), Context: nul})
		wantField(t, err, "/context")
		_, _, err = e.svc.RequestMandate(e.ctx, e.agent, writes.MandateInput{Terms: models.MandateTerms{Tool: "refund_order"}, Context: nul})
		wantField(t, err, "/context")
		p := e.propose("ord_1002", 100)
		_, err = e.svc.Confirm(e.ctx, writes.ConfirmInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			EffectSeen: p.EffectDigest, Comment: nul, Evidence: auth.ApprovalEvidence(e.alice, nil)})
		wantField(t, err, "/comment")
		_, err = e.svc.Decline(e.ctx, writes.DeclineInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest, Reason: nul})
		wantField(t, err, "/reason")
		_, err = e.svc.Counter(e.ctx, writes.CounterInput{Reviewer: e.alice, ProposalID: p.ID, DigestSeen: p.ArgsDigest,
			Arguments: refundArgs("ord_1002", 50), Reason: nul})
		wantField(t, err, "/reason")
		got, err := e.svc.Get(e.ctx, e.tenant, p.ID)
		if err != nil || got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
			t.Fatalf("after the refusals: %s, %d decisions (%v)", got.Status, len(got.Decisions), err)
		}
	})
}

func wantField(t *testing.T, err error, pointer string) {
	t.Helper()
	var me *models.Error
	if !errors.As(err, &me) || me.Code != models.EInvalidRequest || len(me.Fields) != 1 || me.Fields[0].Pointer != pointer {
		t.Fatalf("error %v, want invalid_request at %s", err, pointer)
	}
}

// A business system whose validate answer is out of bounds (a resource
// label of thousands of characters, text holding U+0000) gets nothing
// stored: the create is unavailable, and a target labelled within the
// bounds is proposed as before.
func TestValidateAnswerOutOfBoundsStoresNothing(t *testing.T) {
	t.Parallel()
	e, biz := httpEnv(t, "sqlite", 2*time.Second)
	biz.AddResource("ord_1002", strings.Repeat("L", models.MaxResourceLabel+1), 19900)
	biz.AddResource("ord_1003", "Order\x001003", 19900)
	biz.AddResource("ord_1004", strings.Repeat("L", models.MaxResourceLabel), 19900)
	for _, order := range []string{"ord_1002", "ord_1003"} {
		_, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs(order, 100)})
		wantCode(t, err, models.EUnavailable)
	}
	if page, err := e.svc.List(e.ctx, e.tenant, writes.ListQuery{}); err != nil || len(page.Items) != 0 {
		t.Fatalf("stored after the refusals: %d proposals (%v)", len(page.Items), err)
	}
	if p, _, err := e.svc.Propose(e.ctx, e.agent, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1004", 100)}); err != nil ||
		p.ResourceLabel != strings.Repeat("L", models.MaxResourceLabel) {
		t.Fatalf("a label at the bound: %v", err)
	}
}
