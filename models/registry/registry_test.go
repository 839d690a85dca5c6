package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/models"
)

func TestDemoParses(t *testing.T) {
	r := Demo() // panics if the embedded file is broken

	var names []string
	for _, tool := range r.Tools() {
		names = append(names, tool.Name)
	}
	if got, want := strings.Join(names, ","), "delete_logs,refund_order,send_customer_email"; got != want {
		t.Fatalf("tools = %s, want %s", got, want)
	}

	cases := []struct {
		name       string
		sideEffect models.SideEffect
		resource   string
		batch      bool
	}{
		{"refund_order", models.SideEffectIrreversible, "order_id", false},
		{"send_customer_email", models.SideEffectExternal, "customer_id", false},
		{"delete_logs", models.SideEffectIrreversible, "log_ids", true},
	}
	for _, c := range cases {
		tool, ok := r.Tool(c.name)
		if !ok {
			t.Fatalf("demo has no %s", c.name)
		}
		if got, want := tool.SideEffect, c.sideEffect; got != want {
			t.Errorf("%s side effect = %s, want %s", c.name, got, want)
		}
		if got, want := tool.ResourceField, c.resource; got != want {
			t.Errorf("%s resource = %s, want %s", c.name, got, want)
		}
		if got, want := tool.Batch, c.batch; got != want {
			t.Errorf("%s batch = %v, want %v", c.name, got, want)
		}
		if got, want := tool.Adapter.Kind, AdapterDemoLedger; got != want {
			t.Errorf("%s adapter = %s, want %s", c.name, got, want)
		}
		if tool.PolicyVersion == "" || tool.Title == "" {
			t.Errorf("%s: policy version or title empty", c.name)
		}
		// The agent reads once that a call only creates a request.
		if n := strings.Count(tool.AgentDescription(), "only creates a"); n != 1 {
			t.Errorf("%s description says %d times that it only creates a request: %q", c.name, n, tool.AgentDescription())
		}
		if len(tool.InputSchema()) == 0 {
			t.Errorf("%s has no input schema", c.name)
		}
	}
	if _, ok := r.Tool("drop_database"); ok {
		t.Error("Tool found a tool that is not declared")
	}

	if _, err := Parse(DemoYAML()); err != nil {
		t.Fatalf("DemoYAML does not parse: %v", err)
	}
	// DemoYAML hands out a copy.
	b := DemoYAML()
	b[0] = 'X'
	if got := DemoYAML()[0]; got == 'X' {
		t.Error("DemoYAML returned the embedded slice itself")
	}
}

func TestExampleParses(t *testing.T) {
	r, err := LoadFile("example.yaml")
	if err != nil {
		t.Fatalf("example.yaml: %v", err)
	}
	tool, ok := r.Tool("issue_refund")
	if !ok {
		t.Fatal("example has no issue_refund")
	}
	got, want := tool.Adapter, (AdapterConfig{
		Kind:      AdapterHTTP,
		BaseURL:   "https://billing.internal.example/countersign",
		SecretEnv: "BILLING_HMAC_SECRET",
		Timeout:   15 * time.Second,
	})
	if got != want {
		t.Errorf("adapter = %+v, want %+v", got, want)
	}
	// Answers must be signed unless a tool says otherwise, explicitly.
	for yaml, want := range map[string]bool{
		"adapter: {kind: http, base_url: https://x.example, secret_env: S}":                            false,
		"adapter: {kind: http, base_url: https://x.example, secret_env: S, unsigned_responses: false}": false,
		"adapter: {kind: http, base_url: https://x.example, secret_env: S, unsigned_responses: true}":  true,
	} {
		reg, err := Parse([]byte(strings.Replace(string(DemoYAML()), "adapter: {kind: demo_ledger}", yaml, 1)))
		if err != nil {
			t.Fatalf("%s: %v", yaml, err)
		}
		if got := anyUnsigned(reg); got != want {
			t.Errorf("%s: unsigned responses = %v, want %v", yaml, got, want)
		}
	}
	batch, ok := r.Tool("archive_tickets")
	if !ok || !batch.Batch || batch.ResourceField != "ticket_ids" {
		t.Errorf("archive_tickets = %+v, want a batch over ticket_ids", batch)
	}
}

func TestLoadFileErrors(t *testing.T) {
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("LoadFile of a missing file succeeded")
	}
	path := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(path, []byte("tools: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("LoadFile error = %v, want one naming %s", err, path)
	}
}

