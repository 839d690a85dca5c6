package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/countersign/countersign/handlers/mcpserver"
	"github.com/countersign/countersign/internal/app"
	"github.com/countersign/countersign/internal/secret"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/registry"
	"github.com/countersign/countersign/models/writes"
)

// These tests drive /mcp with the go-sdk client over real HTTP against the
// server as app.Open builds it, and make every human decision through the
// console's HTTP handlers, as a reviewer's browser does.

// openMCP is openConsole with a known public URL, so that console links
// are absolute.
func openMCP(t *testing.T, server ...func(*http.Server)) *console {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &console{t: t, db: "sqlite://" + filepath.Join(t.TempDir(), "mcp.db"), clock: models.NewFixedClock(consoleStart)}
	c.cfg = app.Config{DB: c.db, Clock: c.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		DefaultTenant: "demo", BaseURL: "http://" + ln.Addr().String(), PollInterval: 50 * time.Millisecond,
		PasswordHash: cheapPasswordHash}
	a, err := app.Open(context.Background(), c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.app = a
	c.srv = httptest.NewUnstartedServer(a.Server)
	c.srv.Listener.Close()
	c.srv.Listener = ln
	for _, f := range server {
		f(c.srv.Config)
	}
	c.srv.Start()
	t.Cleanup(func() {
		c.srv.Close()
		a.Close()
	})
	if c.creds, err = a.SeedDemo(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// bearer adds the agent key to every request of the MCP client.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpAgent is an MCP client session that records the URL elicitations it
// receives and answers each with accept and form content that says
// "approved" — which must change nothing.
type mcpAgent struct {
	t         *testing.T
	session   *mcp.ClientSession
	mu        sync.Mutex
	elicits   []*mcp.ElicitParams
	completed chan string
	outputs   map[string]*jsonschema.Schema // each tool's output schema
}

type mcpOptions struct {
	version     string // "" for the SDK's newest
	noElicit    bool   // declare no elicitation capability
	noMultiTrip bool   // handle input-required results by hand
}

func (c *console) mcpClient(key string, o mcpOptions) *mcpAgent {
	c.t.Helper()
	a := &mcpAgent{t: c.t, completed: make(chan string, 8)}
	opts := &mcp.ClientOptions{
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			a.completed <- r.Params.ElicitationID
		},
	}
	if !o.noElicit {
		opts.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
		opts.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			a.mu.Lock()
			a.elicits = append(a.elicits, r.Params)
			a.mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approved": true, "decision": "approve"}}, nil
		}
	}
	if o.noMultiTrip {
		opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: c.srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key: key, next: http.DefaultTransport}}}
	var sopts *mcp.ClientSessionOptions
	if o.version != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: o.version}
	}
	s, err := client.Connect(context.Background(), tr, sopts)
	if err != nil {
		c.t.Fatalf("connect: %v", err)
	}
	c.t.Cleanup(func() { s.Close() })
	a.session = s
	a.outputs = outputSchemas(c.t, s)
	return a
}

// outputSchemas compiles the output schema each tool declares.
func outputSchemas(t *testing.T, s *mcp.ClientSession) map[string]*jsonschema.Schema {
	t.Helper()
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*jsonschema.Schema{}
	for _, tl := range res.Tools {
		if tl.OutputSchema == nil {
			t.Fatalf("%s declares no output schema", tl.Name)
		}
		b, _ := json.Marshal(tl.OutputSchema)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		url := "https://countersign.invalid/mcp/" + tl.Name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			t.Fatal(err)
		}
		if out[tl.Name], err = c.Compile(url); err != nil {
			t.Fatalf("%s output schema: %v", tl.Name, err)
		}
	}
	return out
}

func (a *mcpAgent) elicitations() []*mcp.ElicitParams {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*mcp.ElicitParams(nil), a.elicits...)
}

