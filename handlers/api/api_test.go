package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/web"
)

// apiError is the error envelope as a client decodes it.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Fields  []struct {
			Pointer string `json:"pointer"`
			Message string `json:"message"`
		} `json:"fields"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

func decodeError(t *testing.T, r response) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	return e
}

func decodeMap(t *testing.T, r response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

// wantError checks status, code and that the message mentions each of
// mention (case-insensitive).
func wantError(t *testing.T, r response, status int, code models.Code, mention ...string) apiError {
	t.Helper()
	if got, want := r.StatusCode, status; got != want {
		t.Errorf("status = %d, want %d (body %s)", got, want, r.body)
	}
	e := decodeError(t, r)
	if got, want := e.Error.Code, string(code); got != want {
		t.Errorf("error code = %q, want %q (body %s)", got, want, r.body)
	}
	for _, m := range mention {
		if !strings.Contains(strings.ToLower(e.Error.Message), strings.ToLower(m)) {
			t.Errorf("error message %q does not mention %q", e.Error.Message, m)
		}
	}
	return e
}

// sampleProposal is a single-resource proposal of agent A awaiting
// confirmation.
func sampleProposal(id string) *models.Proposal {
	return &models.Proposal{
		ID:            id,
		TenantID:      "t1",
		AgentID:       agentA.ID,
		AgentName:     agentA.Name,
		Tool:          "refund_order",
		Arguments:     json.RawMessage(`{"amount_minor":1250,"currency":"EUR","order_id":"ord_1"}`),
		ArgsDigest:    "sha256:" + strings.Repeat("ab", 32),
		Preview:       []models.PreviewField{{Name: "amount_minor", Label: "Amount", Value: json.RawMessage(`1250`), Display: "€12.50"}},
		Resource:      "ord_1",
		ResourceLabel: "Order #1 (Ada)",
		StateVersion:  "v7",
		Tier:          models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: 15 * time.Minute},
		PolicyVersion: "2026-03-01",
		RequestKey:    "refund:t1:ord_1:" + id,
		Context:       "customer asked twice",
		Status:        models.StatusAwaitingConfirmation,
		Revision:      3,
		CreatedAt:     testNow.Add(-time.Minute),
		ExpiresAt:     testNow.Add(14 * time.Minute),
		UpdatedAt:     testNow.Add(-time.Minute),
	}
}

// confirm moves p to confirmed with an issued token, as the service would.
func confirm(p *models.Proposal) {
	p.Status = models.StatusConfirmed
	p.Revision++
	p.Decisions = append(p.Decisions, models.Decision{
		ID: "dec_1", ProposalID: p.ID, UserID: "usr_r", UserName: "Rita",
		Kind: models.DecisionApprove, Reason: "Carrier confirmed the loss", DigestSeen: p.ArgsDigest, AMR: []string{"pwd"}, CreatedAt: testNow,
	})
	p.Token = &models.Token{
		JTI: "jti_1", TenantID: p.TenantID, ProposalID: p.ID, AgentID: p.AgentID,
		Status: models.TokenIssued, Compact: "eyJhbGciOiJFZERTQSJ9.e30.sig",
		IssuedAt: testNow, ExpiresAt: testNow.Add(5 * time.Minute),
	}
}

const validProposal = `{"tool":"refund_order","arguments":{"order_id":"ord_1","amount_minor":1250,"currency":"EUR"},"request_key":"rk-1","context":"customer asked"}`

func TestAuthentication(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	routes := []struct{ method, path string }{
		{"POST", "/api/v1/proposals"},
		{"GET", "/api/v1/proposals"},
		{"GET", "/api/v1/proposals/prop_1"},
		{"POST", "/api/v1/proposals/prop_1/cancel"},
		{"POST", "/api/v1/executions"},
		{"GET", "/api/v1/tools"},
	}
	auths := []struct{ name, header string }{
		{"missing", ""},
		{"other scheme", "Basic a2V5LWE6"},
		{"empty bearer", "Bearer "},
		{"two tokens", "Bearer key-a extra"},
		{"unknown key", "Bearer not-a-key"},
	}
	for _, rt := range routes {
		for _, a := range auths {
			t.Run(rt.method+" "+rt.path+"/"+a.name, func(t *testing.T) {
				h := http.Header{}
				if a.header != "" {
					h.Set("Authorization", a.header)
				}
				r := do(t, srv, request{method: rt.method, path: rt.path, header: h,
					contentType: "application/json", body: validProposal})
				wantError(t, r, http.StatusUnauthorized, models.EUnauthenticated)
				if got := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", got)
				}
				if got, want := r.Header.Get("Cache-Control"), "no-store"; got != want {
					t.Errorf("Cache-Control = %q, want %q", got, want)
				}
			})
		}
	}
	if got := f.callCount("Propose") + f.callCount("Get") + f.callCount("List") + f.callCount("Cancel") + f.callCount("Execute"); got != 0 {
		t.Errorf("unauthenticated requests reached the service %d times", got)
	}

	t.Run("lower-case scheme is accepted", func(t *testing.T) {
		f.add(sampleProposal("prop_1"))
		r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1",
			header: http.Header{"Authorization": {"bearer " + keyA}}})
		if got, want := r.StatusCode, http.StatusOK; got != want {
			t.Errorf("status = %d, want %d (%s)", got, want, r.body)
		}
	})
}

func TestProposeContentType(t *testing.T) {
	f := newFake()
	f.proposeFn = func(a models.Agent, in writes.ProposeInput) (*models.Proposal, bool, error) {
		return sampleProposal("prop_1"), true, nil
	}
	srv := newServer(t, f)
	for _, tc := range []struct {
		contentType string
		want        int
	}{
		{"", http.StatusBadRequest},
		{"text/plain", http.StatusBadRequest},
		{"application/x-www-form-urlencoded", http.StatusBadRequest},
		{"application/jsonx", http.StatusBadRequest},
		{"application/json; charset=latin1", http.StatusBadRequest},
		{"application/json;;", http.StatusBadRequest},
		{"application/json", http.StatusCreated},
		{"application/json; charset=utf-8", http.StatusCreated},
		{"Application/JSON; charset=UTF-8", http.StatusCreated},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
				contentType: tc.contentType, body: validProposal})
			if tc.want == http.StatusBadRequest {
				wantError(t, r, tc.want, models.EInvalidRequest, "content-type")
				return
			}
			if got := r.StatusCode; got != tc.want {
				t.Errorf("status = %d, want %d (%s)", got, tc.want, r.body)
			}
		})
	}
}

func TestProposeOversizeBody(t *testing.T) {
	f := newFake()
	f.proposeFn = func(a models.Agent, in writes.ProposeInput) (*models.Proposal, bool, error) {
		return sampleProposal("prop_1"), true, nil
	}
	srv := newServer(t, f)
	big := `{"tool":"refund_order","arguments":{"note":"` + strings.Repeat("x", 64<<10) + `"}}`

	t.Run("declared length", func(t *testing.T) {
		r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
			contentType: "application/json", body: big})
		wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, "65536 bytes")
	})
	t.Run("chunked, no declared length", func(t *testing.T) {
		// A reader of unknown length (ContentLength 0 with a body) makes
		// the client send it chunked, so only reading can find out it is
		// too large.
		body := io.MultiReader(strings.NewReader(big))
		req, err := http.NewRequest("POST", srv.URL+"/api/v1/proposals", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Content-Type", "application/json")
		r := send(t, req)
		wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, "65536 bytes")
	})
	t.Run("exactly at the limit is read", func(t *testing.T) {
		pad := 64<<10 - len(`{"tool":"refund_order","arguments":{},"context":""}`)
		body := `{"tool":"refund_order","arguments":{},"context":""}` + strings.Repeat(" ", pad)
		r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
			contentType: "application/json", body: body})
		if got, want := r.StatusCode, http.StatusCreated; got != want {
			t.Errorf("status = %d, want %d (%s)", got, want, r.body)
		}
	})
	if got, want := f.callCount("Propose"), 1; got != want {
		t.Errorf("Propose called %d times, want %d (only the body within the limit)", got, want)
	}
}

func TestProposeRejectsBadBodies(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	for _, tc := range []struct {
		name, body, mention string
	}{
		{"empty", "", "empty"},
		{"whitespace", "  \n", "empty"},
		{"truncated", `{"tool":"refund_order","arguments":{`, "unexpected end"},
		{"syntax", `{"tool":"refund_order",,}`, "malformed JSON"},
		{"single quotes", `{'tool':'x'}`, "malformed JSON"},
		{"trailing garbage", `{"tool":"refund_order","arguments":{}} x`, "after the JSON object"},
		{"second object", `{"tool":"refund_order","arguments":{}}{}`, "after the JSON object"},
		{"top-level array", `[{"tool":"refund_order","arguments":{}}]`, "must be a JSON object"},
		{"top-level string", `"refund_order"`, "must be a JSON object"},
		{"top-level null", `null`, "must be a JSON object"},
		{"unknown field", `{"tool":"refund_order","arguments":{},"amount":5}`, `unknown field "amount"`},
		{"tool not a string", `{"tool":5,"arguments":{}}`, `"tool" must be a string`},
		{"context not a string", `{"tool":"refund_order","arguments":{},"context":["a"]}`, `"context" must be a string`},
		{"duplicate top-level key", `{"tool":"refund_order","tool":"delete_logs","arguments":{}}`, `duplicate key "tool"`},
		{"keys differing only by case", `{"Tool":"refund_order","tool":"delete_logs","arguments":{}}`, `field "Tool" must be spelled "tool"`},
		{"key in another case", `{"TOOL":"delete_logs","arguments":{}}`, `case-sensitive`},
		{"key with a Kelvin sign", `{"tool":"refund_order","arguments":{},"request_\u212aey":"k"}`, `case-sensitive`},
		{"arguments in another case", `{"tool":"refund_order","arguments":{},"Arguments":{"amount_minor":1}}`, `case-sensitive`},
		{"duplicate nested key", `{"tool":"refund_order","arguments":{"amount_minor":1,"amount_minor":99999}}`, `duplicate key "amount_minor" in "/arguments"`},
		{"duplicate key in array element", `{"tool":"delete_logs","arguments":{"ids":[{"a":1},{"a":1,"a":2}]}}`, `"/arguments/ids/1"`},
		{"tool missing", `{"arguments":{}}`, `"tool" is required`},
		{"arguments missing", `{"tool":"refund_order"}`, `"arguments" is required`},
		{"arguments null", `{"tool":"refund_order","arguments":null}`, `"arguments"`},
		{"arguments array", `{"tool":"refund_order","arguments":[1,2]}`, `"arguments" must be a JSON object`},
		{"arguments string", `{"tool":"refund_order","arguments":"{}"}`, `"arguments" must be a JSON object`},
		{"too deep", `{"tool":"x","arguments":` + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70) + `}`, "nested deeper"},
		{"invalid UTF-8", "{\"tool\":\"refund_order\",\"arguments\":{},\"context\":\"\xff\xfe\"}", "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
				contentType: "application/json", body: tc.body})
			wantError(t, r, http.StatusBadRequest, models.EInvalidRequest, tc.mention)
		})
	}
	if got := f.callCount("Propose"); got != 0 {
		t.Errorf("bad bodies reached Propose %d times", got)
	}
}

func TestProposeLimitsAreInclusive(t *testing.T) {
	f := newFake()
	var got writes.ProposeInput
	f.proposeFn = func(a models.Agent, in writes.ProposeInput) (*models.Proposal, bool, error) {
		got = in
		return sampleProposal("prop_1"), true, nil
	}
	srv := newServer(t, f)
	key := strings.Repeat("A", 190) + "._:-09az"
	ctx := strings.Repeat("é", 4000)
	body := fmt.Sprintf(`{"tool":"refund_order","arguments":{},"request_key":%q,"context":%q}`, key, ctx)
	r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA, contentType: "application/json", body: body})
	if r.StatusCode != http.StatusCreated {
		t.Fatalf("status = %d, want 201 (%s)", r.StatusCode, r.body)
	}
	if got.RequestKey != key || got.Context != ctx {
		t.Errorf("service got request_key %q / context of %d bytes, want them unchanged", got.RequestKey, len(got.Context))
	}
}

func TestProposeCreatedThenIdempotentRetry(t *testing.T) {
	f := newFake()
	var inputs []writes.ProposeInput
	var agents []models.Agent
	f.proposeFn = func(a models.Agent, in writes.ProposeInput) (*models.Proposal, bool, error) {
		agents = append(agents, a)
		inputs = append(inputs, in)
		return sampleProposal("prop_1"), len(inputs) == 1, nil
	}
	srv := newServer(t, f)
	post := func() response {
		return do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
			contentType: "application/json", body: validProposal})
	}

	first := post()
	if got, want := first.StatusCode, http.StatusCreated; got != want {
		t.Fatalf("first: status = %d, want %d (%s)", got, want, first.body)
	}
	if got, want := first.Header.Get("Location"), "/api/v1/proposals/prop_1"; got != want {
		t.Errorf("first: Location = %q, want %q", got, want)
	}
	if got, want := first.Header.Get("ETag"), `W/"prop_1-3"`; got != want {
		t.Errorf("first: ETag = %q, want %q", got, want)
	}
	if got, want := decodeMap(t, first)["id"], "prop_1"; got != want {
		t.Errorf("first: id = %v, want %v", got, want)
	}

	retry := post()
	if got, want := retry.StatusCode, http.StatusOK; got != want {
		t.Fatalf("retry: status = %d, want %d (%s)", got, want, retry.body)
	}
	if got := retry.Header.Get("Location"); got != "" {
		t.Errorf("retry: Location = %q, want none", got)
	}
	if got, want := decodeMap(t, retry)["id"], "prop_1"; got != want {
		t.Errorf("retry: id = %v, want %v", got, want)
	}

	if got, want := agents[0], agentA; got.ID != want.ID || got.TenantID != want.TenantID {
		t.Errorf("service got agent %+v, want %+v", got, want)
	}
	in := inputs[0]
	if got, want := in.Tool, "refund_order"; got != want {
		t.Errorf("Tool = %q, want %q", got, want)
	}
	if got, want := string(in.Arguments), `{"order_id":"ord_1","amount_minor":1250,"currency":"EUR"}`; got != want {
		t.Errorf("Arguments = %s, want the raw object %s", got, want)
	}
	if got, want := in.RequestKey, "rk-1"; got != want {
		t.Errorf("RequestKey = %q, want %q", got, want)
	}
	if got, want := in.Context, "customer asked"; got != want {
		t.Errorf("Context = %q, want %q", got, want)
	}
}

func TestProposeDomainErrors(t *testing.T) {
	f := newFake()
	srv := newServer(t, f)
	post := func() response {
		return do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA,
			contentType: "application/json", body: validProposal})
	}

	t.Run("schema_violation with pointers", func(t *testing.T) {
		f.proposeFn = func(models.Agent, writes.ProposeInput) (*models.Proposal, bool, error) {
			return nil, false, &models.Error{Code: models.ESchemaViolation, Message: "arguments do not match the schema of refund_order",
				Fields: []models.FieldProblem{
					{Pointer: "/amount_minor", Message: "must be an integer"},
					{Pointer: "/reason", Message: "is required"},
				}}
		}
		e := wantError(t, post(), http.StatusUnprocessableEntity, models.ESchemaViolation, "schema")
		if got, want := len(e.Error.Fields), 2; got != want {
			t.Fatalf("fields = %+v, want %d", e.Error.Fields, want)
		}
		if got, want := e.Error.Fields[0].Pointer, "/amount_minor"; got != want {
			t.Errorf("fields[0].pointer = %q, want %q", got, want)
		}
		if got, want := e.Error.Fields[1].Message, "is required"; got != want {
			t.Errorf("fields[1].message = %q, want %q", got, want)
		}
	})
	t.Run("clarification_needed", func(t *testing.T) {
		f.proposeFn = func(models.Agent, writes.ProposeInput) (*models.Proposal, bool, error) {
			return nil, false, &models.Error{Code: models.EClarificationNeeded, Message: "ambiguous values",
				Fields: []models.FieldProblem{{Pointer: "/currency", Message: "amount without a currency"}}}
		}
		e := wantError(t, post(), http.StatusUnprocessableEntity, models.EClarificationNeeded)
		if len(e.Error.Fields) != 1 || e.Error.Fields[0].Pointer != "/currency" {
			t.Errorf("fields = %+v, want /currency", e.Error.Fields)
		}
	})
	t.Run("idempotency_key_reuse", func(t *testing.T) {
		f.proposeFn = func(models.Agent, writes.ProposeInput) (*models.Proposal, bool, error) {
			return nil, false, models.Errorf(models.EIdempotencyKeyReuse, "request key rk-1 was used for other arguments")
		}
		wantError(t, post(), http.StatusConflict, models.EIdempotencyKeyReuse, "rk-1")
	})
}

func TestProposalJSON(t *testing.T) {
	f := newFake()
	p := sampleProposal("prop_1")
	confirm(p)
	completed := testNow.Add(2 * time.Second)
	p.Status = models.StatusSucceeded
	p.Execution = &models.Execution{
		ID: "exe_1", TenantID: "t1", ProposalID: "prop_1", RequestKey: p.RequestKey, Operation: "refund_order",
		ArgsDigest: p.ArgsDigest, Status: models.StatusSucceeded, Attempts: 1, ProviderRef: "re_42",
		Result: json.RawMessage(`{"refund_id":"re_42"}`), CreatedAt: testNow, UpdatedAt: completed, CompletedAt: &completed,
	}
	f.add(p)
	batch := sampleProposal("prop_2")
	batch.Tool, batch.Resource = "delete_logs", ""
	batch.ResourceSet, batch.ResourceCount, batch.ResourceSetDigest = []string{"log_1", "log_2"}, 2, "sha256:cd"
	batch.Status, batch.Problems = models.StatusRejected, []models.FieldProblem{{Pointer: "/ids/1", Message: "log is on legal hold"}}
	f.add(batch)
	srv := newServer(t, f)

	r := do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_1", key: keyA})
	if r.StatusCode != http.StatusOK {
		t.Fatalf("status = %d (%s)", r.StatusCode, r.body)
	}
	m := decodeMap(t, r)
	for _, k := range []string{"id", "tool", "status", "arguments", "preview", "args_digest", "risk_tier",
		"required_confirmation", "resource", "resource_set", "resource_label", "state_version", "policy_version",
		"request_key", "context", "agent", "revision", "created_at", "expires_at", "updated_at", "decisions",
		"approvals", "token", "execution", "receipt"} {
		if _, ok := m[k]; !ok {
			t.Errorf("proposal JSON lacks %q: %s", k, r.body)
		}
	}
	for k, want := range map[string]any{
		"status":         "succeeded",
		"resource":       "ord_1",
		"resource_set":   nil,
		"created_at":     "2026-03-14T09:25:53.589Z",
		"expires_at":     "2026-03-14T09:40:53.589Z",
		"revision":       4.0,
		"risk_tier":      "low",
		"policy_version": "2026-03-01",
	} {
		if got := m[k]; got != want {
			t.Errorf("%s = %#v, want %#v", k, got, want)
		}
	}
	if _, ok := m["confirmation_token"]; ok {
		t.Errorf("confirmation_token shown after the proposal left confirmed")
	}
	if _, ok := m["problems"]; ok {
		t.Errorf("problems shown for a proposal that was not rejected")
	}
	if got, want := string(mustJSON(t, m["arguments"])), `{"amount_minor":1250,"currency":"EUR","order_id":"ord_1"}`; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}
	if got, want := string(mustJSON(t, m["required_confirmation"])), `{"allow_self_approval":false,"kind":"click","quorum":1,"ttl_seconds":900}`; got != want {
		t.Errorf("required_confirmation = %s, want %s", got, want)
	}
	if got, want := string(mustJSON(t, m["agent"])), `{"id":"agt_a","name":"agent A"}`; got != want {
		t.Errorf("agent = %s, want %s", got, want)
	}
	if got, want := string(mustJSON(t, m["approvals"])), `{"have":1,"need":1}`; got != want {
		t.Errorf("approvals = %s, want %s", got, want)
	}
	if got, want := string(mustJSON(t, m["decisions"])), `[{"amr":["pwd"],"at":"2026-03-14T09:26:53.589Z","decision":"approve","digest_seen":"`+p.ArgsDigest+`","reason":"Carrier confirmed the loss","reviewer":{"id":"usr_r","name":"Rita"}}]`; got != want {
		t.Errorf("decisions = %s, want %s", got, want)
	}
	if got, want := string(mustJSON(t, m["token"])), `{"expires_at":"2026-03-14T09:31:53.589Z","status":"issued"}`; got != want {
		t.Errorf("token = %s, want %s", got, want)
	}
	if got, want := string(mustJSON(t, m["preview"])), `[{"display":"€12.50","label":"Amount","name":"amount_minor","value":1250}]`; got != want {
		t.Errorf("preview = %s, want %s", got, want)
	}
	exe, _ := m["execution"].(map[string]any)
	for k, want := range map[string]any{
		"execution_id": "exe_1", "proposal_id": "prop_1", "status": "succeeded", "attempts": 1.0,
		"provider_ref": "re_42", "error": nil, "completed_at": "2026-03-14T09:26:55.589Z",
	} {
		if got := exe[k]; got != want {
			t.Errorf("execution.%s = %#v, want %#v", k, got, want)
		}
	}
	if _, ok := exe["receipt"]; ok {
		t.Errorf("execution embeds a receipt; it belongs at the top level")
	}
	rc, _ := m["receipt"].(map[string]any)
	if got, want := rc["execution_id"], "exe_1"; got != want {
		t.Errorf("receipt.execution_id = %v, want %v", got, want)
	}

	r = do(t, srv, request{method: "GET", path: "/api/v1/proposals/prop_2", key: keyA})
	m = decodeMap(t, r)
	if got, want := string(mustJSON(t, m["resource_set"])), `{"count":2,"digest":"sha256:cd","ids":["log_1","log_2"]}`; got != want {
		t.Errorf("resource_set = %s, want %s", got, want)
	}
	if got := m["resource"]; got != nil {
		t.Errorf("resource = %v, want null for a batch", got)
	}
	if got, want := string(mustJSON(t, m["problems"])), `[{"message":"log is on legal hold","pointer":"/ids/1"}]`; got != want {
		t.Errorf("problems = %s, want %s", got, want)
	}
	for _, k := range []string{"token", "execution", "receipt"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProposeLocationWithBaseURL(t *testing.T) {
	f := newFake()
	f.proposeFn = func(models.Agent, writes.ProposeInput) (*models.Proposal, bool, error) {
		return sampleProposal("prop_1"), true, nil
	}
	e := web.NewServer(web.Config{
		BaseURL: "https://countersign.example.com/",
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, web.Deps{Protocol: f, Clock: models.NewFixedClock(testNow)})
	srv := httptest.NewServer(e)
	defer srv.Close()
	r := do(t, srv, request{method: "POST", path: "/api/v1/proposals", key: keyA, contentType: "application/json", body: validProposal})
	if got, want := r.Header.Get("Location"), "https://countersign.example.com/api/v1/proposals/prop_1"; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
}