// baseYAML is a small valid registry that the rejection cases break one
// way at a time.
const baseYAML = `tools:
  - name: refund_order
    title: Refund an order
    description: Creates a proposal for a person to confirm.
    side_effect: irreversible
    policy_version: v1
    adapter: {kind: demo_ledger}
    resource: order_id
    schema:
      type: object
      properties:
        order_id: {type: string}
        amount_minor: {type: integer}
        currency: {type: string}
      required: [order_id, amount_minor, currency]
      additionalProperties: false
    normalize:
      currency: [trim, upper]
    display:
      order_id: {label: Order, kind: resource}
      amount_minor: {label: Amount, kind: money, currency_field: currency}
      currency: {label: Currency}
    risk:
      - tier: high
        when: amount_minor > 20000
        confirmation: webauthn
        ttl: 120s
      - tier: low
        confirmation: click
        ttl: 300s
`

func TestBaseYAMLParses(t *testing.T) {
	if _, err := Parse([]byte(baseYAML)); err != nil {
		t.Fatal(err)
	}
}

// A tier may require approvers from reviewer groups; the tier carries the
// factors in order.
func TestTierRequiresGroups(t *testing.T) {
	doc := strings.Replace(baseYAML, "        confirmation: webauthn\n",
		"        confirmation: webauthn\n        require: [{group: finance, count: 1}, {group: security, count: 2}]\n", 1)
	r, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("refund_order")
	tier, err := tool.Tier(json.RawMessage(`{"order_id":"o","amount_minor":30000,"currency":"CNY"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []models.Factor{{Group: "finance", Count: 1}, {Group: "security", Count: 2}}
	if !reflect.DeepEqual(tier.Require, want) || tier.Approvers() != 3 {
		t.Fatalf("tier %+v, approvers %d", tier, tier.Approvers())
	}
}

func TestParseRejects(t *testing.T) {
	const tool = `tool "refund_order": `
	nested := strings.NewReplacer(
		"        currency: {type: string}\n",
		"        currency: {type: string}\n        meta: {type: object, properties: {a: {type: string}}, required: [a]}\n",
		"[order_id, amount_minor, currency]", "[order_id, amount_minor, currency, meta]",
		"      currency: {label: Currency}\n", "      currency: {label: Currency}\n      meta: {label: Meta}\n",
	)
	cases := []struct {
		name     string
		old, new string // replaced once in baseYAML; old must occur
		yaml     string // used instead of baseYAML when set
		want     string
	}{
		{name: "missing additionalProperties false", old: "      additionalProperties: false\n", new: "",
			want: tool + "schema /additionalProperties: additionalProperties must be false"},
		{name: "additionalProperties true", old: "additionalProperties: false", new: "additionalProperties: true",
			want: tool + "schema /additionalProperties: additionalProperties must be false"},
		{name: "nested object not strict", yaml: nested.Replace(baseYAML),
			want: tool + "schema /properties/meta/additionalProperties: additionalProperties must be false"},
		{name: "property not required", old: "[order_id, amount_minor, currency]", new: "[order_id, amount_minor]",
			want: tool + `schema /properties/currency: property "currency" must be listed in required`},
		{name: "required names no property", old: "[order_id, amount_minor, currency]", new: "[order_id, amount_minor, currency, note]",
			want: `"note" is required but not a property`},
		{name: "root not an object", old: "    schema:\n      type: object\n", new: "    schema:\n      type: array\n",
			want: tool + "schema /type: the root must be type: object"},
		{name: "external ref", old: "order_id: {type: string}", new: `order_id: {$ref: "https://example.com/id.json"}`,
			want: "schema does not compile"},
		{name: "unknown normalization", old: "[trim, upper]", new: "[trim, shout]",
			want: tool + `normalize: "currency": unknown normalization "shout"`},
		{name: "normalization of an unknown field", old: "      currency: [trim, upper]\n", new: "      curency: [trim]\n",
			want: tool + `normalize: "curency" is not a property of the schema`},
		{name: "normalization of an integer", old: "      currency: [trim, upper]\n", new: "      amount_minor: [trim]\n",
			want: `normalize: "amount_minor" is declared as integer`},
		{name: "ttl too short", old: "ttl: 120s", new: "ttl: 5s",
			want: tool + "risk[0]: ttl 5s must be between 10s and 24h"},
		{name: "ttl too long", old: "ttl: 300s", new: "ttl: 25h",
			want: tool + "risk[1]: ttl 25h must be between"},
		{name: "ttl not a duration", old: "ttl: 300s", new: "ttl: soon",
			want: tool + `risk[1]: ttl "soon" is not a duration`},
		{name: "ttl missing", old: "        ttl: 300s\n", new: "",
			want: tool + "risk[1]: ttl is required"},
		{name: "no catch-all tier", old: "      - tier: low\n", new: "      - tier: low\n        when: amount_minor <= 20000\n",
			want: tool + "risk[1]: the last rule must have no when"},
		{name: "catch-all not last", old: "        when: amount_minor > 20000\n", new: "",
			want: tool + "risk[0]: only the last rule may omit when"},
		{name: "no risk rules", old: baseYAML[strings.Index(baseYAML, "    risk:"):], new: "",
			want: tool + "risk: at least one rule is required"},
		{name: "bad confirmation", old: "confirmation: click", new: "confirmation: sms",
			want: tool + `risk[1]: confirmation "sms" must be click or webauthn`},
		{name: "quorum zero", old: "        confirmation: webauthn\n", new: "        confirmation: webauthn\n        quorum: 0\n",
			want: tool + "risk[0]: quorum must be at least 1"},
		{name: "factor count zero", old: "        confirmation: webauthn\n", new: "        confirmation: webauthn\n        require: [{group: finance, count: 0}]\n",
			want: tool + "risk[0]: require[0]: count must be at least 1"},
		{name: "factor group twice", old: "        confirmation: webauthn\n",
			new:  "        confirmation: webauthn\n        require: [{group: finance, count: 1}, {group: finance, count: 1}]\n",
			want: tool + `risk[0]: require[1]: group "finance" is named twice`},
		{name: "factor bad group", old: "        confirmation: webauthn\n", new: "        confirmation: webauthn\n        require: [{group: Finance Team, count: 1}]\n",
			want: tool + `risk[0]: require[0]: group "Finance Team" must match`},
		{name: "bad tier name", old: "tier: low", new: "tier: Low Risk",
			want: tool + `risk[1]: tier "Low Risk" must match`},
		{name: "duplicate names", yaml: baseYAML + strings.TrimPrefix(baseYAML, "tools:\n"),
			want: tool + "the name is declared twice"},
		{name: "missing display entry", old: "      currency: {label: Currency}\n", new: "",
			want: tool + `display: property "currency" has no display entry`},
		{name: "display of an unknown property", old: "      currency: {label: Currency}\n", new: "      currency: {label: Currency}\n      note: {label: Note}\n",
			want: tool + "display: note: not a property of the schema"},
		{name: "display without label", old: "{label: Currency}", new: "{kind: text}",
			want: tool + "display: currency: label is required"},
		{name: "unknown display kind", old: "{label: Currency}", new: "{label: Currency, kind: emoji}",
			want: tool + `display: currency: unknown kind "emoji"`},
		{name: "money without currency_field", old: "kind: money, currency_field: currency", new: "kind: money",
			want: tool + "display: amount_minor: kind money needs currency_field"},
		{name: "money on a string", old: "{label: Currency}", new: "{label: Currency, kind: money, currency_field: currency}",
			want: "kind money needs a property of type integer, not string"},
		{name: "resource display on another field", old: "{label: Currency}", new: "{label: Currency, kind: resource}",
			want: "kind resource is only for the resource field"},
		{name: "bad when: doubled operator", old: "amount_minor > 20000", new: "amount_minor >> 20000",
			want: tool + `risk[0]: when "amount_minor >> 20000": expected a literal`},
		{name: "bad when: no operator", old: "amount_minor > 20000", new: "amount_minor 20000",
			want: "expected a comparison operator"},
		{name: "bad when: unclosed paren", old: "amount_minor > 20000", new: "(amount_minor > 20000",
			want: `expected ")"`},
		{name: "bad when: trailing tokens", old: "amount_minor > 20000", new: "amount_minor > 20000 amount_minor",
			want: `unexpected "amount_minor"`},
		{name: "bad when: unknown field", old: "amount_minor > 20000", new: "amount > 20000",
			want: `"amount" is not an argument of the tool`},
		{name: "bad when: string vs integer", old: "amount_minor > 20000", new: `amount_minor == "big"`,
			want: "amount_minor is declared as integer"},
		{name: "bad when: ordering a string", old: "amount_minor > 20000", new: `currency > "USD"`,
			want: "compares numbers only"},
		{name: "bad when: unterminated string", old: "amount_minor > 20000", new: `currency == "USD`,
			want: "unterminated string"},
		{name: "http without base_url", old: "adapter: {kind: demo_ledger}", new: "adapter: {kind: http, secret_env: REFUND_SECRET}",
			want: tool + "adapter: http needs base_url"},
		{name: "http with a non-http URL", old: "adapter: {kind: demo_ledger}", new: "adapter: {kind: http, base_url: ftp://x.example, secret_env: S}",
			want: tool + `adapter: base_url "ftp://x.example" must be an absolute http or https URL`},
		{name: "http without secret_env", old: "adapter: {kind: demo_ledger}", new: "adapter: {kind: http, base_url: https://x.example}",
			want: tool + "adapter: http needs secret_env"},
		{name: "http with a bad timeout", old: "adapter: {kind: demo_ledger}", new: "adapter: {kind: http, base_url: https://x.example, secret_env: S, timeout: 1h}",
			want: tool + `adapter: timeout "1h" must be a duration between 1s and 5m`},
		{name: "demo_ledger with unsigned_responses", old: "adapter: {kind: demo_ledger}", new: "adapter: {kind: demo_ledger, unsigned_responses: true}",
			want: tool + "adapter: demo_ledger takes no base_url, secret_env, timeout or unsigned_responses"},
		{name: "unknown adapter kind", old: "kind: demo_ledger", new: "kind: grpc",
			want: tool + `adapter: unknown kind "grpc"`},
		{name: "missing adapter", old: "    adapter: {kind: demo_ledger}\n", new: "",
			want: tool + "adapter is required"},
		{name: "bad tool name", old: "name: refund_order", new: "name: Refund-Order",
			want: `tool "Refund-Order": name "Refund-Order" must match`},
		{name: "bad side effect", old: "side_effect: irreversible", new: "side_effect: dangerous",
			want: tool + `side_effect "dangerous" must be one of`},
		{name: "empty policy version", old: "policy_version: v1", new: `policy_version: ""`,
			want: tool + "policy_version is required"},
		{name: "resource not in schema", old: "resource: order_id", new: "resource: order",
			want: tool + `resource: "order" is not a property of the schema`},
		{name: "resource not a string", old: "resource: order_id", new: "resource: amount_minor",
			want: tool + `resource: field "amount_minor" must be declared {type: string}`},
		{name: "batch resource not an array", old: "resource: order_id", new: "resource: {field: order_id, batch: true}",
			want: `resource: batch field "order_id" must be declared {type: array, items: {type: string}}`},
		{name: "clarify unknown condition", old: "    display:\n", new: "    clarify:\n      - {field: currency, when: vague, message: say which}\n    display:\n",
			want: tool + `clarify[0]: when "vague" must be missing`},
		{name: "unknown key", old: "side_effect:", new: "side_efect:",
			want: `line 5: tool "refund_order": unknown key "side_efect" in the tool (known: name, title,`},
		{name: "empty file", yaml: " ", want: "the file is empty"},
		{name: "no tools", yaml: "tools: []\n", want: "no tools declared"},
		{name: "two documents", yaml: baseYAML + "---\ntools: []\n", want: "exactly one YAML document"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := c.yaml
			if data == "" {
				if !strings.Contains(baseYAML, c.old) {
					t.Fatalf("test bug: %q is not in baseYAML", c.old)
				}
				data = strings.Replace(baseYAML, c.old, c.new, 1)
			}
			_, err := Parse([]byte(data))
			if err == nil {
				t.Fatalf("Parse succeeded, want an error containing %q", c.want)
			}
			if got, want := err.Error(), c.want; !strings.Contains(got, want) {
				t.Errorf("error = %q\nwant it to contain %q", got, want)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	data := strings.NewReplacer("ttl: 120s", "ttl: 1s", "[trim, upper]", "[shout]").Replace(baseYAML)
	_, err := Parse([]byte(data))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	for _, want := range []string{"ttl 1s", `unknown normalization "shout"`} {
		if got := err.Error(); !strings.Contains(got, want) {
			t.Errorf("error = %q, want it to contain %q", got, want)
		}
	}
}

// fieldPointers returns the code of err and the pointers of its fields.
func fieldPointers(t *testing.T, err error) (models.Code, []string) {
	t.Helper()
	var e *models.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *models.Error", err, err)
	}
	var ptrs []string
	for _, f := range e.Fields {
		if f.Message == "" {
			t.Errorf("field %s has no message", f.Pointer)
		}
		ptrs = append(ptrs, f.Pointer)
	}
	return e.Code, ptrs
}

func demoTool(t *testing.T, name string) *Tool {
	t.Helper()
	tool, ok := Demo().Tool(name)
	if !ok {
		t.Fatalf("demo has no %s", name)
	}
	return tool
}

func TestPrepareNormalizesToCanonicalJSON(t *testing.T) {
	tool := demoTool(t, "refund_order")
	inputs := []string{
		`{"order_id":"ord_1001","amount_minor":19900,"currency":" cny ","reason":"  arrived damaged\n"}`,
		`{ "reason": "arrived damaged", "currency": "CNY", "amount_minor": 19900, "order_id": "ord_1001" }`,
		`{"currency":"Cny","amount_minor":1.99e4,"reason":"arrived damaged","order_id":"ord_1001"}`,
	}
	const want = `{"amount_minor":19900,"currency":"CNY","order_id":"ord_1001","reason":"arrived damaged"}`
	for _, in := range inputs {
		p, err := tool.Prepare([]byte(in))
		if err != nil {
			t.Fatalf("Prepare(%s): %v", in, err)
		}
		if got := string(p.Arguments); got != want {
			t.Errorf("Prepare(%s) = %s, want %s", in, got, want)
		}
		if got, want := p.Resource, "ord_1001"; got != want {
			t.Errorf("resource = %q, want %q", got, want)
		}
		if p.ResourceSet != nil || p.ResourceSetDigest != "" {
			t.Errorf("single-resource tool got a resource set: %+v", p)
		}
	}
}

func TestPrepareSchemaViolation(t *testing.T) {
	tool := demoTool(t, "refund_order")
	cases := []struct {
		name string
		args string
		want []string
	}{
		{"extra field", `{"order_id":"ord_1001","amount_minor":100,"currency":"CNY","reason":"r","foo":1}`, []string{"/foo"}},
		{"wrong type", `{"order_id":"ord_1001","amount_minor":"100","currency":"CNY","reason":"r"}`, []string{"/amount_minor"}},
		{"fraction", `{"order_id":"ord_1001","amount_minor":100.5,"currency":"CNY","reason":"r"}`, []string{"/amount_minor"}},
		{"below minimum", `{"order_id":"ord_1001","amount_minor":0,"currency":"CNY","reason":"r"}`, []string{"/amount_minor"}},
		{"pattern", `{"order_id":"order-1","amount_minor":100,"currency":"CNY","reason":"r"}`, []string{"/order_id"}},
		{"missing required", `{"order_id":"ord_1001","amount_minor":100,"currency":"CNY"}`, []string{"/reason"}},
		{"empty after trim", `{"order_id":"ord_1001","amount_minor":100,"currency":"CNY","reason":"   "}`, []string{"/reason"}},
		{"beyond 2^53", `{"order_id":"ord_1001","amount_minor":9007199254740993,"currency":"CNY","reason":"r"}`, []string{"/amount_minor"}},
		// The same integer in exponent or decimal form: the canonical form
		// would turn it into 9007199254740992, so it is refused too.
		{"beyond 2^53 in exponent form", `{"order_id":"ord_1001","amount_minor":9.007199254740993e15,"currency":"CNY","reason":"r"}`, []string{"/amount_minor"}},
		{"beyond 2^53 with a fraction part", `{"order_id":"ord_1001","amount_minor":9007199254740993.0,"currency":"CNY","reason":"r"}`, []string{"/amount_minor"}},
		{"several at once", `{"order_id":1,"amount_minor":-1,"currency":"yuan","reason":"r","x":[],"y":null}`,
			[]string{"/amount_minor", "/currency", "/order_id", "/x", "/y"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := tool.Prepare([]byte(c.args))
			code, got := fieldPointers(t, err)
			if want := models.ESchemaViolation; code != want {
				t.Errorf("code = %s, want %s (%v)", code, want, err)
			}
			if want := c.want; !slices.Equal(got, want) {
				t.Errorf("pointers = %v, want %v", got, want)
			}
		})
	}

	// Nested and array pointers are relative to the arguments.
	logs := demoTool(t, "delete_logs")
	_, err := logs.Prepare([]byte(`{"log_ids":["log_0001","nope"],"reason":"r"}`))
	if _, got := fieldPointers(t, err); !slices.Equal(got, []string{"/log_ids/1"}) {
		t.Errorf("pointers = %v, want [/log_ids/1]", got)
	}
}

func TestPrepareClarificationNeeded(t *testing.T) {
	refund := demoTool(t, "refund_order")
	email := demoTool(t, "send_customer_email")
	emailArgs := func(sendAt string) string {
		return `{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Hello","send_at":` + sendAt + `}`
	}
	cases := []struct {
		name string
		tool *Tool
		args string
		want []string
	}{
		{"missing currency", refund, `{"order_id":"ord_1001","amount_minor":19900,"reason":"r"}`, []string{"/currency"}},
		{"null currency", refund, `{"order_id":"ord_1001","amount_minor":19900,"currency":null,"reason":"r"}`, []string{"/currency"}},
		{"blank currency", refund, `{"order_id":"ord_1001","amount_minor":19900,"currency":"  ","reason":"r"}`, []string{"/currency"}},
		{"local time without zone", email, emailArgs(`"2026-09-01T14:20:00"`), []string{"/send_at"}},
		{"local time with space", email, emailArgs(`"2026-09-01 14:20"`), []string{"/send_at"}},
		{"date only", email, emailArgs(`"2026-09-01"`), []string{"/send_at"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.tool.Prepare([]byte(c.args))
			code, got := fieldPointers(t, err)
			if want := models.EClarificationNeeded; code != want {
				t.Errorf("code = %s, want %s (%v)", code, want, err)
			}
			if want := c.want; !slices.Equal(got, want) {
				t.Errorf("pointers = %v, want %v", got, want)
			}
		})
	}
}

// Ambiguity is asked about alone only when nothing else is wrong;
// otherwise one schema_violation names every field to fix, the ambiguous
// ones with their clarify message, so that an agent that sent {} learns
// all of it at once.
func TestPrepareAmbiguityAmongOtherProblems(t *testing.T) {
	refund := demoTool(t, "refund_order")
	cases := []struct {
		name, args string
		want       []string
	}{
		{"missing currency and extra field", `{"order_id":"ord_1001","amount_minor":19900,"reason":"r","foo":1}`, []string{"/currency", "/foo"}},
		{"empty arguments", `{}`, []string{"/amount_minor", "/currency", "/order_id", "/reason"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := refund.Prepare([]byte(c.args))
			code, got := fieldPointers(t, err)
			if code != models.ESchemaViolation || !slices.Equal(got, c.want) {
				t.Fatalf("%s %v, want %s %v (%v)", code, got, models.ESchemaViolation, c.want, err)
			}
			var e *models.Error
			errors.As(err, &e)
			for _, f := range e.Fields {
				if f.Pointer == "/currency" && !strings.Contains(f.Message, "currency is ambiguous") {
					t.Errorf("/currency says %q, not the clarify message", f.Message)
				}
			}
			if !strings.Contains(e.Message, "to be asked rather than guessed: /currency") {
				t.Errorf("message %q does not say what to ask", e.Message)
			}
		})
	}
}

func TestPrepareDateTimes(t *testing.T) {
	email := demoTool(t, "send_customer_email")
	cases := []struct {
		in   string
		want string // the normalized send_at, JSON
	}{
		{`"2026-09-01T14:20:00+08:00"`, `"2026-09-01T06:20:00Z"`},
		{`"2026-09-01T06:20:00Z"`, `"2026-09-01T06:20:00Z"`},
		{`"2026-09-01t06:20:00z"`, `"2026-09-01T06:20:00Z"`},
		{`"2026-09-01 14:20:00+08:00"`, `"2026-09-01T06:20:00Z"`},
		{`"2026-09-01T14:20:00+0800"`, `"2026-09-01T06:20:00Z"`},
		{`"2026-09-01T14:20+08:00"`, `"2026-09-01T06:20:00Z"`},
		{`"2026-08-31T22:20:00.250-08:00"`, `"2026-09-01T06:20:00.25Z"`},
		{`null`, `null`},
	}
	for _, c := range cases {
		args := `{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Hello","send_at":` + c.in + `}`
		p, err := email.Prepare([]byte(args))
		if err != nil {
			t.Errorf("send_at %s: %v", c.in, err)
			continue
		}
		if got, want := string(p.Arguments), `"send_at":`+c.want; !strings.Contains(got, want) {
			t.Errorf("send_at %s: arguments %s, want %s", c.in, got, want)
		}
	}

	_, err := email.Prepare([]byte(`{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Hello","send_at":"tomorrow"}`))
	code, got := fieldPointers(t, err)
	if want := models.ESchemaViolation; code != want {
		t.Errorf("code = %s, want %s", code, want)
	}
	if want := []string{"/send_at"}; !slices.Equal(got, want) {
		t.Errorf("pointers = %v, want %v", got, want)
	}
}

func TestPrepareInvalidRequest(t *testing.T) {
	tool := demoTool(t, "refund_order")
	for _, in := range []string{
		``, `[]`, `"x"`, `null`, `42`, `{`, `{"a":1}{}`, `{"a":1} x`,
		`{"order_id":"ord_1001","order_id":"ord_1002","amount_minor":1,"currency":"CNY","reason":"r"}`,
	} {
		_, err := tool.Prepare([]byte(in))
		if got, want := models.ErrorCode(err), models.EInvalidRequest; got != want {
			t.Errorf("Prepare(%q) code = %s, want %s (%v)", in, got, want, err)
		}
	}
}

func TestPrepareBatch(t *testing.T) {
	tool := demoTool(t, "delete_logs")
	prepare := func(ids string) Prepared {
		t.Helper()
		p, err := tool.Prepare([]byte(`{"log_ids":` + ids + `,"reason":"rotation"}`))
		if err != nil {
			t.Fatalf("Prepare(%s): %v", ids, err)
		}
		return p
	}
	a := prepare(`["log_0003","log_0001"," log_0003 ","log_0002"]`)
	b := prepare(`["log_0002","log_0003","log_0001"]`)
	c := prepare(`["log_0001","log_0002"]`)

	if got, want := a.ResourceSet, []string{"log_0001", "log_0002", "log_0003"}; !slices.Equal(got, want) {
		t.Errorf("resource set = %v, want %v", got, want)
	}
	if got, want := string(a.Arguments), `{"log_ids":["log_0001","log_0002","log_0003"],"reason":"rotation"}`; got != want {
		t.Errorf("arguments = %s, want %s", got, want)
	}
	if got, want := a.ResourceSetDigest, b.ResourceSetDigest; got != want {
		t.Errorf("digest differs under permutation: %s vs %s", got, want)
	}
	if got, want := string(a.Arguments), string(b.Arguments); got != want {
		t.Errorf("arguments differ under permutation: %s vs %s", got, want)
	}
	_, wantDigest, _ := models.ResourceSet([]string{"log_0001", "log_0002", "log_0003"})
	if got, want := a.ResourceSetDigest, wantDigest; got != want {
		t.Errorf("digest = %s, want %s (models.ResourceSet)", got, want)
	}
	if a.ResourceSetDigest == c.ResourceSetDigest {
		t.Error("different sets share a digest")
	}
	if a.Resource != "" {
		t.Errorf("batch tool got a single resource %q", a.Resource)
	}
}

func logIDs(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf(`"log_%04d"`, i)
	}
	return "[" + strings.Join(ids, ",") + "]"
}

func TestTierBoundaries(t *testing.T) {
	refund := demoTool(t, "refund_order")
	logs := demoTool(t, "delete_logs")
	refundArgs := func(amount string) string {
		return `{"order_id":"ord_1001","amount_minor":` + amount + `,"currency":"CNY","reason":"r"}`
	}
	low := models.Tier{Name: "low", Confirmation: models.ConfirmClick, Quorum: 1, TTL: 300 * time.Second}
	high := models.Tier{Name: "high", Confirmation: models.ConfirmWebAuthn, Quorum: 1, TTL: 120 * time.Second}
	quorum := models.Tier{Name: "quorum", Confirmation: models.ConfirmWebAuthn, Quorum: 2, TTL: 600 * time.Second}
	cases := []struct {
		name string
		tool *Tool
		args string
		want models.Tier
	}{
		{"refund 1", refund, refundArgs("1"), low},
		{"refund 20000", refund, refundArgs("20000"), low},
		{"refund 20001", refund, refundArgs("20001"), high},
		{"refund 200000", refund, refundArgs("200000"), high},
		{"refund 200001", refund, refundArgs("200001"), quorum},
		{"logs 1", logs, `{"log_ids":["log_0001"],"reason":"r"}`, low},
		{"logs 100", logs, `{"log_ids":` + logIDs(100) + `,"reason":"r"}`, low},
		{"logs 101", logs, `{"log_ids":` + logIDs(101) + `,"reason":"r"}`, high},
		// The tier counts the de-duplicated set, not what the agent sent.
		{"logs 101 with a duplicate", logs, `{"log_ids":` + strings.TrimSuffix(logIDs(100), "]") + `,"log_0000"],"reason":"r"}`, low},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.tool.Prepare([]byte(c.args))
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.tool.Tier(p.Arguments)
			if err != nil {
				t.Fatal(err)
			}
			if want := c.want; !reflect.DeepEqual(got, want) {
				t.Errorf("tier = %+v, want %+v", got, want)
			}
		})
	}
	if _, err := refund.Tier([]byte(`[1]`)); models.ErrorCode(err) != models.EInvalidRequest {
		t.Errorf("Tier of a non-object: %v, want invalid_request", err)
	}
}