// call calls a tool and decodes its structured content into v.
func (a *mcpAgent) call(name string, args any, v any) *mcp.CallToolResult {
	a.t.Helper()
	res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		a.t.Fatalf("%s: protocol error %v", name, err)
	}
	if res.StructuredContent != nil || !res.IsError {
		// Every result's structured content conforms to the tool's output
		// schema, a tool error's too: the TypeScript SDK validates it also
		// when isError is set, and throws instead of returning the result.
		b, _ := json.Marshal(res.StructuredContent)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			a.t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
		if err := a.outputs[name].Validate(doc); err != nil {
			a.t.Errorf("%s: structured content outside its output schema: %v\n%s", name, err, b)
		}
	}
	if v != nil && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, v); err != nil {
			a.t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

func (a *mcpAgent) refund(order string, amount int64) mcpserver.ProposalResult {
	a.t.Helper()
	var out mcpserver.ProposalResult
	res := a.call("request_refund_order", map[string]any{"order_id": order, "amount_minor": amount, "currency": "CNY", "reason": "damaged"}, &out)
	if res.IsError {
		a.t.Fatalf("request_refund_order: %s", text(res))
	}
	return out
}

func (a *mcpAgent) get(id string, wait int) mcpserver.ProposalResult {
	a.t.Helper()
	var out mcpserver.ProposalResult
	res := a.call("get_proposal", map[string]any{"proposal_id": id, "wait_seconds": wait}, &out)
	if res.IsError {
		a.t.Fatalf("get_proposal: %s", text(res))
	}
	return out
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func toolErrorCode(t *testing.T, res *mcp.CallToolResult) models.Code {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %s", text(res))
	}
	e, err := toolErrorOf(res)
	if err != nil {
		t.Fatal(err)
	}
	return e.Error.Code
}

// toolErrorOf reads the error envelope a tool error's text ends with.
func toolErrorOf(res *mcp.CallToolResult) (mcpserver.ToolError, error) {
	var e mcpserver.ToolError
	txt := text(res)
	last := txt[strings.LastIndex(txt, "\n")+1:]
	if err := json.Unmarshal([]byte(last), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		return e, fmt.Errorf("tool error text %q does not end with the error envelope: %v", txt, err)
	}
	return e, nil
}

// approve approves p as alice through the console's form.
func (c *console) approve(id string) { c.approveAs(c.alice(), id) }

// approveAs approves p through the console in b's session.
func (c *console) approveAs(b *browser, id string) {
	c.t.Helper()
	p := c.reloadProposal(id)
	b.get("/proposals/" + id)
	wantStatus(c.t, "approve", b.postForm("/proposals/"+id+"/approve", url.Values{"digest": {p.ArgsDigest}, "effect": {p.EffectDigest}}), http.StatusSeeOther)
}

func (c *console) decline(id, reason string) {
	c.t.Helper()
	p := c.reloadProposal(id)
	b := c.alice()
	b.get("/proposals/" + id)
	wantStatus(c.t, "decline", b.postForm("/proposals/"+id+"/decline", url.Values{"digest": {p.ArgsDigest}, "reason": {reason}}), http.StatusSeeOther)
}

// agentKey creates another agent of the named tenant and returns its key.
func (c *console) agentKey(tenant, name string) string {
	c.t.Helper()
	ctx := context.Background()
	tn, err := c.app.Store.TenantByName(ctx, tenant)
	if models.IsCode(err, models.ENotFound) {
		tn, err = c.app.Store.CreateTenant(ctx, tenant)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	key, hash, err := secret.NewAPIKey()
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.app.Store.CreateAgent(ctx, tn.ID, name, "", hash); err != nil {
		c.t.Fatal(err)
	}
	return key
}

func TestMCPListsTheRegistry(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	for _, version := range []string{"", "2025-11-25"} {
		a := c.mcpClient(c.creds.AgentKey, mcpOptions{version: version})
		if got := a.session.InitializeResult().ProtocolVersion; version != "" && got != version {
			t.Errorf("negotiated %s, want %s", got, version)
		}
		res, err := a.session.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		tools := map[string]*mcp.Tool{}
		for _, tl := range res.Tools {
			tools[tl.Name] = tl
		}
		for _, rt := range c.app.Registry.Tools() {
			got := tools[mcpserver.RequestToolName(rt.Name)]
			if got == nil {
				t.Fatalf("%s: no tool request_%s in %v", version, rt.Name, res.Tools)
			}
			var want, have any
			json.Unmarshal(rt.InputSchema(), &want)
			b, _ := json.Marshal(got.InputSchema)
			json.Unmarshal(b, &have)
			if wb, hb := mustMarshal(want), mustMarshal(have); wb != hb {
				t.Errorf("%s input schema\n got %s\nwant %s", got.Name, hb, wb)
			}
			if !strings.Contains(got.Description, registry.ConfirmationNote) {
				t.Errorf("%s: description does not say a call only creates a confirmation request", got.Name)
			}
			a := got.Annotations
			destructive := rt.SideEffect == models.SideEffectIrreversible || rt.SideEffect == models.SideEffectExternal
			if a == nil || a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint != destructive || a.IdempotentHint {
				t.Errorf("%s (%s): annotations %+v", got.Name, rt.SideEffect, a)
			}
		}
		for _, name := range []string{"get_proposal", "execute_confirmed", "cancel_proposal"} {
			if tools[name] == nil {
				t.Errorf("no tool %s", name)
			}
		}
		if tools[mcpserver.MandateToolName] == nil {
			t.Errorf("no tool %s", mcpserver.MandateToolName)
		}
		// request_mandate only asks for a mandate; a person grants it.
		if n := len(tools); n != len(c.app.Registry.Tools())+4 {
			t.Errorf("%d tools; an approving tool must not exist: %v", n, res.Tools)
		}
	}
}

func mustMarshal(v any) string { b, _ := json.Marshal(v); return string(b) }

// goTypeName finds a Go type's name in a text meant for a model (which the
// error envelope's JSON keys, such as "pointer", are not).
var goTypeName = regexp.MustCompile(`\b(u?int(8|16|32|64)?|float(32|64)|Go)\b`)

func TestMCPSchemaViolationNamesThePointer(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{})
	for name, tc := range map[string]struct {
		args    map[string]any
		pointer string
	}{
		"below minimum": {map[string]any{"order_id": "ord_1001", "amount_minor": 0, "currency": "CNY", "reason": "x"}, "/amount_minor"},
		"unknown field": {map[string]any{"order_id": "ord_1001", "amount_minor": 5, "currency": "CNY", "reason": "x", "note": "y"}, "/note"},
		"bad pattern":   {map[string]any{"order_id": "1001", "amount_minor": 5, "currency": "CNY", "reason": "x"}, "/order_id"},
	} {
		res := a.call("request_refund_order", tc.args, nil)
		if code := toolErrorCode(t, res); code != models.ESchemaViolation {
			t.Errorf("%s: code %s, want schema_violation", name, code)
		}
		if !strings.Contains(text(res), tc.pointer) {
			t.Errorf("%s: %q does not name %s", name, text(res), tc.pointer)
		}
	}
	// A built-in tool's argument of the wrong JSON type is named in JSON's
	// words, never the server's Go types.
	res := a.call("get_proposal", map[string]any{"proposal_id": "prop_x", "wait_seconds": "soon"}, nil)
	if code := toolErrorCode(t, res); code != models.ESchemaViolation {
		t.Errorf("wait_seconds as a string: code %s", code)
	}
	if got := text(res); !strings.Contains(got, "/wait_seconds: must be a number") || goTypeName.MatchString(got) {
		t.Errorf("wait_seconds as a string: %q", got)
	}
	if page, err := c.app.Protocol.List(context.Background(), c.agentTenant(), writes.ListQuery{}); err != nil || len(page.Items) != 0 {
		t.Errorf("refused calls stored proposals: %v %v", page.Items, err)
	}
}

func (c *console) agentTenant() string {
	agent, err := c.app.Protocol.AuthenticateAgent(context.Background(), c.creds.AgentKey)
	if err != nil {
		c.t.Fatal(err)
	}
	return agent.TenantID
}

// On 2025-11-25 the client gets a URL elicitation of the console page and,
// once a person decides, its completion; its "accept" changes nothing.
func TestMCPLegacySessionElicitsTheConsoleAndCompletes(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{version: "2025-11-25"})
	p := a.refund("ord_1001", 100)
	if p.Status != models.StatusAwaitingConfirmation || p.ConsoleURL != c.cfg.BaseURL+"/proposals/"+p.ProposalID {
		t.Fatalf("result %+v", p)
	}
	if p.RiskTier != "low" || p.ExpiresAt == "" || len(p.Preview.Display) == 0 || !strings.Contains(string(p.Preview.Machine), `"ord_1001"`) {
		t.Errorf("result lacks preview, tier or expiry: %+v", p)
	}
	el := a.elicitations()
	if len(el) != 1 || el[0].Mode != "url" || el[0].URL != p.ConsoleURL || el[0].ElicitationID == "" {
		t.Fatalf("elicitations %+v, want one url elicitation of %s", el, p.ConsoleURL)
	}
	// The client accepted with content saying "approved": nothing changed.
	if st := c.status(p.ProposalID); st != models.StatusAwaitingConfirmation {
		t.Fatalf("an elicitation answer moved the proposal to %s", st)
	}
	// Execute before approval executes nothing.
	var early mcpserver.ProposalResult
	res := a.call("execute_confirmed", map[string]any{"proposal_id": p.ProposalID}, &early)
	if res.IsError || early.Executed == nil || *early.Executed || early.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("execute before approval: %s", text(res))
	}
	// A second read in the same session does not ask again.
	if got := a.get(p.ProposalID, 0); got.Status != models.StatusAwaitingConfirmation || len(a.elicitations()) != 1 {
		t.Errorf("get_proposal: %+v, %d elicitations", got, len(a.elicitations()))
	}

	c.approve(p.ProposalID)
	select {
	case id := <-a.completed:
		if id != el[0].ElicitationID {
			t.Errorf("completion for %q, want %q", id, el[0].ElicitationID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no elicitation completion after the approval")
	}
	if got := a.get(p.ProposalID, 0); got.Status != models.StatusConfirmed {
		t.Fatalf("status %s, want confirmed", got.Status)
	}
	c.executeAndReplay(a, p.ProposalID)
}

// executeAndReplay executes a confirmed proposal, checks the receipt, and
// checks that a second execution is refused as already consumed.
func (c *console) executeAndReplay(a *mcpAgent, id string) {
	c.t.Helper()
	var done mcpserver.ProposalResult
	res := a.call("execute_confirmed", map[string]any{"proposal_id": id}, &done)
	if res.IsError || done.Executed == nil || !*done.Executed || done.Status != models.StatusSucceeded || done.Execution == nil {
		c.t.Fatalf("execute: %s", text(res))
	}
	if r := done.Execution.Receipt; r.ExecutionID == "" || r.Status != models.StatusSucceeded || r.ArgsDigest != c.reloadProposal(id).ArgsDigest {
		c.t.Errorf("receipt %+v", r)
	}
	if strings.Contains(text(res), "eyJ") {
		c.t.Error("the result shows a token to the model")
	}
	again := a.call("execute_confirmed", map[string]any{"proposal_id": id}, nil)
	if code := toolErrorCode(c.t, again); code != models.EAlreadyConsumed {
		c.t.Errorf("second execute: %s, want already_consumed", code)
	}
}

// On 2026-07-28 the request returns an input-required result holding the
// console URL; the SDK client fulfils it and retries, and the retry reports
// the same proposal.
func TestMCPInputRequiredOnTheNewRevision(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{})
	if v := a.session.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	p := a.refund("ord_1002", 100)
	el := a.elicitations()
	if len(el) != 1 || el[0].Mode != "url" || el[0].URL != p.ConsoleURL {
		t.Fatalf("input requests %+v, want the console URL %s", el, p.ConsoleURL)
	}
	page, err := c.app.Protocol.List(context.Background(), c.agentTenant(), writes.ListQuery{})
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("the retry created another proposal: %d (%v)", len(page.Items), err)
	}
	if st := c.status(p.ProposalID); st != models.StatusAwaitingConfirmation {
		t.Fatalf("status %s", st)
	}

	// get_proposal waits while the proposal is pending.
	got := make(chan mcpserver.ProposalResult, 1)
	go func() {
		var out mcpserver.ProposalResult
		res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_proposal",
			Arguments: map[string]any{"proposal_id": p.ProposalID, "wait_seconds": 30}})
		if err == nil {
			b, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(b, &out)
		}
		got <- out
	}()
	time.Sleep(200 * time.Millisecond)
	c.approve(p.ProposalID)
	select {
	case r := <-got:
		if r.Status != models.StatusConfirmed {
			t.Fatalf("waiting get_proposal returned %s", r.Status)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("get_proposal did not return after the approval")
	}
	c.executeAndReplay(a, p.ProposalID)
}

