package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/writes"
)

// The two screens every console page is checked on.
var screens = []struct {
	name          string
	width, height int64
}{
	{"1366", 1366, 900},
	{"360", 360, 740},
}

// skewClock is the real clock moved on by a test: the server's sense of
// "now" without stopping time.
type skewClock struct{ off atomic.Int64 }

func (c *skewClock) Now() time.Time {
	return time.Now().UTC().Add(time.Duration(c.off.Load())).Truncate(time.Millisecond)
}
func (c *skewClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// demoServer is the application serving the demo on a loopback port, with
// the database file another process (the command line) may open too.
type demoServer struct {
	base  string
	db    string
	creds app.DemoCredentials
	clock *skewClock
}

func startDemo(t *testing.T, mutate ...func(*app.Config)) *demoServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &demoServer{base: "http://" + ln.Addr().String(), db: "sqlite://" + filepath.Join(t.TempDir(), "c.db"), clock: &skewClock{}}
	cfg := app.Config{DB: d.db, Addr: ln.Addr().String(), BaseURL: d.base, DefaultTenant: "demo",
		Logger: slog.New(slog.DiscardHandler), PollInterval: 100 * time.Millisecond, PasswordHash: cheapPasswordHash, Clock: d.clock}
	for _, m := range mutate {
		m(&cfg)
	}
	a, err := app.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.creds, err = a.SeedDemo(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln, 500*time.Millisecond) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return d
}

