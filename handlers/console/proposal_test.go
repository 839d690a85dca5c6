package console_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

func TestProposalPageShowsMachineAndDisplayValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	r := e.get("/proposals/"+p.ID, "alice")
	wantStatus(t, r, http.StatusOK)

	tests := []struct{ name, machine, display string }{
		{"order_id", `"ord_1001"`, "ord_1001 · Order …1001"},
		{"amount_minor", `19900`, "¥199.00"},
		{"currency", `"CNY"`, "CNY"},
		{"reason", `"damaged on arrival"`, "damaged on arrival"},
	}
	if got, want := len(all(r.doc, "proposal-field")), len(tests); got != want {
		t.Errorf("%d fields, want %d", got, want)
	}
	for _, tt := range tests {
		f := field(t, r.doc, tt.name)
		m := one(t, f, "machine-value")
		if got := text(m); got != tt.machine {
			t.Errorf("%s machine value = %q, want %q", tt.name, got, tt.machine)
		}
		if m.Data != "code" {
			t.Errorf("%s machine value is a <%s>, want <code>", tt.name, m.Data)
		}
		wantContains(t, tt.name+" display value", text(one(t, f, "display-value")), tt.display)
	}

	d := one(t, r.doc, "digest")
	if got, want := attr(d, "title"), p.ArgsDigest; got != want {
		t.Errorf("digest title = %q, want the full digest %q", got, want)
	}
	hex := strings.TrimPrefix(p.ArgsDigest, "sha256:")
	if got, want := text(d), "sha256:"+hex[:8]+"…"+hex[len(hex)-8:]; got != want {
		t.Errorf("short digest = %q, want %q", got, want)
	}
	wantContains(t, "page", r.Body.String(), `data-copy="`+p.ArgsDigest+`"`)

	exp := one(t, r.doc, "expires")
	wantContains(t, "expiry", text(exp), "5 min 0 s left", "2026-09-01 06:25:00 UTC")
	if got, want := attr(exp, "data-expires-at"), "2026-09-01T06:25:00Z"; got != want {
		t.Errorf("data-expires-at = %q, want %q", got, want)
	}
	wantContains(t, "resource label", text(one(t, r.doc, "resource-label")), "Order …1001")
	if got, want := text(one(t, r.doc, "state-version")), p.StateVersion; got != want {
		t.Errorf("state version = %q, want %q", got, want)
	}
	wantContains(t, "tier", text(one(t, r.doc, "tier")), "low", "one reviewer's approval (a click)")
	wantContains(t, "context", text(one(t, r.doc, "context")), "customer sent photos of the broken item")
	wantContains(t, "requester", text(one(t, r.doc, "requester")), "demo-agent")
	wantContains(t, "quorum", text(one(t, r.doc, "quorum")), "0 of 1 approval")
	approve := one(t, r.doc, "approve")
	if hasAttr(approve, "disabled") {
		t.Error("Approve is disabled on a click-tier proposal")
	}
	one(t, r.doc, "decline")
	one(t, r.doc, "decline-reason")
	if len(all(r.doc, "alert")) != 0 {
		t.Error("an alert on a fresh page")
	}
	// The forms post the digest shown.
	wantContains(t, "page", r.Body.String(), `name="digest" value="`+p.ArgsDigest+`"`)
}

func TestProposalPageShowsTimesInTheNamedZone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args, _ := json.Marshal(map[string]any{"customer_id": "cus_001", "template": "apology", "subject": "Sorry",
		"body": "We are sorry.", "send_at": "2026-09-01T14:20:00+08:00"})
	p := e.propose("send_customer_email", args, "")
	r := e.get("/proposals/"+p.ID, "alice")
	f := field(t, r.doc, "send_at")
	if got, want := text(one(t, f, "machine-value")), `"2026-09-01T06:20:00Z"`; got != want {
		t.Errorf("machine value = %q, want %q", got, want)
	}
	wantContains(t, "display", text(one(t, f, "display-value")), "2026-09-01 06:20:00 UTC (UTC+00:00)")
	wantContains(t, "template", text(one(t, field(t, r.doc, "template"), "display-value")), "Apology")
}

func TestProposalNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantStatus(t, e.get("/proposals/prop_nope", "alice"), http.StatusNotFound)
	wantStatus(t, e.post("/proposals/prop_nope/approve", "alice", url.Values{"digest": {"sha256:00"}}), http.StatusNotFound)
}