// A client that answers input requests by hand can send anything back: the
// answer and the request state never confirm, and never reach another
// agent's proposal.
func TestMCPClientAnswersNeverConfirm(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noMultiTrip: true})
	args := map[string]any{"order_id": "ord_1003", "amount_minor": 100, "currency": "CNY", "reason": "damaged"}
	res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "request_refund_order", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if !res.NeedsInput() || res.RequestState == "" {
		t.Fatalf("want an input-required result, got %s", text(res))
	}
	ir, ok := res.InputRequests["countersign_console"].(*mcp.ElicitParams)
	if !ok || ir.Mode != "url" || !strings.HasSuffix(ir.URL, "/proposals/"+res.RequestState) {
		t.Fatalf("input requests %+v", res.InputRequests)
	}
	id := res.RequestState
	forged := mcp.InputResponseMap{"countersign_console": &mcp.ElicitResult{Action: "accept",
		Content: map[string]any{"approved": true, "digest": c.reloadProposal(id).ArgsDigest}}}
	var out mcpserver.ProposalResult
	res2, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "request_refund_order",
		Arguments: args, InputResponses: forged, RequestState: id})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res2.StructuredContent)
	json.Unmarshal(b, &out)
	if out.ProposalID != id || out.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("retry answered %s", text(res2))
	}
	if st := c.status(id); st != models.StatusAwaitingConfirmation {
		t.Fatalf("a forged answer moved the proposal to %s", st)
	}
	// The request state of another agent's proposal finds nothing.
	other := c.mcpClient(c.agentKey("demo", "other-agent"), mcpOptions{noMultiTrip: true})
	res3, err := other.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "request_refund_order",
		Arguments: args, InputResponses: forged, RequestState: id})
	if err != nil {
		t.Fatal(err)
	}
	if code := toolErrorCode(t, res3); code != models.ENotFound {
		t.Errorf("another agent's request state: %s", code)
	}
}

