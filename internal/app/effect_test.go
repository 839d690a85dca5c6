package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
)

// An agent reads the effect preview of its proposal in GET
// /api/v1/proposals/{id} (validated against the OpenAPI document) and in
// MCP get_proposal: the same description and digest the reviewer approves.
func TestAgentsSeeTheEffectPreview(t *testing.T) {
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	p := a.refund("ord_1001", 5000)
	stored := c.reloadProposal(p.ProposalID)
	if stored.Effect == nil || stored.EffectDigest == "" {
		t.Fatalf("the demo refund has no effect preview: %+v", stored.Effect)
	}

	got := a.get(p.ProposalID, 0)
	if got.Effect == nil || got.EffectDigest != stored.EffectDigest || len(got.Effect.Changes) != 2 ||
		got.Effect.Changes[1].Field != "refundable_minor" || string(got.Effect.Changes[1].After) != "14900" {
		t.Fatalf("MCP get_proposal effect %+v %q, want %q", got.Effect, got.EffectDigest, stored.EffectDigest)
	}

	var api struct {
		Effect struct {
			Facts   []struct{ Label, Value string } `json:"facts"`
			Changes []struct {
				Field         string `json:"field"`
				Before        int64  `json:"before"`
				After         int64  `json:"after"`
				BeforeDisplay string `json:"before_display"`
				AfterDisplay  string `json:"after_display"`
			} `json:"changes"`
		} `json:"effect"`
		EffectDigest string `json:"effect_digest"`
	}
	if code := mandateCall(t, c, http.MethodGet, "/api/v1/proposals/"+p.ProposalID, nil, &api); code != http.StatusOK {
		t.Fatalf("GET proposal: %d", code)
	}
	ch := api.Effect.Changes
	if api.EffectDigest != stored.EffectDigest || len(ch) != 2 || ch[1].Before != 19900 || ch[1].After != 14900 ||
		ch[1].AfterDisplay != "¥149.00 CNY" {
		t.Fatalf("API effect %+v %q", api.Effect, api.EffectDigest)
	}
}

// withEffect adds the effect digest a page showed to a step-up answer, as
// the console's script does.
func withEffect(t *testing.T, assertion, effect string) string {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal([]byte(assertion), &body); err != nil {
		t.Fatal(err)
	}
	body["effect"] = effect
	out, _ := json.Marshal(body)
	return string(out)
}

// A security-key approval carries the effect digest the page showed: a
// stale one is refused with effect_changed and records nothing; the one
// shown is recorded with the decision.
func TestStepUpCarriesTheEffectShown(t *testing.T) {
	c := stepUpConsole(t)
	b := c.alice()
	k := newKey(t, b)
	k.register("")
	p := c.propose("ord_2001", 50000)
	if p.EffectDigest == "" || p.Tier.Confirmation != models.ConfirmWebAuthn {
		t.Fatalf("effect %q tier %+v", p.EffectDigest, p.Tier)
	}
	status, out := b.postJSON(stepUpPath(p, "finish"), withEffect(t, k.assertionFor(p), "sha256:"+strings.Repeat("0", 64)))
	wantRefusal(t, "a stale effect", status, out, http.StatusConflict, models.EEffectChanged, "Nothing was approved")
	if n := len(c.reloadProposal(p.ID).Decisions); n != 0 {
		t.Fatalf("a refused step-up recorded %d decisions", n)
	}
	status, out = b.postJSON(stepUpPath(p, "finish"), withEffect(t, k.assertionFor(p), p.EffectDigest))
	if status != http.StatusOK {
		t.Fatalf("finish: %d %s", status, out)
	}
	got := c.reloadProposal(p.ID)
	if got.Status != models.StatusConfirmed || len(got.Decisions) != 1 || got.Decisions[0].EffectSeen != p.EffectDigest {
		t.Fatalf("status %s decisions %+v", got.Status, got.Decisions)
	}
}

// A security-key answer that names no effect, for a write with an effect
// preview (a page from before the preview), is refused before the ceremony
// is consumed or the key's counter moves: no decision, no audit entry, and
// the same signed answer, naming the effect the page shows, then approves.
func TestStepUpNamingNoEffectConsumesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, db string) {
		c := openConsole(t, func(cfg *app.Config) {
			cfg.RPID, cfg.Origins, cfg.DB = testRPID, []string{testOrigin}, db
		})
		ctx := context.Background()
		b := c.alice()
		k := newKey(t, b)
		k.register("k")
		p := c.propose("ord_2001", 50000)
		if p.EffectDigest == "" || p.Tier.Confirmation != models.ConfirmWebAuthn {
			t.Fatalf("effect %q tier %+v", p.EffectDigest, p.Tier)
		}
		alice := mustUser(t, c, "alice")
		keysBefore, err := c.app.Store.SecurityKeys(ctx, p.TenantID, alice.ID)
		if err != nil || len(keysBefore) != 1 {
			t.Fatalf("keys %v (%v)", keysBefore, err)
		}
		auditBefore, err := c.app.Store.ProposalAudit(ctx, p.TenantID, p.ID)
		if err != nil {
			t.Fatal(err)
		}

		// The key counts up, so that a refusal which recorded the answer
		// would show in the stored counter.
		k.cred.Counter = keysBefore[0].SignCount + 7
		resp := k.assertionFor(p)
		status, out := b.postJSON(stepUpPath(p, "finish"), resp)
		wantRefusal(t, "an answer naming no effect", status, out, http.StatusConflict, models.EEffectChanged,
			"did not show what this write would do", "Nothing was approved")
		got := c.reloadProposal(p.ID)
		if got.Status != models.StatusAwaitingConfirmation || len(got.Decisions) != 0 {
			t.Fatalf("after the refusal: %s with %d decisions", got.Status, len(got.Decisions))
		}
		auditAfter, err := c.app.Store.ProposalAudit(ctx, p.TenantID, p.ID)
		if err != nil || len(auditAfter) != len(auditBefore) {
			t.Fatalf("the refusal wrote audit entries: %d before, %d after (%v)", len(auditBefore), len(auditAfter), err)
		}
		keysAfter, err := c.app.Store.SecurityKeys(ctx, p.TenantID, alice.ID)
		if err != nil || keysAfter[0].SignCount != keysBefore[0].SignCount {
			t.Fatalf("the refusal moved the key's counter %d → %d (%v)", keysBefore[0].SignCount, keysAfter[0].SignCount, err)
		}

		status, out = b.postJSON(stepUpPath(p, "finish"), withEffect(t, resp, p.EffectDigest))
		if status != http.StatusOK {
			t.Fatalf("the same answer naming the effect: %d %s", status, out)
		}
		got = c.reloadProposal(p.ID)
		if got.Status != models.StatusConfirmed || len(got.Decisions) != 1 || got.Decisions[0].EffectSeen != p.EffectDigest {
			t.Fatalf("status %s decisions %+v", got.Status, got.Decisions)
		}
		// The accepted answer did move it: the check above could see a change.
		if keys, err := c.app.Store.SecurityKeys(ctx, p.TenantID, alice.ID); err != nil || keys[0].SignCount != keysBefore[0].SignCount+7 {
			t.Fatalf("after the approval the key's counter is %v, want %d (%v)", keys, keysBefore[0].SignCount+7, err)
		}
		// Consumed now: presented again, it approves nothing.
		status, out = b.postJSON(stepUpPath(p, "finish"), withEffect(t, resp, p.EffectDigest))
		if status < 400 {
			t.Fatalf("the answer presented again: %d %s", status, out)
		}
	})
}