func TestApprove(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	r := e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}, "csrf_token": {"t"}})
	wantStatus(t, r, http.StatusSeeOther)
	if got, want := r.Header().Get("Location"), "/proposals/"+p.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	got := e.wantDecisions(p.ID, 1)
	if got.Status != models.StatusConfirmed || got.Decisions[0].UserID != e.alice.ID || got.Decisions[0].DigestSeen != p.ArgsDigest {
		t.Errorf("after approve: status %s, decision %+v", got.Status, got.Decisions[0])
	}

	page := e.get("/proposals/"+p.ID, "alice")
	wantContains(t, "decision", text(one(t, page.doc, "decision")), "Approved", "alice", "password")
	wantContains(t, "quorum", text(one(t, page.doc, "quorum")), "1 of 1 approval", "complete")
	if len(all(page.doc, "approve")) != 0 {
		t.Error("Approve offered on a confirmed proposal")
	}
	wantContains(t, "note", text(one(t, page.doc, "decided-note")), "Confirmed", "one-time token")
}

func TestApproveWithHTMXRedirectsByHeader(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	r := e.do(http.MethodPost, "/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}, "HX-Request", "true")
	wantStatus(t, r, http.StatusOK)
	if got, want := r.Header().Get("HX-Redirect"), "/proposals/"+p.ID; got != want {
		t.Errorf("HX-Redirect = %q, want %q", got, want)
	}
}

func TestApproveWithWrongDigestIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	other := e.refund("ord_1001", 19800) // a real digest, of other arguments
	for _, digest := range []string{other.ArgsDigest, "sha256:" + strings.Repeat("0", 64), ""} {
		r := e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {digest}})
		wantStatus(t, r, http.StatusForbidden)
		wantContains(t, "alert", text(one(t, r.doc, "alert")), "digest", "Nothing was approved")
		if attr(one(t, r.doc, "alert"), "role") != "alert" {
			t.Error("the alert has no role=alert")
		}
		// The page is the stored proposal again, with its own digest.
		if got := attr(one(t, r.doc, "digest"), "title"); got != p.ArgsDigest {
			t.Errorf("re-rendered digest %q, want %q", got, p.ArgsDigest)
		}
	}
	if got := e.wantDecisions(p.ID, 0); got.Status != models.StatusAwaitingConfirmation {
		t.Errorf("status = %s, want awaiting_confirmation", got.Status)
	}
}

func TestApproveAfterExpiryIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	e.clock.Advance(5 * time.Minute) // now == expires_at: expired (right-open window)
	r := e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, r, http.StatusGone)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "This proposal expired at 2026-09-01 06:25:00 UTC", "Nothing was approved")
	wantContains(t, "expiry", text(one(t, r.doc, "expires")), "Expired at", "2026-09-01 06:25:00 UTC")
	if len(all(r.doc, "approve")) != 0 || len(all(r.doc, "decline")) != 0 {
		t.Error("decision forms offered on an expired proposal")
	}
	if got := e.wantDecisions(p.ID, 0); got.Status != models.StatusExpired {
		t.Errorf("status = %s, want expired", got.Status)
	}
	page := e.get("/proposals/"+p.ID, "alice")
	wantContains(t, "note", text(one(t, page.doc, "decided-note")), "expired at 2026-09-01 06:25:00 UTC")
	if hasAttr(one(t, page.doc, "expires"), "data-expires-at") {
		t.Error("an expired page still counts down")
	}
}

func TestApproveTwiceRecordsOneDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	form := url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}
	wantStatus(t, e.post("/proposals/"+p.ID+"/approve", "alice", form), http.StatusSeeOther)
	r := e.post("/proposals/"+p.ID+"/approve", "alice", form)
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "no longer awaiting", "Nothing was approved")
	e.wantDecisions(p.ID, 1)
}

func TestDeclineRequiresReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	for _, reason := range []string{"", "   ", strings.Repeat("x", 1001)} {
		r := e.post("/proposals/"+p.ID+"/decline", "alice", url.Values{"digest": {p.ArgsDigest}, "reason": {reason}})
		wantStatus(t, r, http.StatusUnprocessableEntity)
		wantContains(t, "form error", text(one(t, r.doc, "decline-error")), "reason is required")
		wantContains(t, "alert", text(one(t, r.doc, "alert")), "Nothing was declined")
		ta := one(t, r.doc, "decline-reason")
		if got := text(ta); got != strings.TrimSpace(reason) {
			t.Errorf("textarea keeps %q, want %q", got, strings.TrimSpace(reason))
		}
		if attr(ta, "aria-invalid") != "true" || attr(ta, "aria-describedby") != "decline-error" {
			t.Errorf("textarea aria-invalid=%q aria-describedby=%q", attr(ta, "aria-invalid"), attr(ta, "aria-describedby"))
		}
	}
	e.wantDecisions(p.ID, 0)

	r := e.post("/proposals/"+p.ID+"/decline", "alice", url.Values{"digest": {p.ArgsDigest}, "reason": {"the order was already refunded by phone"}})
	wantStatus(t, r, http.StatusSeeOther)
	if got := e.wantDecisions(p.ID, 1); got.Status != models.StatusDeclined {
		t.Errorf("status = %s, want declined", got.Status)
	}
	page := e.get("/proposals/"+p.ID, "bob")
	wantContains(t, "decision", text(one(t, page.doc, "decision")), "Declined", "alice", "the order was already refunded by phone")
}

func TestDeclineWithWrongDigestIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	r := e.post("/proposals/"+p.ID+"/decline", "alice", url.Values{"digest": {"sha256:" + strings.Repeat("1", 64)}, "reason": {"no"}})
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "Nothing was declined")
	// What was typed is kept.
	if got := text(one(t, r.doc, "decline-reason")); got != "no" {
		t.Errorf("textarea keeps %q, want %q", got, "no")
	}
	e.wantDecisions(p.ID, 0)
}

func TestWebAuthnTierCannotBeApprovedYet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_2001", 30000) // above 20000: high tier
	if p.Tier.Confirmation != models.ConfirmWebAuthn {
		t.Fatalf("tier %+v, want a webauthn tier", p.Tier)
	}
	r := e.get("/proposals/"+p.ID, "alice")
	approve := one(t, r.doc, "approve")
	if !hasAttr(approve, "disabled") {
		t.Error("Approve is enabled on a webauthn tier")
	}
	wantContains(t, "approve button", text(approve), "security key required")
	if got := attr(approve, "aria-describedby"); got != "approve-blocked" {
		t.Errorf("aria-describedby = %q", got)
	}
	wantContains(t, "reason", text(one(t, r.doc, "approve-blocked")), "security-key confirmation", "cannot be approved here")
	wantContains(t, "tier", text(one(t, r.doc, "tier")), "high", "security key")
	one(t, r.doc, "decline") // declining needs no security key

	// Posting the form anyway is refused by the protocol.
	r = e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "security-key", "Nothing was approved")
	e.wantDecisions(p.ID, 0)
}

func TestQuorumProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_2001", 300000) // quorum tier: two approvers
	if p.Tier.Quorum != 2 {
		t.Fatalf("tier %+v, want a quorum of 2", p.Tier)
	}
	r := e.get("/proposals/"+p.ID, "bob")
	wantContains(t, "quorum", text(one(t, r.doc, "quorum")), "0 of 2 approvals")
	wantContains(t, "tier", text(one(t, r.doc, "tier")), "2 distinct reviewers")

	e.confirm(p, e.alice)
	r = e.get("/proposals/"+p.ID, "bob")
	wantContains(t, "quorum", text(one(t, r.doc, "quorum")), "1 of 2 approvals")
	wantContains(t, "decision", text(one(t, r.doc, "decision")), "Approved", "alice", "password + security key")
	one(t, r.doc, "approve")

	// The reviewer who approved cannot decide again and is told why.
	r = e.get("/proposals/"+p.ID, "alice")
	if len(all(r.doc, "approve")) != 0 || len(all(r.doc, "decline")) != 0 {
		t.Error("decision forms offered to a reviewer who already approved")
	}
	wantContains(t, "note", text(one(t, r.doc, "decided-note")), "1 more approval")
	r = e.post("/proposals/"+p.ID+"/decline", "alice", url.Values{"digest": {p.ArgsDigest}, "reason": {"changed my mind"}})
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "already decided")
	e.wantDecisions(p.ID, 1)
}

func TestBatchProposalListsTheResourceSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	args, _ := json.Marshal(map[string]any{"log_ids": []string{"log_0003", "log_0001", "log_0002"}, "reason": "old debug traces"})
	p := e.propose("delete_logs", args, "")
	r := e.get("/proposals/"+p.ID, "alice")
	wantStatus(t, r, http.StatusOK)
	if got := text(one(t, r.doc, "batch-count")); got != "3" {
		t.Errorf("batch count = %q, want 3", got)
	}
	var ids []string
	for _, n := range all(r.doc, "batch-id") {
		ids = append(ids, text(n))
	}
	if got, want := strings.Join(ids, ","), "log_0001,log_0002,log_0003"; got != want {
		t.Errorf("batch ids = %s, want %s", got, want)
	}
	wantContains(t, "batch", text(one(t, r.doc, "batch")), "3 resources")
	if got, want := text(one(t, field(t, r.doc, "log_ids"), "machine-value")), `["log_0001","log_0002","log_0003"]`; got != want {
		t.Errorf("machine value = %q, want %q", got, want)
	}
	wantContains(t, "resource", text(one(t, r.doc, "resource")), p.ResourceSetDigest)

	// In the list, the batch's summary is its ids.
	list := e.get("/", "alice")
	wantContains(t, "summary", text(one(t, list.doc, "summary")), "3 items: log_0001, log_0002, log_0003")
}

func TestConcurrentApprovesRecordOneDecision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	const n = 8
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodPost, "/proposals/"+p.ID+"/approve",
				strings.NewReader(url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("X-Test-User", "alice")
			rec := httptest.NewRecorder()
			e.echo.ServeHTTP(rec, req)
			codes <- rec.Code
		})
	}
	wg.Wait()
	close(codes)
	counts := map[int]int{}
	for c := range codes {
		counts[c]++
	}
	if counts[http.StatusSeeOther] != 1 || counts[http.StatusConflict] != n-1 {
		t.Errorf("statuses %v, want one 303 and %d × 409", counts, n-1)
	}
	e.wantDecisions(p.ID, 1)
}

func TestSelfApprovalIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bot, err := e.store.CreateAgent(e.ctx, e.alice.TenantID, "alice-bot", e.alice.ID, secret.HashAPIKey("csk_alice_bot_key"))
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := e.svc.Propose(e.ctx, bot, writes.ProposeInput{Tool: "refund_order", Arguments: refundArgs("ord_1001", 19900)})
	if err != nil {
		t.Fatal(err)
	}
	r := e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}})
	wantStatus(t, r, http.StatusForbidden)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "alice-bot", "may not approve it yourself", "Nothing was approved")
	e.wantDecisions(p.ID, 0)
	// Someone else may.
	wantStatus(t, e.post("/proposals/"+p.ID+"/approve", "bob", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}), http.StatusSeeOther)
}

func TestApproveAfterTheTargetChangedIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	stale := e.refund("ord_1001", 100)
	// Another refund of the same order runs first and moves its state.
	other := e.confirm(e.refund("ord_1001", 200), e.alice)
	if _, err := e.svc.Execute(e.ctx, e.agent, other.ID, other.Token.Compact); err != nil {
		t.Fatal(err)
	}
	r := e.post("/proposals/"+stale.ID+"/approve", "bob", url.Values{"digest": {stale.ArgsDigest}, "effect": {stale.EffectDigest}})
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "target changed", "Nothing was approved", "propose again")
	e.wantDecisions(stale.ID, 0)
}

// An approval posted without the effect the page shows (a page from before
// the preview, a hand-made request), or with another one, is refused: the
// page says it was out of date, that nothing was approved, and to look at
// the effect before deciding again; nothing is recorded.
func TestApproveWithoutTheEffectShownIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.refund("ord_1001", 19900)
	if p.EffectDigest == "" {
		t.Fatal("the demo refund has no effect preview")
	}
	r := e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "csrf_token": {"t"}})
	wantStatus(t, r, http.StatusConflict)
	alert := text(one(t, r.doc, "alert"))
	wantContains(t, "alert", alert, "did not show what this write would do", "out of date", "Nothing was approved.",
		"Reload the proposal, look at the effect")
	if strings.Contains(alert, "describes what this write would do differently") {
		t.Errorf("alert %q blames the business system", alert)
	}
	r = e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {"sha256:" + strings.Repeat("0", 64)}})
	wantStatus(t, r, http.StatusConflict)
	wantContains(t, "alert", text(one(t, r.doc, "alert")), "not the one stored with this proposal", "Nothing was approved.")
	e.wantDecisions(p.ID, 0)
	if got, _ := e.svc.Get(e.ctx, p.TenantID, p.ID); got.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("status %s after refused approvals", got.Status)
	}
	// The form the page renders carries the effect, and approves.
	page := e.get("/proposals/"+p.ID, "alice")
	if !strings.Contains(page.Body.String(), `name="effect" value="`+p.EffectDigest+`"`) {
		t.Fatal("the approve form does not carry the effect digest")
	}
	wantStatus(t, e.post("/proposals/"+p.ID+"/approve", "alice", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}), http.StatusSeeOther)
}