func TestMCPDeclinedExpiredCancelled(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})

	p := a.refund("ord_1004", 100)
	// The result carries what the API's proposal does to correlate it:
	// the digest, the request key, and times to the millisecond.
	stored := c.reloadProposal(p.ProposalID)
	if p.ArgsDigest != stored.ArgsDigest || p.RequestKey != stored.RequestKey || p.RequestKey == "" ||
		p.CreatedAt != stored.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z") ||
		p.ExpiresAt != stored.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z") {
		t.Errorf("result %+v does not match the stored proposal %+v", p, stored)
	}
	c.decline(p.ProposalID, "refunded by phone already")
	got := a.get(p.ProposalID, 0)
	if got.Status != models.StatusDeclined || got.Reason != "refunded by phone already" || !strings.Contains(got.Next, "refunded by phone already") {
		t.Errorf("declined: %+v", got)
	}
	var ex mcpserver.ProposalResult
	res := a.call("execute_confirmed", map[string]any{"proposal_id": p.ProposalID}, &ex)
	if res.IsError || ex.Executed == nil || *ex.Executed || ex.Status != models.StatusDeclined || ex.Reason == "" {
		t.Errorf("execute after decline: %s", text(res))
	}

	q := a.refund("ord_1005", 100)
	exp := c.reloadProposal(q.ProposalID).ExpiresAt
	c.clock.Set(exp.Add(-time.Millisecond))
	if got := a.get(q.ProposalID, 0); got.Status != models.StatusAwaitingConfirmation {
		t.Errorf("a millisecond before the expiry: %s", got.Status)
	}
	c.clock.Set(exp)
	if got := a.get(q.ProposalID, 0); got.Status != models.StatusExpired || got.Next == "" {
		t.Errorf("at the expiry: %+v", got)
	}
	res = a.call("execute_confirmed", map[string]any{"proposal_id": q.ProposalID}, &ex)
	if res.IsError || *ex.Executed || ex.Status != models.StatusExpired {
		t.Errorf("execute after expiry: %s", text(res))
	}
	// Cancelling an expired proposal says that it expired, as a result.
	var late mcpserver.ProposalResult
	if res := a.call("cancel_proposal", map[string]any{"proposal_id": q.ProposalID}, &late); res.IsError ||
		late.Status != models.StatusExpired || late.Next == "" {
		t.Errorf("cancel after expiry: %s", text(res))
	}
	c.clock.Set(consoleStart)

	r := a.refund("ord_1006", 100)
	var cancelled mcpserver.ProposalResult
	if res := a.call("cancel_proposal", map[string]any{"proposal_id": r.ProposalID}, &cancelled); res.IsError || cancelled.Status != models.StatusCancelled {
		t.Errorf("cancel: %s", text(res))
	}
	// A second cancel (a retry) answers the cancelled proposal again.
	var again mcpserver.ProposalResult
	if res := a.call("cancel_proposal", map[string]any{"proposal_id": r.ProposalID}, &again); res.IsError || again.Status != models.StatusCancelled ||
		again.Revision != cancelled.Revision {
		t.Errorf("second cancel: %s", text(res))
	}
}

