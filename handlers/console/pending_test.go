package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/countersign/countersign/models"
)

func TestPendingListShowsProposals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	older := e.refund("ord_1001", 19900)
	e.clock.Advance(time.Second)
	newer := e.refund("ord_2002", 30000) // high tier: security key

	r := e.get("/", "alice")
	wantStatus(t, r, http.StatusOK)
	if got := r.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	rows := all(r.doc, "pending-row")
	if got, want := len(rows), 2; got != want {
		t.Fatalf("%d rows, want %d", got, want)
	}
	// Least time left first: the newer one is of the high tier, 120 s.
	if got, want := attr(one(t, rows[0], "tool-title"), "href"), "/proposals/"+newer.ID; got != want {
		t.Errorf("first row links to %q, want %q (least time left first)", got, want)
	}
	row := rows[1]
	wantContains(t, "title", text(one(t, row, "tool-title")), "Refund an order")
	if got, want := attr(one(t, row, "tool-title"), "href"), "/proposals/"+older.ID; got != want {
		t.Errorf("row links to %q, want %q", got, want)
	}
	wantContains(t, "target", text(one(t, row, "target")), "Order …1001")
	wantContains(t, "summary", text(one(t, row, "summary")), "Amount", "¥199.00")
	wantContains(t, "requester", text(one(t, row, "requester")), "demo-agent")
	wantContains(t, "tier", text(one(t, row, "tier")), "low", "click")
	wantContains(t, "tier", text(one(t, rows[0], "tier")), "high", "security key")
	exp := one(t, row, "expires")
	wantContains(t, "time left", text(exp), "4 min 59 s left", "until 06:25:00 UTC") // proposed 1 s ago
	if got, want := attr(exp, "data-expires-at"), "2026-09-01T06:25:00Z"; got != want {
		t.Errorf("data-expires-at = %q, want %q", got, want)
	}
	if got := attr(exp, "data-server-now"); !strings.HasPrefix(got, "2026-09-01T06:20:01") {
		t.Errorf("data-server-now = %q, want the server clock 06:20:01", got)
	}

	// The list is live: SSE with polling as the fallback, re-fetching the
	// partial with the same filters.
	live := findByID(r.doc, "pending-rows")
	if live == nil {
		t.Fatal("no #pending-rows")
	}
	for k, want := range map[string]string{"hx-ext": "sse", "sse-connect": "/events", "hx-get": "/pending/rows", "hx-trigger": "sse:proposals, every 10s"} {
		if got := attr(live, k); got != want {
			t.Errorf("#pending-rows %s = %q, want %q", k, got, want)
		}
	}
	if len(all(r.doc, "empty-state")) != 0 {
		t.Error("empty state shown with proposals pending")
	}
}

func findByID(n *html.Node, id string) *html.Node {
	if n.Type == html.ElementNode && attr(n, "id") == id {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := findByID(c, id); f != nil {
			return f
		}
	}
	return nil
}

func TestPendingListOmitsDecided(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.confirm(e.refund("ord_1001", 19900), e.alice)
	waiting := e.refund("ord_1002", 19900)
	rows := all(e.get("/", "bob").doc, "pending-row")
	if len(rows) != 1 || attr(one(t, rows[0], "tool-title"), "href") != "/proposals/"+waiting.ID {
		t.Fatalf("got %d rows, want only the waiting proposal", len(rows))
	}
}

func TestPendingRowsPartial(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.refund("ord_1001", 19900)
	r := e.get("/pending/rows", "alice")
	wantStatus(t, r, http.StatusOK)
	body := r.Body.String()
	if strings.Contains(body, "<html") || strings.Contains(body, "<header") {
		t.Errorf("partial contains the page frame:\n%s", body)
	}
	if got := len(all(r.doc, "pending-row")); got != 1 {
		t.Errorf("%d rows in the partial, want 1", got)
	}
}

func TestPendingFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.refund("ord_1001", 19900)
	e.refund("ord_2002", 30000)
	email, _ := json.Marshal(map[string]any{"customer_id": "cus_001", "template": "apology", "subject": "Sorry",
		"body": "We are sorry.", "send_at": nil})
	e.propose("send_customer_email", email, "")

	tests := []struct {
		query string
		want  int
		title string
	}{
		{"", 3, ""},
		{"?tool=refund_order", 2, "Refund an order"},
		{"?tool=send_customer_email", 1, "Send an email to a customer"},
		{"?tier=high", 1, "Refund an order"},
		{"?tool=refund_order&tier=low", 1, "Refund an order"},
		{"?tool=send_customer_email&tier=high", 0, ""},
	}
	for _, tt := range tests {
		for _, path := range []string{"/", "/pending/rows"} {
			r := e.get(path+tt.query, "alice")
			wantStatus(t, r, http.StatusOK)
			rows := all(r.doc, "pending-row")
			if len(rows) != tt.want {
				t.Errorf("%s%s: %d rows, want %d", path, tt.query, len(rows), tt.want)
				continue
			}
			for _, row := range rows {
				if tt.title != "" {
					wantContains(t, path+tt.query+" title", text(one(t, row, "tool-title")), tt.title)
				}
			}
			if tt.want == 0 {
				wantContains(t, "filtered empty state", text(one(t, r.doc, "empty-state")), "match these filters")
			}
		}
	}
	// The form keeps the filter, and the live partial carries it.
	r := e.get("/?tool=refund_order&tier=high", "alice")
	if got, want := attr(findByID(r.doc, "pending-rows"), "hx-get"), "/pending/rows?tier=high&tool=refund_order"; got != want {
		t.Errorf("hx-get = %q, want %q", got, want)
	}
	// The tier filter offers exactly the registry's tiers.
	var tiers, selected []string
	for _, o := range options(findByID(r.doc, "filter-tier")) {
		tiers = append(tiers, attr(o, "value"))
		if hasAttr(o, "selected") {
			selected = append(selected, attr(o, "value"))
		}
	}
	if got, want := strings.Join(tiers, ","), ",high,low,quorum,standard"; got != want {
		t.Errorf("tier options = %q, want %q", got, want)
	}
	if got := strings.Join(selected, ","); got != "high" {
		t.Errorf("selected tier = %q, want high", got)
	}
}

func TestPendingPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := range 30 {
		p := e.refund("ord_10"+twoDigits(1+i%20), 100+int64(i))
		ids = append(ids, p.ID)
		e.clock.Advance(time.Millisecond)
	}
	// By time left: all of one tier, so in the order they were made.
	byTime := all(e.get("/?tool=refund_order", "alice").doc, "pending-row")
	for i, row := range byTime {
		if got := strings.TrimPrefix(attr(one(t, row, "tool-title"), "href"), "/proposals/"); got != ids[i] {
			t.Fatalf("by time left, row %d is %s, want %s", i, got, ids[i])
		}
	}
	first := e.get("/?tool=refund_order&sort=newest", "alice")
	rows := all(first.doc, "pending-row")
	if got, want := len(rows), 25; got != want {
		t.Fatalf("first page has %d rows, want %d", got, want)
	}
	older := one(t, first.doc, "older")
	href := attr(older, "href")
	if !strings.Contains(href, "cursor=") || !strings.Contains(href, "tool=refund_order") || !strings.Contains(href, "sort=newest") {
		t.Fatalf("older link %q lacks the cursor or the filter", href)
	}
	if len(all(first.doc, "newest")) != 0 {
		t.Error("the first page links to the newest page")
	}
	second := e.get(href, "alice")
	wantStatus(t, second, http.StatusOK)
	rows2 := all(second.doc, "pending-row")
	if got, want := len(rows2), 5; got != want {
		t.Fatalf("second page has %d rows, want %d", got, want)
	}
	if len(all(second.doc, "older")) != 0 {
		t.Error("the last page links to an older page")
	}
	one(t, second.doc, "newest")
	// Together: every proposal once, newest first.
	var got []string
	for _, row := range append(rows, rows2...) {
		got = append(got, strings.TrimPrefix(attr(one(t, row, "tool-title"), "href"), "/proposals/"))
	}
	for i, id := range got {
		if want := ids[len(ids)-1-i]; id != want {
			t.Fatalf("row %d is %s, want %s", i, id, want)
		}
	}
	// A cursor that the server did not issue is a bad request.
	wantStatus(t, e.get("/?cursor=bogus!", "alice"), http.StatusBadRequest)
}

