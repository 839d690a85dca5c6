package api_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
)

func TestExecute(t *testing.T) {
	completed := testNow.Add(time.Second)
	for _, tc := range []struct {
		status models.Status
		want   int
	}{
		{models.StatusSucceeded, http.StatusOK},
		{models.StatusFailedTerminal, http.StatusOK},
		{models.StatusExecuting, http.StatusAccepted},
		{models.StatusUnknown, http.StatusAccepted},
		{models.StatusFailedRetryable, http.StatusAccepted},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			f := newFake()
			var gotAgent models.Agent
			var gotProposal, gotToken string
			f.executeFn = func(a models.Agent, proposalID, token string) (*models.Execution, error) {
				gotAgent, gotProposal, gotToken = a, proposalID, token
				e := &models.Execution{
					ID: "exe_1", TenantID: "t1", ProposalID: proposalID, RequestKey: "rk-1", Operation: "refund_order",
					ArgsDigest: "sha256:ab", Status: tc.status, Attempts: 1, CreatedAt: testNow, UpdatedAt: testNow,
				}
				if tc.status == models.StatusSucceeded {
					e.ProviderRef, e.Result, e.CompletedAt = "re_42", json.RawMessage(`{"ok":true}`), &completed
				}
				if tc.status == models.StatusFailedTerminal {
					e.ErrorCode, e.ErrorMessage, e.CompletedAt = "insufficient_funds", "balance too low", &completed
				}
				return e, nil
			}
			srv := newServer(t, f)
			r := do(t, srv, request{method: "POST", path: "/api/v1/executions", key: keyA,
				contentType: "application/json", body: `{"proposal_id":"prop_1","token":"tok.en.sig"}`})

			if got := r.StatusCode; got != tc.want {
				t.Fatalf("status = %d, want %d (%s)", got, tc.want, r.body)
			}
			if gotAgent.ID != agentA.ID || gotProposal != "prop_1" || gotToken != "tok.en.sig" {
				t.Errorf("service got (%s, %s, %s)", gotAgent.ID, gotProposal, gotToken)
			}
			m := decodeMap(t, r)
			for _, k := range []string{"execution_id", "proposal_id", "request_key", "operation", "status", "args_digest",
				"attempts", "provider_ref", "result", "error", "created_at", "updated_at", "completed_at", "receipt"} {
				if _, ok := m[k]; !ok {
					t.Errorf("execution JSON lacks %q: %s", k, r.body)
				}
			}
			if got, want := m["status"], string(tc.status); got != want {
				t.Errorf("status = %v, want %v", got, want)
			}
			receipt, _ := m["receipt"].(map[string]any)
			if got, want := receipt["status"], string(tc.status); got != want {
				t.Errorf("receipt.status = %v, want %v", got, want)
			}
			switch tc.status {
			case models.StatusSucceeded:
				if got, want := string(mustJSON(t, m["result"])), `{"ok":true}`; got != want {
					t.Errorf("result = %s, want %s", got, want)
				}
				if got, want := receipt["provider_ref"], "re_42"; got != want {
					t.Errorf("receipt.provider_ref = %v, want %v", got, want)
				}
				if got, want := m["completed_at"], "2026-03-14T09:26:54.589Z"; got != want {
					t.Errorf("completed_at = %v, want %v", got, want)
				}
			case models.StatusFailedTerminal:
				if got, want := string(mustJSON(t, m["error"])), `{"code":"insufficient_funds","message":"balance too low"}`; got != want {
					t.Errorf("error = %s, want %s", got, want)
				}
			default:
				if m["result"] != nil || m["error"] != nil || m["completed_at"] != nil {
					t.Errorf("open execution has result/error/completed_at: %s", r.body)
				}
			}
		})
	}
}

