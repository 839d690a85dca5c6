package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
)

func TestGetProposalETag(t *testing.T) {
	f := newFake()
	f.add(sampleProposal("prop_1"))
	srv := newServer(t, f)
	get := func(inm string) response {
		h := http.Header{}
		if inm != "" {
			h.Set("If-None-Match", inm)
		}
		return do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1", key: keyA, header: h})
	}

	r := get("")
	if got, want := r.StatusCode, http.StatusOK; got != want {
		t.Fatalf("status = %d, want %d (%s)", got, want, r.body)
	}
	etag := r.Header.Get("ETag")
	if got, want := etag, `W/"prop_1-3"`; got != want {
		t.Errorf("ETag = %q, want %q", got, want)
	}
	if got, want := r.Header.Get("Cache-Control"), "no-store"; got != want {
		t.Errorf("Cache-Control = %q, want %q", got, want)
	}

	for _, inm := range []string{etag, `"prop_1-3"`, `W/"other", ` + etag, "*"} {
		r = get(inm)
		if got, want := r.StatusCode, http.StatusNotModified; got != want {
			t.Errorf("If-None-Match %s: status = %d, want %d", inm, got, want)
		}
		if len(r.body) != 0 {
			t.Errorf("If-None-Match %s: 304 with a body %q", inm, r.body)
		}
		if got := r.Header.Get("ETag"); got != etag {
			t.Errorf("If-None-Match %s: ETag = %q, want %q", inm, got, etag)
		}
	}

	f.update("prop_1", func(p *models.Proposal) { p.Status = models.StatusCancelled; p.Revision++ })
	r = get(etag)
	if got, want := r.StatusCode, http.StatusOK; got != want {
		t.Errorf("after a change: status = %d, want %d", got, want)
	}
	if got, want := r.Header.Get("ETag"), `W/"prop_1-4"`; got != want {
		t.Errorf("after a change: ETag = %q, want %q", got, want)
	}
	if got := f.callCount("Wait"); got != 0 {
		t.Errorf("Wait called %d times without ?wait", got)
	}
}

func TestGetProposalOtherTenantIsNotFound(t *testing.T) {
	f := newFake()
	f.add(sampleProposal("prop_1"))
	srv := newServer(t, f)
	for _, path := range []string{"/api/v1/proposals/prop_1", "/api/v1/proposals/prop_1?wait=1", "/api/v1/proposals/prop_missing"} {
		r := do(t, srv, request{method: "GET", path: path, key: keyC})
		wantError(t, r, http.StatusNotFound, models.ENotFound)
	}
}

func TestGetProposalLongPoll(t *testing.T) {
	for _, tc := range []struct {
		name   string
		query  string
		header http.Header
	}{
		{"If-None-Match", "?wait=10", http.Header{"If-None-Match": {`W/"prop_1-3"`}}},
		{"since", "?wait=10&since=3", nil},
	} {
		t.Run(tc.name+" returns as soon as the proposal changes", func(t *testing.T) {
			f := newFake()
			f.add(sampleProposal("prop_1"))
			srv := newServer(t, f)

			go func() {
				time.Sleep(200 * time.Millisecond)
				f.update("prop_1", func(p *models.Proposal) { confirm(p) })
			}()
			start := time.Now()
			r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1" + tc.query, key: keyA, header: tc.header})
			elapsed := time.Since(start)

			if got, want := r.StatusCode, http.StatusOK; got != want {
				t.Fatalf("status = %d, want %d (%s)", got, want, r.body)
			}
			if elapsed < 150*time.Millisecond || elapsed > 5*time.Second {
				t.Errorf("answered after %v, want right after the change (~200ms)", elapsed)
			}
			if got, want := r.Header.Get("ETag"), `W/"prop_1-4"`; got != want {
				t.Errorf("ETag = %q, want %q", got, want)
			}
			m := decodeMap(t, r)
			if got, want := m["status"], "confirmed"; got != want {
				t.Errorf("status = %v, want %v", got, want)
			}
			if got, want := m["confirmation_token"], "eyJhbGciOiJFZERTQSJ9.e30.sig"; got != want {
				t.Errorf("confirmation_token = %v, want %v", got, want)
			}
		})
		t.Run(tc.name+" answers 304 when the wait elapses", func(t *testing.T) {
			f := newFake()
			f.add(sampleProposal("prop_1"))
			srv := newServer(t, f)
			query := strings.Replace(tc.query, "wait=10", "wait=1", 1)

			start := time.Now()
			r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1" + query, key: keyA, header: tc.header})
			elapsed := time.Since(start)

			if got, want := r.StatusCode, http.StatusNotModified; got != want {
				t.Fatalf("status = %d, want %d (%s)", got, want, r.body)
			}
			if elapsed < 900*time.Millisecond || elapsed > 5*time.Second {
				t.Errorf("answered after %v, want after the 1s wait", elapsed)
			}
			if got, want := r.Header.Get("ETag"), `W/"prop_1-3"`; got != want {
				t.Errorf("ETag = %q, want %q", got, want)
			}
		})
	}

	t.Run("stale since returns at once", func(t *testing.T) {
		f := newFake()
		f.add(sampleProposal("prop_1"))
		srv := newServer(t, f)
		start := time.Now()
		r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1?wait=30&since=1", key: keyA})
		if got, want := r.StatusCode, http.StatusOK; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Errorf("answered after %v, want at once", elapsed)
		}
		if got := f.callCount("Wait"); got != 0 {
			t.Errorf("Wait called %d times for an already changed proposal", got)
		}
	})
	t.Run("wait without a known revision returns at once", func(t *testing.T) {
		f := newFake()
		f.add(sampleProposal("prop_1"))
		srv := newServer(t, f)
		r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1?wait=60", key: keyA})
		if got, want := r.StatusCode, http.StatusOK; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
		if got := f.callCount("Wait"); got != 0 {
			t.Errorf("Wait called %d times, want 0", got)
		}
	})
}