func twoDigits(n int) string {
	return string([]byte{byte('0' + n/10), byte('0' + n%10)})
}

func TestPendingEmptyState(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.get("/", "alice")
	wantStatus(t, r, http.StatusOK)
	empty := text(one(t, r.doc, "empty-state"))
	wantContains(t, "empty state", empty, "POST /api/v1/proposals", "curl -X POST http://example.com/api/v1/proposals",
		"Authorization: Bearer", "refund_order")
	if got := len(all(r.doc, "pending-row")); got != 0 {
		t.Errorf("%d rows in an empty list", got)
	}
}

// TestEvents reads the event stream over a real connection: creating a
// proposal sends a "proposals" event.
func TestEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.echo)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	req.Header.Set("X-Test-User", "alice")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got, want := res.Header.Get("Content-Type"), "text/event-stream"; got != want {
		t.Fatalf("Content-Type = %q, want %q", got, want)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended")
			}
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no line from the event stream within 5 s")
		}
		return ""
	}
	if got := next(); got != ": connected" {
		t.Fatalf("first line %q, want the connected comment", got)
	}
	e.refund("ord_1001", 19900)
	for {
		l := next()
		if l == "event: proposals" {
			if got := next(); !strings.HasPrefix(got, "data:") {
				t.Errorf("event without data: %q", got)
			}
			break
		}
	}
	cancel()
}

// wantDecisions checks how many decisions a proposal has.
func (e *env) wantDecisions(id string, want int) *models.Proposal {
	e.t.Helper()
	p := e.reload(id)
	if got := len(p.Decisions); got != want {
		e.t.Fatalf("%d decisions, want %d", got, want)
	}
	return p
}

// stream opens the event stream as user and returns its lines.
func (e *env) stream(ctx context.Context, srv *httptest.Server, user string) <-chan string {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	req.Header.Set("X-Test-User", user)
	res, err := srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer res.Body.Close()
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return lines
}

// TestEventsCarryOnlyTheReviewersTenant: a change in one tenant sends an
// event to that tenant's reviewers and nothing to another tenant's, whose
// stream shows only heartbeats meanwhile.
func TestEventsCarryOnlyTheReviewersTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pages.SetHeartbeat(30 * time.Millisecond)
	srv := httptest.NewServer(e.echo)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alice, olga := e.stream(ctx, srv, "alice"), e.stream(ctx, srv, "olga")
	next := func(lines <-chan string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended")
			}
			return l
		case <-ctx.Done():
			t.Fatal("no line from the event stream")
		}
		return ""
	}
	for _, lines := range []<-chan string{alice, olga} {
		if got := next(lines); got != ": connected" {
			t.Fatalf("first line %q, want the connected comment", got)
		}
	}
	e.refund("ord_1001", 19900)
	for next(alice) != "event: proposals" {
	}
	// Both streams were subscribed before the change; olga's would have
	// been woken at the same moment as alice's. Three heartbeats later it
	// still has sent no event.
	for beats := 0; beats < 3; {
		switch l := next(olga); {
		case strings.HasPrefix(l, "event:"):
			t.Fatalf("a reviewer of another tenant got %q", l)
		case l == ": heartbeat":
			beats++
		}
	}
}

// options lists the option elements under n.
func options(n *html.Node) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "option" {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}
