// Package adaptertest is a reference business system that speaks the server
// side of the HTTP adapter contract (SPEC section 7), for tests and as an
// example for integrators. Serve a Server with httptest.NewServer and point
// an httpadapter.Adapter at its URL.
//
// The system holds resources (think orders) with a refundable balance in
// minor units and a version. A write refunds amount_minor from the order
// named by order_id:
//
//	{"order_id": "ord_1", "amount_minor": 1500}
//
// Execute is idempotent on the Idempotency-Key alone, which is safe because
// countersign derives that key from its installation, the tenant, the agent
// and the request key (models.DownstreamKey). It applies a write only when
// the expected state version still matches (an optimistic
// "UPDATE … WHERE version = ?"), and counts what it applied so tests can
// assert exactly-once.
package adaptertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/adapters/httpadapter"
)

// Server is the reference business system. It is an http.Handler; every
// request must be signed (httpadapter.Sign) with the server's secret or is
// answered 401, and every answer is signed with the same secret
// (httpadapter.SignResponse). All methods are safe for concurrent use.
//
// Routes, relative to where it is served:
//
//	POST /validate
//	POST /execute                (Idempotency-Key required, else 400)
//	GET  /executions/{key}       (optional ?tenant=; 404 if nothing recorded)
//	POST /describe               (the optional effect preview: facts, before → after)
type Server struct {
	secret []byte
	mux    *http.ServeMux
	signed http.Handler

	mu           sync.Mutex
	resources    map[string]*resource
	outcomes     map[string]outcome // recorded outcome per idempotency key
	writes       map[string]int     // writes applied per idempotency key
	totalWrites  int
	executeCalls map[string]int
	delay        time.Duration
	failNext     int
	refSeq       int
}

type resource struct {
	label   string
	balance int64
	version int64
}

type outcome struct {
	tenant string
	result models.ExecuteResult
}

var _ http.Handler = (*Server)(nil)

// New returns an empty Server that verifies requests with secret (copied)
// and a clock skew of httpadapter.DefaultMaxSkew.
func New(secret []byte) *Server {
	s := &Server{
		secret:       bytes.Clone(secret),
		mux:          http.NewServeMux(),
		resources:    map[string]*resource{},
		outcomes:     map[string]outcome{},
		writes:       map[string]int{},
		executeCalls: map[string]int{},
	}
	s.mux.HandleFunc("POST /validate", s.handleValidate)
	s.mux.HandleFunc("POST /execute", s.handleExecute)
	s.mux.HandleFunc("GET /executions/{key}", s.handleStatus)
	s.mux.HandleFunc("POST /describe", s.handleDescribe)
	s.signed = httpadapter.SignResponses(s.secret, nil, http.HandlerFunc(s.serve))
	return s
}

// AddResource creates or replaces resource id with a display label and a
// refundable balance in minor units; its version starts at 1.
func (s *Server) AddResource(id, label string, balance int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resources[id] = &resource{label: label, balance: balance, version: 1}
}

// Bump changes resource id out of band (as another channel would), moving
// its version on so that executes expecting the old version get 409. It
// panics if the resource does not exist: that is a bug in the test.
func (s *Server) Bump(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.resources[id]
	if !ok {
		panic(fmt.Sprintf("adaptertest: Bump of unknown resource %q", id))
	}
	r.version++
}

// Relabel changes resource id's label out of band without moving its
// version, as a business system that versions only what a write depends on
// does when, say, a customer's display name is edited: validation still
// passes, but the description of a write (its facts) is no longer what a
// reviewer was shown. It panics if the resource does not exist.
func (s *Server) Relabel(id, label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.resources[id]
	if !ok {
		panic(fmt.Sprintf("adaptertest: Relabel of unknown resource %q", id))
	}
	r.label = label
}

// Writes reports how many times a write was applied for idemKey. A
// correct client and server keep it at 0 or 1.
func (s *Server) Writes(idemKey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[idemKey]
}

// TotalWrites reports how many writes were applied in all.
func (s *Server) TotalWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.totalWrites
}

// ExecuteCalls reports how many signed execute requests arrived for
// idemKey, including repeats answered from the recorded outcome.
func (s *Server) ExecuteCalls(idemKey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executeCalls[idemKey]
}