func TestGetProposalBadParameters(t *testing.T) {
	f := newFake()
	f.add(sampleProposal("prop_1"))
	srv := newServer(t, f)
	for _, q := range []string{"wait=-1", "wait=61", "wait=abc", "wait=1.5", "wait=1e1", "since=-1", "since=x"} {
		r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1?" + q, key: keyA})
		param, _, _ := strings.Cut(q, "=")
		wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, param)
	}
}

// TestOtherAgentsProposalsAreNotFound: without tenant-wide read, another
// agent's proposal is 404, as if it did not exist, and is never waited on.
func TestOtherAgentsProposalsAreNotFound(t *testing.T) {
	f := newFake()
	f.add(sampleProposal("prop_1"))
	srv := newServer(t, f)
	for _, path := range []string{"/api/v1/proposals/prop_1", "/api/v1/proposals/prop_1?wait=5&since=1"} {
		r := do(t, srv, request{method: "GET", path: path, key: keyD})
		wantError(t, r, http.StatusNotFound, models.ENotFound)
	}
	if got := f.callCount("Wait"); got != 0 {
		t.Errorf("Wait called %d times for a proposal the agent may not read", got)
	}
}

func TestConfirmationTokenVisibility(t *testing.T) {
	for _, tc := range []struct {
		name   string
		key    string
		change func(*models.Proposal)
		want   bool
	}{
		{"proposer while confirmed", keyA, confirm, true},
		{"other agent of the tenant, with tenant-wide read", keyB, confirm, false},
		{"proposer while awaiting", keyA, func(*models.Proposal) {}, false},
		{"proposer once executing", keyA, func(p *models.Proposal) {
			confirm(p)
			p.Status = models.StatusExecuting
			p.Token.Status = models.TokenConsumed
		}, false},
		{"proposer after revocation", keyA, func(p *models.Proposal) {
			confirm(p)
			p.Status = models.StatusRevoked
			p.Token.Status = models.TokenRevoked
		}, false},
		{"proposer, token past expiry", keyA, func(p *models.Proposal) { confirm(p); p.Token.ExpiresAt = testNow }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			p := sampleProposal("prop_1")
			tc.change(p)
			f.add(p)
			srv := newServer(t, f)

			r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1", key: tc.key})
			if r.StatusCode != http.StatusOK {
				t.Fatalf("status = %d (%s)", r.StatusCode, r.body)
			}
			m := decodeMap(t, r)
			_, shown := m["confirmation_token"]
			if got, want := shown, tc.want; got != want {
				t.Errorf("confirmation_token shown = %v, want %v (%s)", got, want, r.body)
			}
			if !tc.want && strings.Contains(string(r.body), "eyJhbGciOiJFZERTQSJ9") {
				t.Errorf("the token appears in the body: %s", r.body)
			}
		})
	}
}