func TestInputSchemaKeepsDeclarationOrder(t *testing.T) {
	tool := demoTool(t, "refund_order")
	var doc map[string]any
	if err := json.Unmarshal(tool.InputSchema(), &doc); err != nil {
		t.Fatalf("InputSchema is not JSON: %v", err)
	}
	s := string(tool.InputSchema())
	order := []string{`"order_id":{`, `"amount_minor":{`, `"currency":{`, `"reason":{`}
	last := -1
	for _, key := range order {
		i := strings.Index(s, key)
		if i <= last {
			t.Fatalf("InputSchema %s does not list the properties in declaration order", s)
		}
		last = i
	}
}

func TestSchemaViolationMessages(t *testing.T) {
	tool := demoTool(t, "refund_order")
	_, err := tool.Prepare([]byte(`{"order_id":"ord_1001","amount_minor":"7","currency":"CNY","foo":1}`))
	var e *models.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a *models.Error", err)
	}
	got := map[string]string{}
	for _, f := range e.Fields {
		got[f.Pointer] = f.Message
	}
	want := map[string]string{
		"/amount_minor": "got string, want integer",
		"/foo":          "property is not allowed",
		"/reason":       "required property is missing",
	}
	if len(got) != len(want) {
		t.Errorf("fields = %v, want %v", got, want)
	}
	for ptr, msg := range want {
		if got[ptr] != msg {
			t.Errorf("%s: message = %q, want %q", ptr, got[ptr], msg)
		}
	}
}