// Balance returns the refundable balance of resource id, 0 if unknown.
func (s *Server) Balance(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.resources[id]; ok {
		return r.balance
	}
	return 0
}

// Version returns the state version of resource id, 0 if unknown.
func (s *Server) Version(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.resources[id]; ok {
		return r.version
	}
	return 0
}

// SetExecuteDelay makes every later execute answer wait d after its outcome
// is decided (and a write, if any, applied) and before the answer is sent:
// a client with a shorter timeout sees a lost response after commit. The
// wait holds no lock and ends early when the client goes away.
func (s *Server) SetExecuteDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// FailNextExecutes makes the next n executes that would otherwise decide a
// new outcome answer failed_retryable without applying or recording
// anything, as a business system does when a dependency is briefly down.
// Executes for keys with a recorded outcome still get that outcome.
func (s *Server) FailNextExecutes(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = n
}

// ServeHTTP verifies the request signature, answering 401 if it is bad,
// and then routes the request. Every answer, a 401 included, is signed for
// the request it answers (httpadapter.SignResponses).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.signed.ServeHTTP(w, r)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if _, err := httpadapter.VerifyRequest(s.secret, r, time.Now(), 0); err != nil {
		status := http.StatusUnauthorized
		if errors.Is(err, httpadapter.ErrBodyTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, status, errorBody{Error: "unauthenticated", Message: "bad or missing request signature"})
		return
	}
	s.mux.ServeHTTP(w, r)
}

type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

// refund is the arguments object both endpoints read.
type refund struct {
	orderID string
	amount  int64
}

// parseRefund reads order_id (string) and amount_minor (positive integer)
// from the arguments object; problems are business problems, not errors.
func parseRefund(raw json.RawMessage) (refund, []string) {
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return refund{}, []string{"arguments must be a JSON object"}
	}
	var ref refund
	var problems []string
	if err := json.Unmarshal(args["order_id"], &ref.orderID); err != nil || ref.orderID == "" {
		problems = append(problems, "order_id must be a non-empty string")
	}
	dec := json.NewDecoder(bytes.NewReader(args["amount_minor"]))
	dec.UseNumber()
	// Decode into any: a json.Number target would also accept "10".
	var amount any
	err := dec.Decode(&amount)
	n, isNumber := amount.(json.Number)
	if err != nil || !isNumber {
		problems = append(problems, "amount_minor must be an integer")
	} else if v, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
		problems = append(problems, "amount_minor must be an integer")
	} else if v <= 0 {
		problems = append(problems, "amount_minor must be positive")
	} else {
		ref.amount = v
	}
	return ref, problems
}

func (s *Server) handleValidate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
		Tenant    string          `json:"tenant"`
		Principal string          `json:"principal"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Message: "body is not a validate request"})
		return
	}
	type reply struct {
		OK            bool     `json:"ok"`
		StateVersion  *int64   `json:"state_version,omitempty"`
		ResourceLabel string   `json:"resource_label,omitempty"`
		Problems      []string `json:"problems"`
	}
	ref, problems := parseRefund(req.Arguments)
	if len(problems) > 0 {
		writeJSON(w, http.StatusOK, reply{Problems: problems})
		return
	}

	s.mu.Lock()
	res, ok := s.resources[ref.orderID]
	var out reply
	if !ok {
		out = reply{Problems: []string{fmt.Sprintf("unknown order %q", ref.orderID)}}
	} else {
		version := res.version
		out = reply{OK: true, StateVersion: &version, ResourceLabel: res.label, Problems: []string{}}
		if ref.amount > res.balance {
			out.OK = false
			out.Problems = []string{fmt.Sprintf("amount %d is above the refundable balance %d", ref.amount, res.balance)}
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// handleDescribe answers what a refund would do: the target's label as a
// fact and its refundable balance before → after. An unknown target is a
// fact.
func (s *Server) handleDescribe(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
		Tenant    string          `json:"tenant"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Message: "body is not a describe request"})
		return
	}
	type fact struct {
		Label string `json:"label"`
		Value string `json:"value"`
	}
	type change struct {
		Field         string `json:"field"`
		Label         string `json:"label"`
		Before        int64  `json:"before"`
		After         int64  `json:"after"`
		BeforeDisplay string `json:"before_display"`
		AfterDisplay  string `json:"after_display"`
	}
	minor := func(v int64) string { return strconv.FormatInt(v, 10) + " (minor units)" }
	ref, problems := parseRefund(req.Arguments)
	if len(problems) > 0 {
		writeJSON(w, http.StatusOK, map[string]any{"facts": []fact{}, "changes": []change{}})
		return
	}
	s.mu.Lock()
	res, ok := s.resources[ref.orderID]
	facts := []fact{{Label: "Order", Value: fmt.Sprintf("%s does not exist", ref.orderID)}}
	changes := []change{}
	if ok {
		facts = []fact{{Label: "Order", Value: res.label}}
		changes = []change{
			{Field: "balance", Label: "Refundable balance", Before: res.balance, After: res.balance - ref.amount,
				BeforeDisplay: minor(res.balance), AfterDisplay: minor(res.balance - ref.amount)},
		}
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"facts": facts, "changes": changes})
}