func TestListProposals(t *testing.T) {
	f := newFake()
	var gotTenant string
	var gotQuery writes.ListQuery
	confirmed := sampleProposal("prop_2")
	confirm(confirmed)
	f.listFn = func(tenant string, q writes.ListQuery) (writes.Page, error) {
		gotTenant, gotQuery = tenant, q
		return writes.Page{Items: []*models.Proposal{confirmed, sampleProposal("prop_1")}, Next: "c2"}, nil
	}
	srv := newServer(t, f)

	r := do(t, srv, request{method: "GET", path: "/api/v1/proposals?status=confirmed,%20awaiting_confirmation&tool=refund_order&limit=2&cursor=c1", key: keyA})
	if got, want := r.StatusCode, http.StatusOK; got != want {
		t.Fatalf("status = %d, want %d (%s)", got, want, r.body)
	}
	if got, want := gotTenant, "t1"; got != want {
		t.Errorf("tenant = %q, want %q", got, want)
	}
	// Which agents' proposals an agent may list is the service's rule
	// (writes.Service.AgentList); the handler passes ?agent= on as it is.
	if gotQuery.AgentID != "" {
		t.Errorf("AgentID = %q without ?agent=", gotQuery.AgentID)
	}
	if got, want := len(gotQuery.Statuses), 2; got != want || gotQuery.Statuses[0] != models.StatusConfirmed || gotQuery.Statuses[1] != models.StatusAwaitingConfirmation {
		t.Errorf("Statuses = %v, want [confirmed awaiting_confirmation]", gotQuery.Statuses)
	}
	if gotQuery.Tool != "refund_order" || gotQuery.Limit != 2 || gotQuery.Cursor != "c1" {
		t.Errorf("query = %+v", gotQuery)
	}
	m := decodeMap(t, r)
	items, _ := m["items"].([]any)
	if got, want := len(items), 2; got != want {
		t.Fatalf("items = %d, want %d", got, want)
	}
	if got, want := items[0].(map[string]any)["confirmation_token"], "eyJhbGciOiJFZERTQSJ9.e30.sig"; got != want {
		t.Errorf("items[0].confirmation_token = %v, want %v", got, want)
	}
	if got, want := m["next_cursor"], "c2"; got != want {
		t.Errorf("next_cursor = %v, want %v", got, want)
	}

	f.listFn = nil
	r = do(t, srv, request{method: "GET", path: "/api/v1/proposals", key: keyA})
	if got, want := string(r.body), `{"items":[],"next_cursor":null}`+"\n"; got != want {
		t.Errorf("empty page = %q, want %q", got, want)
	}

	for _, q := range []string{"status=approved", "status=confirmed,nope", "limit=0", "limit=101", "limit=x"} {
		r := do(t, srv, request{method: "GET", path: "/api/v1/proposals?" + q, key: keyA})
		param, _, _ := strings.Cut(q, "=")
		wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, param)
	}
	f.listFn = func(_ string, q writes.ListQuery) (writes.Page, error) { gotQuery = q; return writes.Page{}, nil }
	do(t, srv, request{method: "GET", path: "/api/v1/proposals?agent=agt_b", key: keyA})
	if gotQuery.AgentID != "agt_b" {
		t.Errorf("AgentID = %q, want agt_b from ?agent=", gotQuery.AgentID)
	}
}

func TestCancelProposal(t *testing.T) {
	f := newFake()
	f.add(sampleProposal("prop_1"))
	srv := newServer(t, f)

	r := do(t, srv, request{method: "POST", path: "/api/v1/proposals/prop_1/cancel", key: keyA})
	if got, want := r.StatusCode, http.StatusOK; got != want {
		t.Fatalf("status = %d, want %d (%s)", got, want, r.body)
	}
	if got, want := decodeMap(t, r)["status"], "cancelled"; got != want {
		t.Errorf("status = %v, want %v", got, want)
	}
	if got, want := r.Header.Get("ETag"), `W/"prop_1-4"`; got != want {
		t.Errorf("ETag = %q, want %q", got, want)
	}

	r = do(t, srv, request{method: "POST", path: "/api/v1/proposals/prop_1/cancel", key: keyA})
	wantError(t, r, http.StatusConflict, models.EInvalidState)
	r = do(t, srv, request{method: "POST", path: "/api/v1/proposals/prop_1/cancel", key: keyC})
	wantError(t, r, http.StatusNotFound, models.ENotFound)
}