// terminal opens the database the way `countersign review …` does: another
// application over the same file, with a connection of its own.
func (d *demoServer) terminal(t *testing.T) *app.App {
	t.Helper()
	a, err := app.Open(context.Background(), app.Config{DB: d.db, Logger: slog.New(slog.DiscardHandler), Clock: d.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func terminalUser(t *testing.T, a *app.App, name string) models.User {
	t.Helper()
	ctx := context.Background()
	ten, err := a.Store.TenantByName(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	u, _, err := a.Store.UserCredentials(ctx, ten.ID, name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (j *journey) signIn(base, user, password string) {
	j.t.Helper()
	j.signInAfter(base, user, password)
}

// signInAfter is signIn with actions run on the sign-in page before the
// form is filled in.
func (j *journey) signInAfter(base, user, password string, first ...chromedp.Action[chromedp.Void]) {
	j.t.Helper()
	steps := append([]chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/login"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=login-form]`))}, first...)
	j.step("sign in as "+user, append(steps,
		chromedp.SetValue(chromedp.CSS(`[data-testid=login-org]`), "demo"),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=login-username]`), user),
		chromedp.SendKeys(chromedp.CSS(`[data-testid=login-password]`), password),
		chromedp.Click(chromedp.CSS(`[data-testid=login-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=whoami]`)))...)
}

func (j *journey) eval(js string) string {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(j.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		j.t.Fatalf("evaluate %s: %v", js, err)
	}
	return s
}

// within polls the page until cond (a JavaScript expression) holds, or
// fails the test after d.
func (j *journey) within(d time.Duration, what, cond string) {
	j.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if j.eval(`String(!!(`+cond+`))`) == "true" {
			return
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("%s: not within %s (%s)", what, d, cond)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrowserTheWriteComesFirst checks, on a desktop and on a phone, that
// the proposal page leads with what the write does: the one-line summary
// (action, amount, target) inside the first screen however long the agent's
// context is, then the business system's facts about the target, then the
// table of machine and display values, and the agent's context last,
// folded and marked as not verified.
func TestBrowserTheWriteComesFirst(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	long := strings.Repeat("The customer wrote four times about the damaged parcel and attached photos.\n", 40)
	refund := agent.propose(fmt.Sprintf(`{"tool":"refund_order","arguments":{"order_id":"ord_2001","amount_minor":50000,"currency":"CNY","reason":"Partial refund for a damaged item"},"context":%q}`, long))
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)

	for _, s := range screens {
		j.step("open at "+s.name,
			chromedp.EmulateViewport(s.width, s.height),
			chromedp.Navigate(d.base+"/proposals/"+refund.ID),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=write-summary]`)),
		)
		if got, want := j.text(`[data-testid=write-summary]`), "Refund ¥500.00 CNY to order ord_2001 · original payment method"; got != want {
			t.Errorf("%s: summary = %q, want %q", s.name, got, want)
		}
		// Action, amount and target are in the first screen.
		box := j.eval(`(() => { window.scrollTo(0, 0); const r = document.querySelector('[data-testid=write-summary]').getBoundingClientRect();
			return [r.top, r.bottom, r.left, r.right, innerHeight, innerWidth].map(Math.round).join(' '); })()`)
		var top, bottom, left, right, vh, vw int
		fmt.Sscan(box, &top, &bottom, &left, &right, &vh, &vw)
		if top < 0 || bottom > vh || left < 0 || right > vw {
			t.Errorf("%s: the summary's box %s lies outside the first screen %d×%d", s.name, box, vw, vh)
		}
		// The business system's effect preview, before the table.
		if got := j.text(`[data-testid=change][data-field=refundable_minor] [data-testid=change-before] .display`); got != "¥5,000.00 CNY" {
			t.Errorf("%s: refundable before = %q", s.name, got)
		}
		order := j.eval(`(() => { const q = s => document.querySelector(s);
			const before = (a, b) => !!(q(a).compareDocumentPosition(q(b)) & Node.DOCUMENT_POSITION_FOLLOWING);
			return [before('[data-testid=write-summary]', '[data-testid=effect]'), before('[data-testid=effect]', 'table.args'),
				before('table.args', '[data-testid=context]')].join(' '); })()`)
		if order != "true true true" {
			t.Errorf("%s: summary → effect → table → context order: %s", s.name, order)
		}
		// The long context is folded and labelled.
		if got := j.eval(`String(document.querySelector('[data-testid=context-details]').open)`); got != "false" {
			t.Errorf("%s: long context open = %s", s.name, got)
		}
		if got := j.text(`[data-testid=not-verified]`); !strings.Contains(got, "not verified") {
			t.Errorf("%s: context label = %q", s.name, got)
		}
		j.shot("proposal-write-first-" + s.name + ".png")
	}
}

// TestBrowserTheConsequenceIsNamed: the Approve button says what will
// happen, an approval carries its optional comment, and the agent reads it.
func TestBrowserTheConsequenceIsNamed(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	for i, s := range screens {
		order := fmt.Sprintf("ord_10%02d", 11+i)
		refund := agent.propose(fmt.Sprintf(`{"tool":"refund_order","arguments":{"order_id":%q,"amount_minor":19900,"currency":"CNY","reason":"Parcel lost"}}`, order))
		j.step("open at "+s.name,
			chromedp.EmulateViewport(s.width, s.height),
			chromedp.Navigate(d.base+"/proposals/"+refund.ID),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)),
		)
		if got, want := j.text(`[data-testid=approve]`), "Approve refund of ¥199.00 to "+order; got != want {
			t.Errorf("%s: approve button = %q, want %q", s.name, got, want)
		}
		j.shot("proposal-approve-" + s.name + ".png")
		j.step("approve with a comment at "+s.name,
			chromedp.SendKeys(chromedp.CSS(`[data-testid=approve-comment]`), "Carrier confirmed the loss"),
			chromedp.Click(chromedp.CSS(`[data-testid=approve]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=decided-note]`)),
		)
		if got := j.text(`[data-testid=decision-reason]`); got != "Carrier confirmed the loss" {
			t.Errorf("%s: the page shows the comment %q", s.name, got)
		}
		res, body := agent.do("GET", "/api/v1/proposals/"+refund.ID, "", nil)
		if res.StatusCode != 200 || !strings.Contains(string(body), `"reason":"Carrier confirmed the loss"`) {
			t.Errorf("%s: the agent does not read the comment: %d %s", s.name, res.StatusCode, body)
		}
	}
}

// TestBrowserLiveProposalPage: while a proposal page is open, what happens
// elsewhere — an approval from the terminal (another process's write to the
// database), a revocation, an execution, the window running out — shows
// within two seconds, and the forms go away when no decision is possible.
func TestBrowserLiveProposalPage(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	term := d.terminal(t)
	admin := terminalUser(t, term, d.creds.Admin)
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	const live = 2 * time.Second
	statusIs := func(want string) string {
		return `document.querySelector('[data-testid=status]').textContent.includes(` + fmt.Sprintf("%q", want) + `)`
	}
	noForms := `!document.querySelector('[data-testid=approve]') && !document.querySelector('[data-testid=decline]')`

	for i, s := range screens {
		// Approved from the terminal, then revoked there.
		a := agent.propose(fmt.Sprintf(`{"tool":"refund_order","arguments":{"order_id":"ord_10%02d","amount_minor":1000,"currency":"CNY","reason":"x"}}`, 1+i))
		j.step("open at "+s.name,
			chromedp.EmulateViewport(s.width, s.height),
			chromedp.Navigate(d.base+"/proposals/"+a.ID),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)),
		)
		p, err := term.Protocol.Get(context.Background(), admin.TenantID, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := term.Protocol.Confirm(context.Background(), writes.ConfirmInput{Reviewer: admin, ProposalID: a.ID, DigestSeen: p.ArgsDigest, EffectSeen: p.EffectDigest, Evidence: auth.ApprovalEvidence(admin, nil)}); err != nil {
			t.Fatal(err)
		}
		j.within(live, s.name+": approval from the terminal shows", statusIs("Confirmed"))
		j.within(live, s.name+": forms gone once confirmed", noForms)
		if got := j.text(`[data-testid=quorum]`); !strings.Contains(got, "1 of 1") {
			t.Errorf("%s: quorum after the terminal's approval = %q", s.name, got)
		}
		if got := j.text(`[data-testid=decision]`); !strings.Contains(got, d.creds.Admin) {
			t.Errorf("%s: decisions = %q", s.name, got)
		}
		j.shot("proposal-live-" + s.name + ".png")
		if _, err := term.Protocol.Revoke(context.Background(), admin, a.ID); err != nil {
			t.Fatal(err)
		}
		j.within(live, s.name+": revocation shows", statusIs("Revoked"))

		// Approved by the agent's reviewer elsewhere, then executed.
		b := agent.propose(fmt.Sprintf(`{"tool":"refund_order","arguments":{"order_id":"ord_10%02d","amount_minor":1000,"currency":"CNY","reason":"x"}}`, 5+i))
		j.step("open b at "+s.name,
			chromedp.Navigate(d.base+"/proposals/"+b.ID),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)),
		)
		pb, err := term.Protocol.Confirm(context.Background(), writes.ConfirmInput{Reviewer: admin, ProposalID: b.ID, DigestSeen: mustDigest(t, term, admin, b.ID), EffectSeen: mustEffect(t, term, admin, b.ID), Evidence: auth.ApprovalEvidence(admin, nil)})
		if err != nil {
			t.Fatal(err)
		}
		j.within(live, s.name+": confirmation shows", statusIs("Confirmed"))
		if exec := agent.execute(b.ID, pb.Token.Compact); exec["status"] != "succeeded" {
			t.Fatalf("execution: %v", exec)
		}
		j.within(live, s.name+": execution shows", statusIs("Succeeded"))
		j.within(live, s.name+": receipt shows", `document.querySelector('[data-testid=receipt]')`)

		// The window runs out while the page is open.
		c := agent.propose(fmt.Sprintf(`{"tool":"refund_order","arguments":{"order_id":"ord_10%02d","amount_minor":1000,"currency":"CNY","reason":"x"}}`, 8+i))
		j.step("open c at "+s.name,
			chromedp.Navigate(d.base+"/proposals/"+c.ID),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=approve]`)),
		)
		d.clock.Advance(301 * time.Second) // the low tier's window is 300 s
		j.within(live, s.name+": expiry shows", statusIs("Expired"))
		j.within(live, s.name+": forms gone once expired", noForms)
	}
}

// mustEffect is the effect digest of proposal id, as its page shows it.
func mustEffect(t *testing.T, a *app.App, u models.User, id string) string {
	t.Helper()
	p, err := a.Protocol.Get(context.Background(), u.TenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	return p.EffectDigest
}

func mustDigest(t *testing.T, a *app.App, u models.User, id string) string {
	t.Helper()
	p, err := a.Protocol.Get(context.Background(), u.TenantID, id)
	if err != nil {
		t.Fatal(err)
	}
	return p.ArgsDigest
}

// TestBrowserTerminalDecisionsReachTheList: a decision made with
// `countersign review approve` (another process writing the database file)
// leaves the open pending list within two seconds.
func TestBrowserTerminalDecisionsReachTheList(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	term := d.terminal(t)
	admin := terminalUser(t, term, d.creds.Admin)
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	for i, s := range screens {
		p := agent.propose(fmt.Sprintf(`{"tool":"refund_order","arguments":{"order_id":"ord_10%02d","amount_minor":1000,"currency":"CNY","reason":"x"}}`, 1+i))
		row := fmt.Sprintf(`document.querySelector('[data-testid=pending-row] a[href="/proposals/%s"]')`, p.ID)
		j.step("list at "+s.name, chromedp.EmulateViewport(s.width, s.height), chromedp.Navigate(d.base+"/"))
		j.within(5*time.Second, s.name+": the proposal is listed", row)
		if _, err := term.Protocol.Confirm(context.Background(), writes.ConfirmInput{Reviewer: admin, ProposalID: p.ID,
			DigestSeen: mustDigest(t, term, admin, p.ID), EffectSeen: mustEffect(t, term, admin, p.ID), Evidence: auth.ApprovalEvidence(admin, nil)}); err != nil {
			t.Fatal(err)
		}
		j.within(2*time.Second, s.name+": the terminal's approval leaves the list", "!"+row)
	}
}

// ownedAgent creates, from the terminal, an agent owned by the named
// reviewer and returns an API client for it.
func (d *demoServer) ownedAgent(t *testing.T, term *app.App, name, owner string) *agentClient {
	t.Helper()
	u := terminalUser(t, term, owner)
	key, hash, err := secret.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := term.Store.CreateAgent(context.Background(), u.TenantID, name, u.ID, hash); err != nil {
		t.Fatal(err)
	}
	return &agentClient{t: t, base: d.base, key: key}
}

// fifteen proposes fifteen writes of every tool and tier, two of them to
// the same order, and returns the ids in the order they were made.
func fifteen(t *testing.T, agent, owned *agentClient) []string {
	t.Helper()
	bodies := []string{
		`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":19900,"currency":"CNY","reason":"Parcel lost in transit"}}`,
		`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":5000,"currency":"CNY","reason":"Goodwill for the delay"}}`,
		`{"tool":"refund_order","arguments":{"order_id":"ord_2002","amount_minor":50000,"currency":"CNY","reason":"Partial refund for a damaged item"}}`,
		`{"tool":"refund_order","arguments":{"order_id":"ord_2003","amount_minor":499900,"currency":"CNY","reason":"Full refund: the order never shipped and the customer cancelled"}}`,
		`{"tool":"send_customer_email","arguments":{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"We are sorry.","send_at":null}}`,
		`{"tool":"send_customer_email","arguments":{"customer_id":"cus_002","template":"shipping_delay","subject":"Delay","body":"Your parcel is late.","send_at":"2026-12-01T09:00:00+08:00"}}`,
		`{"tool":"delete_logs","arguments":{"log_ids":["log_0001","log_0002","log_0003"],"reason":"Debug traces with customer data"}}`,
		`{"tool":"refund_order","arguments":{"order_id":"ord_1004","amount_minor":1200,"currency":"CNY","reason":"Shipping fee refund"}}`,
		`{"tool":"refund_order","arguments":{"order_id":"ord_1005","amount_minor":9900,"currency":"CNY","reason":"Price match"}}`,
		`{"tool":"refund_order","arguments":{"order_id":"ord_2004","amount_minor":250000,"currency":"CNY","reason":"Two items returned"}}`,
		`{"tool":"send_customer_email","arguments":{"customer_id":"cus_003","template":"refund_confirmation","subject":"Refunded","body":"Done.","send_at":null}}`,
		`{"tool":"delete_logs","arguments":{"log_ids":["log_0010"],"reason":"Duplicate entry"}}`,
		`{"tool":"refund_order","arguments":{"order_id":"ord_1006","amount_minor":300,"currency":"CNY","reason":"Coupon not applied"}}`,
	}
	var ids []string
	for _, b := range bodies {
		ids = append(ids, agent.propose(b).ID)
	}
	ids = append(ids, owned.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1007","amount_minor":800,"currency":"CNY","reason":"Missing accessory"}}`).ID)
	ids = append(ids, owned.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_2005","amount_minor":300000,"currency":"CNY","reason":"Wrong size, both returned"}}`).ID)
	return ids
}

// TestBrowserPendingTriage: the pending list sorts by time left, shows
// target id, amount, reason, quorum progress, requester and owner in
// compact rows (ten or more on a desktop screen), points out two pending
// writes to one target, counts the pending proposals in the tab's title,
// offers the registry's tiers as a select, keeps the focused row across
// live refreshes and tells the owner of an agent that another reviewer
// must decide.
func TestBrowserPendingTriage(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	term := d.terminal(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	owned := d.ownedAgent(t, term, "alices-bot", d.creds.Reviewer)
	ids := fifteen(t, agent, owned)
	admin := terminalUser(t, term, d.creds.Admin)
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)

	decided := 0
	for _, s := range screens {
		j.step("list at "+s.name, chromedp.EmulateViewport(s.width, s.height), chromedp.Navigate(d.base+"/"),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=pending-row]`)))
		pendingNow := len(ids) - decided
		if got, want := j.eval(`document.title`), fmt.Sprintf("(%d) Pending proposals · countersign", pendingNow); got != want {
			t.Errorf("%s: title = %q, want %q", s.name, got, want)
		}
		// By time left: expiries never decrease down the list.
		order := j.eval(`[...document.querySelectorAll('[data-testid=pending-row] [data-expires-at]')].map(e => e.dataset.expiresAt).join(' ')`)
		exps := strings.Fields(order)
		if len(exps) != pendingNow {
			t.Fatalf("%s: %d rows with a countdown, want %d", s.name, len(exps), pendingNow)
		}
		for i := 1; i < len(exps); i++ {
			if exps[i] < exps[i-1] {
				t.Errorf("%s: not by time left: %v", s.name, exps)
				break
			}
		}
		if s.width >= 1366 {
			visible := j.eval(`String([...document.querySelectorAll('[data-testid=pending-row]')].filter(r => r.getBoundingClientRect().bottom <= innerHeight).length)`)
			if n := atoi(visible); n < 10 {
				t.Errorf("%s: %d rows in the first screen, want at least 10", s.name, n)
			}
		}
		row := func(id string) string { return fmt.Sprintf(`[data-row-id="%s"] `, id) }
		if got := j.text(row(ids[0]) + `[data-testid=target-id]`); got != "ord_1001" {
			t.Errorf("%s: target id = %q", s.name, got)
		}
		if got := j.text(row(ids[0]) + `[data-testid=summary]`); !strings.Contains(got, "¥199.00") {
			t.Errorf("%s: amount = %q", s.name, got)
		}
		if got := j.text(row(ids[0]) + `[data-testid=reason]`); got != "Parcel lost in transit" {
			t.Errorf("%s: reason = %q", s.name, got)
		}
		if got := j.text(row(ids[3]) + `[data-testid=quorum]`); got != "0 of 2" {
			t.Errorf("%s: quorum of the two-approver refund = %q", s.name, got)
		}
		for _, id := range ids[:2] {
			if got := j.text(row(id) + `[data-testid=shared-target]`); !strings.Contains(got, "2 pending proposals") || !strings.Contains(got, "ord_1001") {
				t.Errorf("%s: shared-target hint = %q", s.name, got)
			}
		}
		if n := j.eval(`String(document.querySelectorAll('[data-testid=shared-target]').length)`); n != "2" {
			t.Errorf("%s: %s rows carry a shared-target hint, want 2", s.name, n)
		}
		if got := j.text(row(ids[13]) + `[data-testid=owner]`); !strings.Contains(got, d.creds.Reviewer) {
			t.Errorf("%s: owner = %q", s.name, got)
		}
		if got := j.text(row(ids[13]) + `[data-testid=own-note]`); got != "You own this agent, another reviewer must decide." {
			t.Errorf("%s: own note = %q", s.name, got)
		}
		if got := j.eval(`document.getElementById('pending-rows').getAttribute('aria-live')`); got != "polite" {
			t.Errorf("%s: aria-live = %q", s.name, got)
		}
		if got := j.eval(`[...document.querySelectorAll('select#filter-tier option')].map(o => o.value).join(',')`); got != ",high,low,quorum,standard" {
			t.Errorf("%s: tier filter options = %q", s.name, got)
		}
		j.shot("pending-" + s.name + ".png")

		// Focus stays on the same row while the list is redrawn.
		keep := ids[8]
		j.step("focus a row", chromedp.Focus(chromedp.CSS(row(keep)+`a[data-testid=tool-title]`)))
		gone := ids[12-decided]
		if _, err := term.Protocol.Confirm(context.Background(), writes.ConfirmInput{Reviewer: admin, ProposalID: gone,
			DigestSeen: mustDigest(t, term, admin, gone), EffectSeen: mustEffect(t, term, admin, gone), Evidence: auth.ApprovalEvidence(admin, nil)}); err != nil {
			t.Fatal(err)
		}
		decided++
		j.within(2*time.Second, s.name+": the count in the title follows", fmt.Sprintf(`document.title.startsWith("(%d)")`, len(ids)-decided))
		j.within(2*time.Second, s.name+": the decided row leaves", fmt.Sprintf(`!document.querySelector('[data-row-id="%s"]')`, gone))
		j.within(2*time.Second, s.name+": the refresh settles", `!document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')`)
		if got := j.eval(`(document.activeElement.closest('[data-row-id]') || {}).dataset?.rowId || ''`); got != keep {
			t.Errorf("%s: focus after the live refresh is on row %q, want %q", s.name, got, keep)
		}
	}
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// TestBrowserHistoryAnswersQuestions: each history card says what the
// write did, what the business system answered (the refunded amount) or
// why nothing was done, who approved with which method and comment; the
// history filters by target, agent, reviewer, tool, status and date, pages
// by keyset, and a proposal's page shows its whole timeline.
func TestBrowserHistoryAnswersQuestions(t *testing.T) {
	t.Parallel()
	d := startDemo(t)
	j := newJourney(t)
	term := d.terminal(t)
	agent := &agentClient{t: t, base: d.base, key: d.creds.AgentKey}
	other := d.ownedAgent(t, term, "billing-bot", d.creds.Admin)
	admin := terminalUser(t, term, d.creds.Admin)
	alice := terminalUser(t, term, d.creds.Reviewer)
	ctx := context.Background()
	approve := func(u models.User, id, comment string) *models.Proposal {
		t.Helper()
		p, err := term.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: u, ProposalID: id, DigestSeen: mustDigest(t, term, u, id), EffectSeen: mustEffect(t, term, u, id), Evidence: auth.ApprovalEvidence(u, nil), Comment: comment})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	refund := agent.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":5000,"currency":"CNY","reason":"Goodwill"}}`)
	p := approve(alice, refund.ID, "Loyal customer")
	if exec := agent.execute(refund.ID, p.Token.Compact); exec["status"] != "succeeded" {
		t.Fatalf("execute: %v", exec)
	}
	declined := other.propose(`{"tool":"refund_order","arguments":{"order_id":"ord_1002","amount_minor":7000,"currency":"CNY","reason":"Late"}}`)
	if _, err := term.Protocol.Decline(ctx, writes.DeclineInput{Reviewer: alice, ProposalID: declined.ID,
		DigestSeen: mustDigest(t, term, alice, declined.ID), Reason: "Already compensated by coupon"}); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for i := range 22 { // enough for a second page of 20
		c := agent.propose(fmt.Sprintf(`{"tool":"send_customer_email","arguments":{"customer_id":"cus_00%d","template":"apology","subject":"Sorry %d","body":"b","send_at":null}}`, 1+i%3, i))
		approve(admin, c.ID, "")
		rest = append(rest, c.ID)
	}
	j.signIn(d.base, d.creds.Reviewer, d.creds.ReviewerPassword)
	card := func(id string) string { return fmt.Sprintf(`[data-testid=history-row][data-id="%s"] `, id) }
	for _, s := range screens {
		j.step("history by target at "+s.name, chromedp.EmulateViewport(s.width, s.height),
			chromedp.Navigate(d.base+"/history?target=ord_1001"),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=history-row]`)))
		if n := j.eval(`String(document.querySelectorAll('[data-testid=history-row]').length)`); n != "1" {
			t.Errorf("%s: %s cards for ord_1001, want 1", s.name, n)
		}
		if got := j.text(card(refund.ID) + `[data-testid=history-summary]`); got != "Refund ¥50.00 CNY to order ord_1001 · original payment method" {
			t.Errorf("%s: summary = %q", s.name, got)
		}
		if got := j.text(card(refund.ID) + `[data-testid=history-result]`); !strings.Contains(got, "Succeeded") || !strings.Contains(got, "refunded: ¥50.00 CNY") {
			t.Errorf("%s: result = %q", s.name, got)
		}
		if got := j.text(card(refund.ID) + `[data-testid=approvers]`); !strings.Contains(got, "alice (password)") {
			t.Errorf("%s: approvers = %q", s.name, got)
		}
		if got := j.text(card(refund.ID) + `[data-testid=approver-comment]`); !strings.Contains(got, "Loyal customer") {
			t.Errorf("%s: comment = %q", s.name, got)
		}
		j.shot("history-" + s.name + ".png")

		// Agent, reviewer, tool, status and date.
		count := func(query string) string {
			j.step("history "+query, chromedp.Navigate(d.base+"/history?"+query), chromedp.WaitVisible(chromedp.CSS(`h1`)))
			return j.eval(`String(document.querySelectorAll('[data-testid=history-row]').length)`)
		}
		if n := count("agent=billing-bot"); n != "1" {
			t.Errorf("%s: %s cards of billing-bot, want 1", s.name, n)
		}
		if got := j.text(card(declined.ID) + `[data-testid=history-result]`); !strings.Contains(got, "Already compensated by coupon") {
			t.Errorf("%s: rejection reason = %q", s.name, got)
		}
		if n := count("reviewer=alice"); n != "2" {
			t.Errorf("%s: %s cards decided by alice, want 2", s.name, n)
		}
		if n := count("reviewer=alice&tool=refund_order&status=declined"); n != "1" {
			t.Errorf("%s: %s declined refunds by alice, want 1", s.name, n)
		}
		yesterday := time.Now().UTC().AddDate(0, 0, -1).Format("2006-01-02")
		if n := count("before=" + yesterday); n != "0" {
			t.Errorf("%s: %s cards proposed before %s, want 0", s.name, n, yesterday)
		}
		// Keyset pages: 24 settled proposals, 20 per page, each once.
		if n := count("tool=send_customer_email"); n != "20" {
			t.Errorf("%s: first page has %s cards, want 20", s.name, n)
		}
		j.step("older page", chromedp.Click(chromedp.CSS(`[data-testid=older]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=newest]`)))
		if got := j.eval(`[...document.querySelectorAll('[data-testid=history-row]')].map(e => e.dataset.id).join(' ')`); got != strings.Join([]string{rest[1], rest[0]}, " ") {
			t.Errorf("%s: second page = %q, want the two oldest e-mails", s.name, got)
		}

		// The proposal's page tells its whole story.
		j.step("timeline", chromedp.Navigate(d.base+"/proposals/"+refund.ID), chromedp.WaitVisible(chromedp.CSS(`[data-testid=timeline]`)))
		steps := j.eval(`[...document.querySelectorAll('[data-testid=timeline-step] span')].map(e => e.textContent).join(' | ')`)
		for _, want := range []string{"Proposed by demo-agent", "Approved by alice (password)", "Confirmed: a one-time token was issued",
			"Token redeemed by demo-agent: execution started", "The business system answered: Succeeded"} {
			if !strings.Contains(steps, want) {
				t.Errorf("%s: timeline %q lacks %q", s.name, steps, want)
			}
		}
		j.shot("proposal-timeline-" + s.name + ".png")
	}
}