func (s *Server) handleExecute(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(httpadapter.HeaderIdempotencyKey)
	if key == "" {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Message: "Idempotency-Key header is required"})
		return
	}
	s.mu.Lock()
	s.executeCalls[key]++
	delay := s.delay
	s.mu.Unlock()

	var req struct {
		Tool                 string          `json:"tool"`
		Arguments            json.RawMessage `json:"arguments"`
		Tenant               string          `json:"tenant"`
		ExpectedStateVersion string          `json:"expected_state_version"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "invalid_request", Message: "body is not an execute request"})
		return
	}

	status, body := s.execute(key, req.Tenant, req.Arguments, req.ExpectedStateVersion)

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	writeJSON(w, status, body)
}

// execute decides the outcome for key atomically: one critical section
// reads the recorded outcome, checks version and balance, applies and
// records.
func (s *Server) execute(key, tenant string, rawArgs json.RawMessage, expected string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()

	if o, ok := s.outcomes[key]; ok {
		return http.StatusOK, o.result
	}
	if s.failNext > 0 {
		s.failNext--
		return http.StatusOK, models.ExecuteResult{
			Status: models.StatusFailedRetryable,
			Result: mustJSON(map[string]string{"reason": "temporarily unavailable, retry with the same key"}),
		}
	}

	terminal := func(reason string) (int, any) {
		o := outcome{tenant: tenant, result: models.ExecuteResult{
			Status: models.StatusFailedTerminal,
			Result: mustJSON(map[string]string{"reason": reason}),
		}}
		s.outcomes[key] = o
		return http.StatusOK, o.result
	}
	ref, problems := parseRefund(rawArgs)
	if len(problems) > 0 {
		return terminal(problems[0])
	}
	res, ok := s.resources[ref.orderID]
	if !ok {
		return terminal(fmt.Sprintf("unknown order %q", ref.orderID))
	}
	current := strconv.FormatInt(res.version, 10)
	if expected != current {
		// Nothing is recorded: the key stays free, and countersign must
		// preview again before anything is written.
		return http.StatusConflict, struct {
			Error        string `json:"error"`
			StateVersion int64  `json:"state_version"`
		}{"state_conflict", res.version}
	}
	if ref.amount > res.balance {
		return terminal(fmt.Sprintf("amount %d is above the refundable balance %d", ref.amount, res.balance))
	}

	res.balance -= ref.amount
	res.version++
	s.refSeq++
	s.writes[key]++
	s.totalWrites++
	o := outcome{tenant: tenant, result: models.ExecuteResult{
		Status:      models.StatusSucceeded,
		ProviderRef: "ref_" + strconv.Itoa(s.refSeq),
		Result: mustJSON(map[string]any{
			"order_id":       ref.orderID,
			"refunded_minor": ref.amount,
			"balance_minor":  res.balance,
			"state_version":  res.version,
		}),
	}}
	s.outcomes[key] = o
	return http.StatusOK, o.result
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	tenant := r.URL.Query().Get("tenant")
	s.mu.Lock()
	o, ok := s.outcomes[key]
	s.mu.Unlock()
	// Another tenant's execution is reported as absent, never revealed.
	if !ok || (tenant != "" && o.tenant != "" && tenant != o.tenant) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not_found", Message: "no execution for this idempotency key"})
		return
	}
	writeJSON(w, http.StatusOK, o.result)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