// Numbers whose canonical form is the same value pass; numbers the canonical
// form would change are refused rather than silently rounded.
func TestPrepareNumbersKeepTheirValue(t *testing.T) {
	y := strings.Replace(strings.Replace(exprYAML, "WHEN", "'n > 0'", 1), "n: {type: integer}", "n: {type: number}", 1)
	r, err := Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("probe")
	args := func(n string) []byte {
		return []byte(`{"id":"x","n":` + n + `,"maybe":null,"s":"","flag":false,"tags":[]}`)
	}
	for _, n := range []string{"0.1", "1e20", "1.5", "-0.0", "2.5e-3", "19900", "1.99e4"} {
		if _, err := tool.Prepare(args(n)); err != nil {
			t.Errorf("Prepare(n=%s): %v", n, err)
		}
	}
	for _, n := range []string{"0.1000000000000000055511151231257827", "9.007199254740993e15", "1e-400", "123456789012345678.5"} {
		_, err := tool.Prepare(args(n))
		code, got := fieldPointers(t, err)
		if code != models.ESchemaViolation || !slices.Equal(got, []string{"/n"}) {
			t.Errorf("Prepare(n=%s): code %s, pointers %v (%v); want schema_violation at /n", n, code, got, err)
		}
	}
}

func anyUnsigned(r *Registry) bool {
	for _, t := range r.Tools() {
		if t.Adapter.UnsignedResponses {
			return true
		}
	}
	return false
}

