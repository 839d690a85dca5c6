package apitest_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/apitest"
	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models/writes"
)

// demoServer serves the whole application over a fresh SQLite database
// with the demo tenant, and returns its URL, the demo agent's key and an
// audit reader's key.
func demoServer(t *testing.T) (url, agentKey, auditKey string) {
	t.Helper()
	ctx := context.Background()
	a, err := app.Open(ctx, app.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "api.db"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordHash: secret.PasswordParams{MemoryKiB: 64, Time: 1, Threads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Server)
	t.Cleanup(func() {
		srv.Close()
		a.Close()
	})
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tenant, err := a.Store.TenantByName(ctx, creds.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	auditKey = writes.AuditKeyPrefix + "apitest-reader-key-0123456789abcdef"
	if _, err := a.Store.CreateAuditReader(ctx, tenant.ID, "apitest", secret.HashAPIKey(auditKey)); err != nil {
		t.Fatal(err)
	}
	return srv.URL, creds.AgentKey, auditKey
}

// call sends one request through apitest.Client, which holds the answer
// (and, where the answer says what the server made of it, the request) to
// the document; it returns the status.
func call(t *testing.T, method, url, key, body string) int {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := apitest.Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// Answers the server gives and the document once did not describe: each
// request fails its test through apitest's checks when the document
// disagrees with the server again.
func TestDocumentDescribesTheServer(t *testing.T) {
	base, agent, audit := demoServer(t)
	for _, c := range []struct {
		name, method, path, key, body string
		want                          int
	}{
		{"unknown include of the webhook list", "GET", "/api/v1/webhooks?include=bogus", agent, "", http.StatusBadRequest},
		{"audit page over the largest", "GET", "/api/v1/audit?limit=1001", audit, "", http.StatusBadRequest},
		{"audit page of the largest", "GET", "/api/v1/audit?limit=1000", audit, "", http.StatusOK},
		{"unknown proposal state", "GET", "/api/v1/proposals?status=approved", agent, "", http.StatusBadRequest},
		{"empty request key", "POST", "/api/v1/proposals", agent, proposal(`"request_key":""`, 101), http.StatusCreated},
		{"null request key", "POST", "/api/v1/proposals", agent, proposal(`"request_key":null`, 102), http.StatusCreated},
		{"null context", "POST", "/api/v1/proposals", agent, proposal(`"context":null`, 103), http.StatusCreated},
		{"mandate with an empty request key and null context", "POST", "/api/v1/mandates", agent,
			mandate(`"request_key":"","context":null`), http.StatusCreated},
		{"mandate with a null request key", "POST", "/api/v1/mandates", agent, mandate(`"request_key":null`), http.StatusCreated},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := call(t, c.method, base+c.path, c.key, c.body); got != c.want {
				t.Errorf("%s %s: %d, want %d", c.method, c.path, got, c.want)
			}
		})
	}
}

// OPTIONS is answered by the router on every route, 204 with Allow and
// without a key; the document says so for every path it lists.
func TestOptionsIsDocumented(t *testing.T) {
	base, _, _ := demoServer(t)
	doc := apitest.Document(t)
	for path := range doc.Paths.Map() {
		concrete := strings.ReplaceAll(path, "{id}", "x_1")
		if got := call(t, http.MethodOptions, base+concrete, "", ""); got != http.StatusNoContent {
			t.Errorf("OPTIONS %s: %d, want 204", concrete, got)
		}
	}
}

func proposal(extra string, amount int) string {
	return `{"tool":"refund_order","arguments":{"order_id":"ord_1001","amount_minor":` + strconv.Itoa(amount) +
		`,"currency":"CNY","reason":"apitest"},` + extra + `}`
}

func mandate(extra string) string {
	terms, _ := json.Marshal(map[string]any{"tool": "refund_order", "tiers": []string{"low"}, "resource_pattern": "ord_1[0-9]{3}",
		"money":    map[string]any{"field": "amount_minor", "currency": "CNY", "per_call_cap": 1000, "budget": 5000},
		"max_uses": 10, "expires_at": time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339), "reason": "sale refunds"})
	return `{"terms":` + string(terms) + `,` + extra + `}`
}