func TestMCPAnotherAgentsProposalIsNotFound(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	p := a.refund("ord_1007", 100)
	c.approve(p.ProposalID)
	for name, key := range map[string]string{"same tenant": c.agentKey("demo", "other-agent"), "other tenant": c.agentKey("globex", "globex-agent")} {
		b := c.mcpClient(key, mcpOptions{noElicit: true})
		for _, tool := range []string{"get_proposal", "execute_confirmed", "cancel_proposal"} {
			args := map[string]any{"proposal_id": p.ProposalID}
			if tool == "get_proposal" {
				args["wait_seconds"] = 0
			}
			if code := toolErrorCode(t, b.call(tool, args, nil)); code != models.ENotFound {
				t.Errorf("%s %s: %s, want not_found", name, tool, code)
			}
		}
	}
	if st := c.status(p.ProposalID); st != models.StatusConfirmed {
		t.Fatalf("status %s", st)
	}
	c.executeAndReplay(a, p.ProposalID)
}

// An MCP session belongs to the agent that opened it: another key on the
// same session id is refused, and so is a request without a key.
func TestMCPSessionIsBoundToItsAgent(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{version: "2025-11-25"})
	sid := a.session.ID()
	if sid == "" {
		t.Fatal("no session id")
	}
	other := c.agentKey("demo", "other-agent")
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_proposal","arguments":{"proposal_id":"prop_x","wait_seconds":0}}}`
	for name, tc := range map[string]struct {
		key  string
		want int
		code models.Code
	}{
		"other agent": {other, http.StatusForbidden, models.EForbidden},
		"no key":      {"", http.StatusUnauthorized, models.EUnauthenticated},
		"unknown key": {"csk_nope", http.StatusUnauthorized, models.EUnauthenticated},
	} {
		req, _ := http.NewRequest("POST", c.srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if tc.key != "" {
			req.Header.Set("Authorization", "Bearer "+tc.key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// Every refusal is the API's error body, with a stable code.
		var e struct {
			Error struct{ Code, Message string }
		}
		err = json.NewDecoder(res.Body).Decode(&e)
		res.Body.Close()
		if res.StatusCode != tc.want || err != nil || res.Header.Get("Content-Type") != "application/json" ||
			models.Code(e.Error.Code) != tc.code || e.Error.Message == "" {
			t.Errorf("%s: status %d %q %+v (%v), want %d %s", name, res.StatusCode, res.Header.Get("Content-Type"), e, err, tc.want, tc.code)
		}
		if tc.want == http.StatusUnauthorized && !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), `Bearer realm="countersign"`) {
			t.Errorf("%s: WWW-Authenticate %q", name, res.Header.Get("WWW-Authenticate"))
		}
	}
	// The owner still uses it.
	if code := toolErrorCode(t, a.call("get_proposal", map[string]any{"proposal_id": "prop_x", "wait_seconds": 0}, nil)); code != models.ENotFound {
		t.Errorf("owner: %s", code)
	}
}