func TestExecuteErrors(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	post := func(body string) response {
		return do(t, srv, request{method: "POST", path: "/api/v1/executions", key: keyA,
			contentType: "application/json", body: body})
	}
	for _, tc := range []struct{ name, body, mention string }{
		{"unknown field", `{"proposal_id":"p","token":"t","force":true}`, `unknown field "force"`},
		{"missing token", `{"proposal_id":"p"}`, `"token" is required`},
		{"missing proposal", `{"token":"t"}`, `"proposal_id" is required`},
		{"token not a string", `{"proposal_id":"p","token":{}}`, `"token" must be a string`},
		{"trailing", `{"proposal_id":"p","token":"t"}]`, "after the JSON object"},
		{"token twice, differing by case", `{"proposal_id":"p","token":"t","Token":"u"}`, `field "Token" must be spelled "token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, post(tc.body), http.StatusBadRequest, models.EInvalidRequest, tc.mention)
		})
	}
	r := do(t, srv, request{method: "POST", path: "/api/v1/executions", key: keyA,
		contentType: "text/plain", body: `{"proposal_id":"p","token":"t"}`})
	wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, "content-type")
	if got := f.callCount("Execute"); got != 0 {
		t.Errorf("bad bodies reached Execute %d times", got)
	}

	t.Run("already_consumed carries the original execution", func(t *testing.T) {
		f.executeFn = func(models.Agent, string, string) (*models.Execution, error) {
			return nil, &models.Error{Code: models.EAlreadyConsumed, Message: "token was redeemed before",
				Details: map[string]any{"execution_id": "exe_1", "execution_status": "succeeded"}}
		}
		e := wantError(t, post(`{"proposal_id":"p","token":"t"}`), http.StatusConflict, models.EAlreadyConsumed)
		if got, want := e.Error.Details["execution_id"], "exe_1"; got != want {
			t.Errorf("details.execution_id = %v, want %v", got, want)
		}
		if got, want := e.Error.Details["execution_status"], "succeeded"; got != want {
			t.Errorf("details.execution_status = %v, want %v", got, want)
		}
	})
	t.Run("internal error text stays inside", func(t *testing.T) {
		f.executeFn = func(models.Agent, string, string) (*models.Execution, error) {
			return nil, errors.New("pq: password authentication failed for user countersign")
		}
		r := post(`{"proposal_id":"p","token":"t"}`)
		e := wantError(t, r, http.StatusInternalServerError, models.EInternal)
		if got, want := e.Error.Message, "internal error"; got != want {
			t.Errorf("message = %q, want %q", got, want)
		}
		if contains(r.body, "password") {
			t.Errorf("internal error text leaked: %s", r.body)
		}
	})
}

func TestJWKS(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	r := do(t, srv, request{method: "GET", path: "/.well-known/jwks.json"}) // no key: public
	if got, want := r.StatusCode, http.StatusOK; got != want {
		t.Fatalf("status = %d, want %d (%s)", got, want, r.body)
	}
	if got, want := r.Header.Get("Content-Type"), "application/jwk-set+json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	if got, want := r.Header.Get("Cache-Control"), "public, max-age=300"; got != want {
		t.Errorf("Cache-Control = %q, want %q", got, want)
	}
	if got, want := string(r.body), string(f.jwks); got != want {
		t.Errorf("body = %s, want %s", got, want)
	}
}

func TestHealthz(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	r := do(t, srv, request{method: "GET", path: "/healthz"})
	if got, want := r.StatusCode, http.StatusOK; got != want {
		t.Fatalf("status = %d, want %d", got, want)
	}
	if got, want := string(r.body), `{"status":"ok"}`+"\n"; got != want {
		t.Errorf("body = %q, want %q", got, want)
	}

	f.readyErr = errors.New("dial tcp 10.0.0.7:5432: connection refused")
	r = do(t, srv, request{method: "GET", path: "/healthz"})
	wantError(t, r, http.StatusServiceUnavailable, models.EUnavailable)
	if contains(r.body, "10.0.0.7") {
		t.Errorf("readiness cause leaked: %s", r.body)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
