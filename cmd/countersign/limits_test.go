package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/pgtest"
)

// TestAgentLimits sets limits from the command line on a running server:
// the agent's limit beats its tenant's, which beats the server's default;
// a proposal over the limit is 429 rate_limited with Retry-After until the
// first open proposal expires.
func TestAgentLimits(t *testing.T) {
	t.Parallel()
	db := tempDB(t)
	srv, _, stop := startServer(t, nil, true, "--demo", "--addr", "127.0.0.1:0", "--db", db, "--agent-open-proposals", "5")
	defer stop()
	propose := func(order string) httpResult {
		return call(t, "POST", srv.url+"/api/v1/proposals", srv.agentKey, fmt.Sprintf(`{"tool":"refund_order",
			"arguments":{"order_id":%q,"amount_minor":100,"currency":"CNY","reason":"late"}}`, order), nil)
	}
	tenant := mustExec(t, nil, "", "tenant", "limits", "--tenant", "demo", "--db", db, "--open-proposals", "3")
	if !strings.Contains(tenant.stdout, "open proposals:        3") || !strings.Contains(tenant.stdout, "proposals per minute:  inherit") {
		t.Errorf("tenant limits printed:\n%s", tenant.stdout)
	}
	agent := mustExec(t, nil, "", "agent", "limits", "--tenant", "demo", "--agent", "demo-agent", "--db", db, "--open-proposals", "1")
	if !strings.Contains(agent.stdout, "agent demo-agent of tenant demo") || !strings.Contains(agent.stdout, "open proposals:        1") {
		t.Errorf("agent limits printed:\n%s", agent.stdout)
	}

	first := propose("ord_1001")
	if first.status != http.StatusCreated {
		t.Fatalf("first proposal: %d %s", first.status, first.body)
	}
	p := first.json(t)
	created, _ := time.Parse(time.RFC3339Nano, p["created_at"].(string))
	expires, _ := time.Parse(time.RFC3339Nano, p["expires_at"].(string))
	second := propose("ord_1002")
	if second.status != http.StatusTooManyRequests {
		t.Fatalf("second proposal over the agent's limit of 1: %d %s", second.status, second.body)
	}
	if code, _ := second.json(t)["error"].(map[string]any); code["code"] != "rate_limited" {
		t.Errorf("second proposal: %s", second.body)
	}
	// The server's clock runs: Retry-After is the time left until the first
	// proposal expires, rounded up, at most its whole window.
	retry, err := strconv.Atoi(second.header.Get("Retry-After"))
	window := int(expires.Sub(created).Seconds())
	if err != nil || retry < window-30 || retry > window {
		t.Errorf("Retry-After = %q, want about %d s", second.header.Get("Retry-After"), window)
	}

	// Back to the tenant's limit of 3.
	mustExec(t, nil, "", "agent", "limits", "--tenant", "demo", "--agent", "demo-agent", "--db", db, "--open-proposals", "inherit")
	for i, want := range []int{http.StatusCreated, http.StatusCreated, http.StatusTooManyRequests} {
		if r := propose(fmt.Sprintf("ord_100%d", i+3)); r.status != want {
			t.Fatalf("proposal %d under the tenant's limit of 3: %d %s", i+2, r.status, r.body)
		}
	}

	r := invoke(t, nil, "", "agent", "limits", "--tenant", "demo", "--agent", "demo-agent", "--db", db, "--open-proposals", "-1")
	if r.err == nil || !strings.Contains(r.err.Error(), "0 (no limit) or more") {
		t.Errorf("a negative limit: %v", r.err)
	}
	r = invoke(t, nil, "", "agent", "limits", "--tenant", "demo", "--agent", "nobody", "--db", db)
	if r.err == nil {
		t.Error("limits of an unknown agent: no error")
	}
}

// TestLongPollSeesOtherProcessesOnPostgres: a long-poll held by a server is
// answered with the decision made by another process (the command line)
// through the shared PostgreSQL database. Without the change notification
// it would run to its end and answer 304.
func TestLongPollSeesOtherProcessesOnPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.DSN(t)
	a, _, stop := startServer(t, nil, true, "--demo", "--addr", "127.0.0.1:0", "--db", db)
	defer stop()
	r := call(t, "POST", a.url+"/api/v1/proposals", a.agentKey,
		`{"tool":"refund_order","arguments":{"order_id":"ord_1007","amount_minor":5000,"currency":"CNY","reason":"late"}}`, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("propose: status %d: %s", r.status, r.body)
	}
	id, _ := r.json(t)["id"].(string)
	polled := make(chan httpResult, 1)
	go func() {
		r, err := send(t, "GET", a.url+"/api/v1/proposals/"+id+"?wait=60&since=1", a.agentKey, "", nil)
		if err != nil {
			t.Error(err)
		}
		polled <- r
	}()
	time.Sleep(200 * time.Millisecond) // let the long-poll start waiting
	mustExec(t, nil, a.reviewerPassword+"\n", "review", "approve", id, "--tenant", "demo", "--user", "alice", "--db", db)
	poll := <-polled
	if poll.status != http.StatusOK {
		t.Fatalf("long-poll: status %d, want 200 with the decision: %s", poll.status, poll.body)
	}
	if got := poll.json(t)["status"]; got != "confirmed" {
		t.Errorf("long-poll status = %v, want confirmed", got)
	}
}