// Many sessions executing the same confirmed proposal at once: exactly one
// executes, every other call is refused, and one receipt exists.
func TestMCPConcurrentExecuteRunsOnce(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	p := a.refund("ord_1008", 100)
	c.approve(p.ProposalID)
	const n = 8
	sessions := make([]*mcpAgent, n)
	for i := range sessions {
		sessions[i] = c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true, version: []string{"", "2025-11-25"}[i%2]})
	}
	type outcome struct {
		executed bool
		code     models.Code
		err      error
	}
	results := make(chan outcome, n)
	start := make(chan struct{})
	for _, s := range sessions {
		go func() {
			<-start
			res, err := s.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_confirmed",
				Arguments: map[string]any{"proposal_id": p.ProposalID}})
			if err != nil {
				results <- outcome{err: err}
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			if res.IsError {
				e, _ := toolErrorOf(res)
				results <- outcome{code: e.Error.Code}
				return
			}
			var out mcpserver.ProposalResult
			json.Unmarshal(b, &out)
			results <- outcome{executed: out.Executed != nil && *out.Executed}
		}()
	}
	close(start)
	executed := 0
	for range n {
		o := <-results
		switch {
		case o.err != nil:
			t.Errorf("protocol error: %v", o.err)
		case o.executed:
			executed++
		case o.code != models.EAlreadyConsumed && o.code != models.EInvalidState:
			t.Errorf("refused with %q", o.code)
		}
	}
	if executed != 1 {
		t.Fatalf("%d executions, want exactly 1", executed)
	}
	if got := c.reloadProposal(p.ProposalID); got.Execution == nil || got.Status != models.StatusSucceeded {
		t.Errorf("proposal %s, execution %v", got.Status, got.Execution)
	}
}

// A revoked key stops working on an open session at its next request.
func TestMCPRevokedKeyIsRefused(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{version: "2025-11-25", noElicit: true})
	agent, err := c.app.Protocol.AuthenticateAgent(context.Background(), c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.app.Store.RevokeAgent(context.Background(), agent.TenantID, agent.ID); err != nil {
		t.Fatal(err)
	}
	_, err = a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "request_refund_order",
		Arguments: map[string]any{"order_id": "ord_1010", "amount_minor": 100, "currency": "CNY", "reason": "x"}})
	if err == nil {
		t.Fatal("a revoked key was served")
	}
	if page, err := c.app.Protocol.List(context.Background(), agent.TenantID, writes.ListQuery{}); err != nil || len(page.Items) != 0 {
		t.Errorf("a revoked key created %d proposals (%v)", len(page.Items), err)
	}
}

