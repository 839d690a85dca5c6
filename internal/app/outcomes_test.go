package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/adaptertest"
	"github.com/countersign/countersign/models/auth"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// The whole server, its reconciler running every 50ms on the real clock,
// in front of a business system that applies the write and answers after
// three seconds, with the tool's timeout at one second: the execute answer
// is 202 with the execution (unknown), the write is sent once while the
// attempt is in flight, and the reconciler later learns the outcome by
// asking.
func TestExecuteAgainstASlowBusinessSystemOverHTTP(t *testing.T) {
	t.Parallel()
	secret := "0123456789abcdef0123456789abcdef"
	biz := adaptertest.New([]byte(secret))
	biz.AddResource("ord_1001", "Order 1001", 19900)
	bizSrv := httptest.NewServer(biz)
	t.Cleanup(bizSrv.Close)
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools.yaml")
	yaml := strings.Replace(string(registry.DemoYAML()), "adapter: {kind: demo_ledger}",
		"adapter: {kind: http, base_url: "+bizSrv.URL+", secret_env: BIZ_SECRET, timeout: 1s}", 1)
	if err := os.WriteFile(tools, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.Open(ctx, app.Config{DB: "sqlite://" + filepath.Join(dir, "c.db"), ToolsFile: tools, PasswordHash: cheapPasswordHash,
		Addr: ln.Addr().String(), BaseURL: "http://" + ln.Addr().String(), LeaseMargin: 2 * time.Second,
		Getenv: func(k string) string {
			if k == "BIZ_SECRET" {
				return secret
			}
			return ""
		}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { a.Serve(ctx, ln, 50*time.Millisecond); close(served) }()
	t.Cleanup(func() { cancel(); <-served; a.Close() })
	creds, err := a.SeedDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	call := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+creds.AgentKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}

	status, prop := call(http.MethodPost, "/api/v1/proposals", map[string]any{"tool": "refund_order", "request_key": "slow-1",
		"arguments": map[string]any{"order_id": "ord_1001", "amount_minor": 500, "currency": "CNY", "reason": "late parcel"}})
	if status != http.StatusCreated {
		t.Fatalf("propose: %d %v", status, prop)
	}
	id := prop["id"].(string)
	tenant, err := a.Store.TenantByName(ctx, creds.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	alice, _, err := a.Store.UserCredentials(ctx, tenant.ID, creds.Reviewer)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Protocol.Confirm(ctx, writes.ConfirmInput{Reviewer: alice, ProposalID: id, DigestSeen: prop["args_digest"].(string), EffectSeen: prop["effect_digest"].(string), Evidence: auth.ApprovalEvidence(alice, nil)})
	if err != nil {
		t.Fatal(err)
	}

	biz.SetExecuteDelay(3 * time.Second)
	started := time.Now()
	status, ex := call(http.MethodPost, "/api/v1/executions", map[string]any{"proposal_id": id, "token": p.Token.Compact})
	if status != http.StatusAccepted || ex["status"] != string(models.StatusUnknown) {
		t.Fatalf("execute: %d %v, want 202 with the execution unknown", status, ex)
	}
	if elapsed := time.Since(started); elapsed > 2500*time.Millisecond {
		t.Fatalf("execute answered after %s: it waited for the business system past the tool's timeout", elapsed)
	}
	key, _ := ex["downstream_key"].(string)
	if key == "" {
		t.Fatalf("the execution names no downstream key: %v", ex)
	}
	// The first request is still in flight at the business system; the
	// reconciler (every 50ms) has not sent another.
	if got := biz.ExecuteCalls(key); got != 1 {
		t.Fatalf("execute calls = %d while the first is in flight, want 1", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := a.Protocol.Get(ctx, tenant.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == models.StatusSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s after 30s", got.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if w, calls := biz.Writes(key), biz.ExecuteCalls(key); w != 1 || calls != 1 {
		t.Fatalf("writes=%d execute calls=%d, want 1 and 1 (the reconciler only asked)", w, calls)
	}
}