// The README's example of a tier requiring approver groups parses as a
// tier of the base tool.
func TestReadmeTierRequireSnippet(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- snippet: tier-require -->\n```yaml\n"
	i := strings.Index(string(b), marker)
	if i < 0 {
		t.Fatal("README has no tier-require snippet")
	}
	rest := string(b)[i+len(marker):]
	snippet := rest[:strings.Index(rest, "```")]
	old := "      - tier: high\n        when: amount_minor > 20000\n        confirmation: webauthn\n        ttl: 120s\n"
	if !strings.Contains(baseYAML, old) {
		t.Fatal("base document changed")
	}
	r, err := Parse([]byte(strings.Replace(baseYAML, old, snippet, 1)))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("refund_order")
	tier, err := tool.Tier(json.RawMessage(`{"order_id":"o","amount_minor":30000,"currency":"CNY"}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tier.Require) != 2 || tier.Require[1] != (models.Factor{Group: "security", Count: 1}) {
		t.Fatalf("tier %+v", tier)
	}
}

// A tool's digest follows what its declaration says: not comments, layout
// or the other tools.
func TestToolDigestsFollowTheDeclaration(t *testing.T) {
	base := DemoYAML()
	r, err := Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	d := r.ToolDigests()
	if len(d) != len(r.Tools()) {
		t.Fatalf("digests %v", d)
	}
	for name, v := range d {
		if !strings.HasPrefix(v, "sha256:") {
			t.Fatalf("%s: %q", name, v)
		}
	}
	// A comment and a blank line change the file's digest, no tool's.
	r2, err := Parse(append([]byte("# reviewed 2026-12-03\n\n"), base...))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Digest() == r.Digest() || fmt.Sprint(r2.ToolDigests()) != fmt.Sprint(d) {
		t.Fatalf("a comment: file %s → %s, tools %v → %v", r.Digest(), r2.Digest(), d, r2.ToolDigests())
	}
	// A changed tier changes that tool's digest only.
	old := "        when: amount_minor > 20000\n"
	if !strings.Contains(string(base), old) {
		t.Fatal("demo registry changed; update the test")
	}
	r3, err := Parse([]byte(strings.Replace(string(base), old, "        when: amount_minor > 30000\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range r3.ToolDigests() {
		if (v != d[name]) != (name == "refund_order") {
			t.Errorf("%s: %s → %s", name, d[name], v)
		}
	}
}