// A decline ends the URL elicitation too.
func TestMCPLegacyElicitationCompletesOnDecline(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{version: "2025-11-25"})
	p := a.refund("ord_1011", 100)
	el := a.elicitations()
	if len(el) != 1 {
		t.Fatalf("%d elicitations", len(el))
	}
	c.decline(p.ProposalID, "wrong order")
	select {
	case id := <-a.completed:
		if id != el[0].ElicitationID {
			t.Errorf("completion for %q", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no completion after the decline")
	}
	if got := a.get(p.ProposalID, 0); got.Status != models.StatusDeclined || got.Reason != "wrong order" {
		t.Errorf("%+v", got)
	}
}

// A confirmation that runs out before execute_confirmed is an outcome the
// model reads, not an error it retries; a millisecond earlier it executes.
func TestMCPExecuteAtTheTokenExpiry(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	late := a.refund("ord_1012", 100)
	c.approve(late.ProposalID)
	tok := c.reloadProposal(late.ProposalID).Token
	if tok == nil {
		t.Fatal("no token after the approval")
	}
	c.clock.Set(tok.ExpiresAt)
	var out mcpserver.ProposalResult
	res := a.call("execute_confirmed", map[string]any{"proposal_id": late.ProposalID}, &out)
	if res.IsError || out.Executed == nil || *out.Executed || out.Status != models.StatusExpired {
		t.Errorf("execute at the token expiry: %s", text(res))
	}

	c.clock.Set(consoleStart)
	early := a.refund("ord_1013", 100)
	c.approve(early.ProposalID)
	c.clock.Set(c.reloadProposal(early.ProposalID).Token.ExpiresAt.Add(-time.Millisecond))
	c.executeAndReplay(a, early.ProposalID)
	c.clock.Set(consoleStart)
}

// Behind a reverse proxy on the same machine the Host is the public name;
// the agent key, not the Host, decides.
func TestMCPBehindAProxyWithItsHost(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	for _, version := range []string{"", "2025-11-25"} {
		client := mcp.NewClient(&mcp.Implementation{Name: "proxied", Version: "1"}, nil)
		tr := &mcp.StreamableClientTransport{Endpoint: c.srv.URL + "/mcp", HTTPClient: &http.Client{
			Transport: hostTransport{host: "countersign.example.com", next: bearer{key: c.creds.AgentKey, next: http.DefaultTransport}}}}
		var opts *mcp.ClientSessionOptions
		if version != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
		}
		s, err := client.Connect(context.Background(), tr, opts)
		if err != nil {
			t.Fatalf("%q: %v", version, err)
		}
		if _, err := s.ListTools(context.Background(), nil); err != nil {
			t.Errorf("%q: %v", version, err)
		}
		s.Close()
	}
}

type hostTransport struct {
	host string
	next http.RoundTripper
}

func (h hostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Host = h.host
	return h.next.RoundTrip(r)
}

// The server's write timeout (90 s in production, 3 s here) does not cut
// the standalone stream, so a decision long after the request still
// completes the elicitation, nor a call that waits longer than it.
func TestMCPStreamsOutliveTheWriteTimeout(t *testing.T) {
	t.Parallel()
	const writeTimeout = 3 * time.Second
	c := openMCP(t, func(s *http.Server) {
		s.WriteTimeout = writeTimeout
	})
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{version: "2025-11-25"})
	alice := c.alice() // signed in before: the checks below do not wait on a password hash
	p := a.refund("ord_1014", 100)
	if len(a.elicitations()) != 1 {
		t.Fatal("no elicitation")
	}
	time.Sleep(writeTimeout + 500*time.Millisecond)
	c.approveAs(alice, p.ProposalID)
	select {
	case <-a.completed:
	case <-time.After(10 * time.Second):
		t.Fatal("the completion was lost with the stream")
	}
	q := a.refund("ord_1015", 100)
	got := make(chan models.Status, 1)
	go func() {
		res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_proposal",
			Arguments: map[string]any{"proposal_id": q.ProposalID, "wait_seconds": 10}})
		if err != nil || res.IsError {
			got <- ""
			return
		}
		var out mcpserver.ProposalResult
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		got <- out.Status
	}()
	time.Sleep(writeTimeout + 500*time.Millisecond)
	c.approveAs(alice, q.ProposalID)
	if st := <-got; st != models.StatusConfirmed {
		t.Errorf("the waiting call returned %q", st)
	}
}

// A request key in _meta makes a retried request_* call return the same
// proposal; the same key with other arguments is refused.
func TestMCPRequestKeyMakesRetriesIdempotent(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	args := map[string]any{"order_id": "ord_1016", "amount_minor": 100, "currency": "CNY", "reason": "damaged"}
	call := func(args map[string]any) (*mcp.CallToolResult, mcpserver.ProposalResult) {
		var out mcpserver.ProposalResult
		res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "request_refund_order", Arguments: args,
			Meta: mcp.Meta{mcpserver.MetaRequestKey: "ticket-4711", mcpserver.MetaContext: "customer called twice"}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		return res, out
	}
	_, first := call(args)
	_, again := call(args)
	if first.ProposalID == "" || again.ProposalID != first.ProposalID {
		t.Fatalf("retry made %q, first %q", again.ProposalID, first.ProposalID)
	}
	if p := c.reloadProposal(first.ProposalID); p.RequestKey != "ticket-4711" || p.Context != "customer called twice" {
		t.Errorf("request key %q, context %q", p.RequestKey, p.Context)
	}
	args["amount_minor"] = 200
	res, _ := call(args)
	if code := toolErrorCode(t, res); code != models.EIdempotencyKeyReuse {
		t.Errorf("other arguments under the same key: %s", code)
	}
}

