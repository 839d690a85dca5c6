package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models/writes"
)

// An agent with tenant-wide read lists the tenant's proposals over HTTP,
// not only its own (it has none here), and ?agent= narrows the list to one
// agent; an agent without it lists only its own, whatever ?agent= says.
func TestReadAllAgentListsTheTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := app.Open(ctx, app.Config{DB: "sqlite://" + t.TempDir() + "/c.db", Logger: slog.New(slog.DiscardHandler),
		PasswordHash: cheapPasswordHash})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Server)
	t.Cleanup(func() { srv.Close(); a.Close() })
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proposer, err := a.Protocol.AuthenticateAgent(ctx, creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := a.Protocol.Propose(ctx, proposer, writes.ProposeInput{Tool: "refund_order",
		Arguments: json.RawMessage(`{"order_id":"ord_1001","amount_minor":100,"currency":"CNY","reason":"damaged"}`)})
	if err != nil {
		t.Fatal(err)
	}
	newAgent := func(name string, readAll bool) string {
		key, hash, err := secret.NewAPIKey()
		if err != nil {
			t.Fatal(err)
		}
		ag, err := a.Store.CreateAgent(ctx, proposer.TenantID, name, "", hash)
		if err != nil {
			t.Fatal(err)
		}
		if readAll {
			if _, err := a.Store.SetAgentReadAll(ctx, proposer.TenantID, ag.ID, true); err != nil {
				t.Fatal(err)
			}
		}
		return key
	}
	reader, other := newAgent("reader", true), newAgent("other", false)
	list := func(key, query string) []string {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/api/v1/proposals"+query, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("list %s: %d %v", query, res.StatusCode, err)
		}
		var ids []string
		for _, it := range out.Items {
			ids = append(ids, it.ID)
		}
		return ids
	}
	for _, q := range []string{"", "?status=awaiting_confirmation", "?agent=" + proposer.ID} {
		if got := list(reader, q); len(got) != 1 || got[0] != p.ID {
			t.Errorf("read-all agent, list%s = %v, want [%s]", q, got, p.ID)
		}
	}
	if got := list(reader, "?agent=agt_nobody"); len(got) != 0 {
		t.Errorf("read-all agent, another agent's filter = %v", got)
	}
	for _, q := range []string{"", "?agent=" + proposer.ID} {
		if got := list(other, q); len(got) != 0 {
			t.Errorf("agent without read-all, list%s = %v, want nothing", q, got)
		}
	}
}
