package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/handlers/api"
	"github.com/countersign/countersign/internal/apitest"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
	"github.com/countersign/countersign/web"
)

// fakeProtocol implements api.Protocol, the handlers' small interface, in
// memory. It stands in for the domain only; the server around it is the real
// one from web.NewServer.
type fakeProtocol struct {
	mu        sync.Mutex
	agents    map[string]models.Agent     // by API key
	proposals map[string]*models.Proposal // by id
	changed   chan struct{}               // closed and replaced on every update
	calls     map[string]int              // method name → calls

	proposeFn func(models.Agent, writes.ProposeInput) (*models.Proposal, bool, error)
	executeFn func(models.Agent, string, string) (*models.Execution, error)
	listFn    func(string, writes.ListQuery) (writes.Page, error)
	readyErr  error
	jwks      []byte
}

var _ api.Protocol = (*fakeProtocol)(nil)

// The fixtures: three agents of tenant t1 (B may read the tenant's
// proposals, D only its own), one of tenant t2.
var (
	agentA = models.Agent{ID: "agt_a", TenantID: "t1", Name: "agent A"}
	agentB = models.Agent{ID: "agt_b", TenantID: "t1", Name: "agent B", ReadAll: true}
	agentC = models.Agent{ID: "agt_c", TenantID: "t2", Name: "agent C"}
	agentD = models.Agent{ID: "agt_d", TenantID: "t1", Name: "agent D"}
)

const (
	keyA = "key-a"
	keyB = "key-b"
	keyC = "key-c"
	keyD = "key-d"
)

func newFake() *fakeProtocol {
	return &fakeProtocol{
		agents:    map[string]models.Agent{keyA: agentA, keyB: agentB, keyC: agentC, keyD: agentD},
		proposals: map[string]*models.Proposal{},
		changed:   make(chan struct{}),
		calls:     map[string]int{},
		jwks:      []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"AAAA"}]}`),
	}
}

func (f *fakeProtocol) count(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[name]++
}

func (f *fakeProtocol) callCount(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

// add stores p.
func (f *fakeProtocol) add(p *models.Proposal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.proposals[p.ID] = p
}

// update changes a stored proposal and wakes waiters, like a reviewer's
// decision would.
func (f *fakeProtocol) update(id string, change func(*models.Proposal)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.proposals[id])
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeProtocol) AuthenticateAgent(_ context.Context, key string) (models.Agent, error) {
	f.count("AuthenticateAgent")
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.agents[key]
	if !ok {
		return models.Agent{}, models.Errorf(models.EUnauthenticated, "unknown or revoked agent key")
	}
	return a, nil
}

func (f *fakeProtocol) Propose(_ context.Context, agent models.Agent, in writes.ProposeInput) (*models.Proposal, bool, error) {
	f.count("Propose")
	if f.proposeFn == nil {
		return nil, false, models.Errorf(models.EUnknownTool, "no tool %q", in.Tool)
	}
	return f.proposeFn(agent, in)
}

func (f *fakeProtocol) AgentGet(_ context.Context, agent models.Agent, id string) (*models.Proposal, error) {
	f.count("Get")
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.proposals[id]
	if !ok || !agent.MayRead(p) {
		return nil, models.Errorf(models.ENotFound, "no such proposal")
	}
	cp := *p
	return &cp, nil
}

func (f *fakeProtocol) AgentWait(ctx context.Context, _ models.Agent, from *models.Proposal, max time.Duration) (*models.Proposal, error) {
	f.count("Wait")
	tenantID, id, since := from.TenantID, from.ID, from.Revision
	timer := time.NewTimer(max)
	defer timer.Stop()
	for {
		f.mu.Lock()
		p, ok := f.proposals[id]
		if !ok || p.TenantID != tenantID {
			f.mu.Unlock()
			return nil, models.Errorf(models.ENotFound, "no such proposal")
		}
		cp, changed := *p, f.changed
		f.mu.Unlock()
		if cp.Revision != since {
			return &cp, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return &cp, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fakeProtocol) AgentList(_ context.Context, agent models.Agent, q writes.ListQuery) (writes.Page, error) {
	f.count("List")
	if f.listFn != nil {
		return f.listFn(agent.TenantID, q)
	}
	return writes.Page{}, nil
}

func (f *fakeProtocol) Cancel(_ context.Context, agent models.Agent, id string) (*models.Proposal, error) {
	f.count("Cancel")
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.proposals[id]
	if !ok || p.TenantID != agent.TenantID {
		return nil, models.Errorf(models.ENotFound, "no such proposal")
	}
	if p.Status != models.StatusAwaitingConfirmation {
		return nil, models.Errorf(models.EInvalidState, "proposal is %s", p.Status)
	}
	p.Status = models.StatusCancelled
	p.Revision++
	cp := *p
	return &cp, nil
}

func (f *fakeProtocol) Execute(_ context.Context, agent models.Agent, proposalID, token string) (*models.Execution, error) {
	f.count("Execute")
	if f.executeFn == nil {
		return nil, models.Errorf(models.EUnknownToken, "no such token")
	}
	return f.executeFn(agent, proposalID, token)
}

func (f *fakeProtocol) JWKS(context.Context) ([]byte, error) {
	f.count("JWKS")
	return f.jwks, nil
}

func (f *fakeProtocol) Ready(context.Context) error {
	f.count("Ready")
	return f.readyErr
}

// testNow is the fixed server time of these tests.
var testNow = time.Date(2026, 3, 14, 9, 26, 53, 589_000_000, time.UTC)

// newServer serves the fully built server over f on a real listener.
func newServer(t *testing.T, f *fakeProtocol) *httptest.Server {
	t.Helper()
	e := web.NewServer(web.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, web.Deps{Protocol: f, Clock: models.NewFixedClock(testNow), Tools: registry.Demo()})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

// request is one API call.
type request struct {
	method, path string
	key          string // agent API key; "" sends no Authorization
	contentType  string
	body         string
	header       http.Header
}

// response is a finished call with its body read.
type response struct {
	*http.Response
	body []byte
}

func do(t *testing.T, srv *httptest.Server, r request) response {
	t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, srv.URL+r.path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) response {
	t.Helper()
	res, err := apitest.Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Response: res, body: b}
}