// A request key or context in _meta that is not a string is refused, as the
// API refuses a request_key that is not a string; dropped, the key would
// make a retry a second proposal.
func TestMCPMetaKeysMustBeStrings(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	a := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	refund := map[string]any{"order_id": "ord_1017", "amount_minor": 100, "currency": "CNY", "reason": "damaged"}
	for _, tc := range []struct {
		tool string
		args map[string]any
		meta mcp.Meta
		name string
	}{
		{"request_refund_order", refund, mcp.Meta{mcpserver.MetaRequestKey: 12345}, mcpserver.MetaRequestKey},
		{"request_refund_order", refund, mcp.Meta{mcpserver.MetaContext: map[string]any{"note": "x"}}, mcpserver.MetaContext},
		{mcpserver.MandateToolName, c.mandateTerms(), mcp.Meta{mcpserver.MetaRequestKey: true}, mcpserver.MetaRequestKey},
		{mcpserver.MandateToolName, c.mandateTerms(), mcp.Meta{mcpserver.MetaContext: []any{"x"}}, mcpserver.MetaContext},
	} {
		res, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args, Meta: tc.meta})
		if err != nil {
			t.Fatal(err)
		}
		e, err := toolErrorOf(res)
		if err != nil || e.Error.Code != models.EInvalidRequest || !strings.Contains(e.Error.Message, tc.name) {
			t.Errorf("%s with _meta %v: %v %s", tc.tool, tc.meta, err, text(res))
		}
	}
	if page, err := c.app.Protocol.List(context.Background(), c.agentTenant(), writes.ListQuery{}); err != nil || len(page.Items) != 0 {
		t.Errorf("refused calls stored proposals: %v %v", page.Items, err)
	}
	// null is no key, as an absent one.
	var out mcpserver.ProposalResult
	res := a.call("request_refund_order", refund, &out)
	res2, err := a.session.CallTool(context.Background(), &mcp.CallToolParams{Name: "request_refund_order", Arguments: refund,
		Meta: mcp.Meta{mcpserver.MetaRequestKey: nil}})
	if err != nil || res.IsError || res2.IsError {
		t.Fatalf("without a key: %v %s %s", err, text(res), text(res2))
	}
}

// TestMCPWaitsCountAgainstTheAgentsLimit: get_proposal's wait holds one of
// the agent's concurrent long-polls, as ?wait= does over HTTP: beyond the
// limit the call is refused with rate_limited, an answer without a wait is
// still given, and the place is free again once the wait ends.
func TestMCPWaitsCountAgainstTheAgentsLimit(t *testing.T) {
	t.Parallel()
	c := openMCP(t)
	ctx := context.Background()
	first := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	second := c.mcpClient(c.creds.AgentKey, mcpOptions{noElicit: true})
	p := first.refund("ord_1016", 100)
	q := first.refund("ord_1017", 100)
	agent, err := c.app.Protocol.AuthenticateAgent(ctx, c.creds.AgentKey)
	if err != nil {
		t.Fatal(err)
	}
	one := 1
	if err := c.app.Store.SetLimitOverride(ctx, agent.TenantID, agent.ID, models.LimitOverride{ConcurrentWaits: &one}, c.clock.Now()); err != nil {
		t.Fatal(err)
	}
	held := func() int {
		var n int
		if err := c.app.Store.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM agent_waits WHERE agent_id = $1", agent.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	got := make(chan mcpserver.ProposalResult, 1)
	go func() {
		var out mcpserver.ProposalResult
		res, err := first.session.CallTool(ctx, &mcp.CallToolParams{Name: "get_proposal",
			Arguments: map[string]any{"proposal_id": p.ProposalID, "wait_seconds": 60}})
		if err == nil && !res.IsError {
			b, _ := json.Marshal(res.StructuredContent)
			json.Unmarshal(b, &out)
		}
		got <- out
	}()
	for deadline := time.Now().Add(20 * time.Second); held() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first wait holds %d places, want 1", held())
		}
	}
	res := second.call("get_proposal", map[string]any{"proposal_id": q.ProposalID, "wait_seconds": 5}, nil)
	if code := toolErrorCode(t, res); code != models.ERateLimited {
		t.Fatalf("a second wait beyond the limit: %s", code)
	}
	if out := second.get(q.ProposalID, 0); out.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("an answer without a wait: %s", out.Status)
	}
	c.approve(p.ProposalID)
	select {
	case out := <-got:
		if out.Status != models.StatusConfirmed {
			t.Fatalf("the held wait answered %q", out.Status)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held wait did not wake")
	}
	for deadline := time.Now().Add(10 * time.Second); held() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d places still held after the wait ended", held())
		}
	}
	if out := second.get(q.ProposalID, 1); out.Status != models.StatusAwaitingConfirmation {
		t.Fatalf("a wait once the place is free: %s", out.Status)
	}
}
