package app_test

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestHeadWhereverGet: every route that answers GET answers HEAD, with the
// same status and headers and no body; a streaming page ends at its headers.
func TestHeadWhereverGet(t *testing.T) {
	t.Parallel()
	c := openConsole(t)
	gets, heads := map[string]bool{}, map[string]bool{}
	for _, r := range c.app.Server.Routes() {
		switch r.Method {
		case http.MethodGet:
			gets[r.Path] = true
		case http.MethodHead:
			heads[r.Path] = true
		}
	}
	if len(gets) < 10 {
		t.Fatalf("only %d GET routes: the console is not mounted", len(gets))
	}
	for path := range gets {
		if !heads[path] {
			t.Errorf("GET %s has no HEAD", path)
		}
	}

	p := c.propose("ord_1001", 100)
	b := c.alice()
	for _, path := range []string{"/", "/proposals/" + p.ID, "/history", "/settings/keys", "/healthz", "/.well-known/jwks.json"} {
		g, h := b.get(path), b.do("HEAD", path, nil)
		if g.status != http.StatusOK || h.status != g.status || h.body != "" ||
			h.header.Get("Content-Type") != g.header.Get("Content-Type") {
			t.Errorf("%s: GET %d %q, HEAD %d %q with %d body bytes", path, g.status, g.header.Get("Content-Type"),
				h.status, h.header.Get("Content-Type"), len(h.body))
		}
	}

	// The agent API, with the agent's key.
	for _, path := range []string{"/api/v1/proposals/" + p.ID, "/api/v1/proposals"} {
		req, _ := http.NewRequest("HEAD", c.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.creds.AgentKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("ETag") == "" && path != "/api/v1/proposals" {
			t.Errorf("HEAD %s: %d, ETag %q", path, res.StatusCode, res.Header.Get("ETag"))
		}
	}

	// The event stream answers HEAD with its headers and ends.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "HEAD", c.srv.URL+"/events", nil)
	res, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("HEAD /events: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("HEAD /events: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
}
