// Package registry loads countersign's tool registry: the YAML file in which
// integrators declare each write tool an agent may propose (SPEC section 2).
// A Tool turns an agent's raw arguments into the normalized, validated,
// canonical snapshot a proposal stores (Prepare), picks the risk tier that
// decides how the write must be confirmed (Tier), and renders the arguments
// for a reviewer (Preview).
//
// Everything that can be checked is checked once, at Parse, so that a
// mistake in the file stops the server at start rather than a request later.
package registry

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/models"
)

//go:embed demo.yaml
var demoYAML []byte

// Registry is a parsed, validated set of tools. It is immutable and safe for
// concurrent use.
type Registry struct {
	tools  map[string]*Tool
	sorted []*Tool
	digest string
	// toolDigests maps each tool's name to the digest of its declaration.
	toolDigests map[string]string
}

// Digest is "sha256:" and the hex SHA-256 of the registry file's bytes: it
// changes with every edit of the file, so the audit log can say which
// registry a server ran with.
func (r *Registry) Digest() string { return r.digest }

// ToolDigests maps each tool's name to the digest of its declaration
// (models.DigestValue of the YAML as data): it changes with whatever the
// declaration says, and not with comments, layout or the other tools, so
// the audit log can say which tools a new registry changed.
func (r *Registry) ToolDigests() map[string]string {
	out := make(map[string]string, len(r.toolDigests))
	for k, v := range r.toolDigests {
		out[k] = v
	}
	return out
}

// PolicyVersions maps each tool's name to its policy version.
func (r *Registry) PolicyVersions() map[string]string {
	out := make(map[string]string, len(r.sorted))
	for _, t := range r.sorted {
		out[t.Name] = t.PolicyVersion
	}
	return out
}

// Tool returns the tool with the given name.
func (r *Registry) Tool(name string) (*Tool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Tools returns every tool, sorted by name. The slice is the caller's; the
// tools are shared and must not be modified.
func (r *Registry) Tools() []*Tool { return slices.Clone(r.sorted) }

// Tiers returns the names of every risk tier the tools declare, sorted,
// each once: the tiers a proposal can have.
func (r *Registry) Tiers() []string {
	var out []string
	for _, t := range r.sorted {
		for _, rule := range t.risk {
			out = append(out, rule.tier.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// AdapterConfig says where a tool's business validation and execution
// happen (SPEC section 7).
type AdapterConfig struct {
	// Kind is "demo_ledger" (built in) or "http".
	Kind string
	// BaseURL is the http adapter's base URL (http or https); required there.
	BaseURL string
	// SecretEnv names the environment variable holding the HMAC secret the
	// http adapter signs requests with; required for http. The secret itself
	// never appears in the registry file.
	SecretEnv string
	// Timeout bounds one http adapter call; 10s unless the file says otherwise.
	Timeout time.Duration
	// UnsignedResponses, set only by an explicit `unsigned_responses: true`,
	// makes the http adapter accept answers that carry no valid response
	// signature. Off, an unsigned answer counts as no answer.
	UnsignedResponses bool
}

// Adapter kinds.
const (
	AdapterDemoLedger = "demo_ledger"
	AdapterHTTP       = "http"
)

// DefaultAdapterTimeout is an http adapter's timeout when the file sets none.
const DefaultAdapterTimeout = 10 * time.Second

// Tool is one declared write tool. Its exported fields are read-only after
// Parse; the compiled schema, normalizations, clarification rules, display
// specs and risk rules are unexported and used through Prepare, Tier and
// Preview.
type Tool struct {
	// Name is the tool's identifier, e.g. "refund_order" (^[a-z][a-z0-9_]{1,63}$).
	Name string
	// Title is a short human name, e.g. "Refund an order".
	Title string
	// Description is shown to agents and reviewers.
	Description string
	// SideEffect is the declared side-effect level; only "none" may run
	// without a confirmation.
	SideEffect models.SideEffect
	// PolicyVersion changes whenever the tool's rules change; tokens carry it.
	PolicyVersion string
	// Adapter says where validation and execution happen.
	Adapter AdapterConfig
	// ResourceField is the top-level argument naming the target resource (a
	// string), or for a batch tool the list of ids (an array of strings).
	ResourceField string
	// Batch reports whether ResourceField holds a list of ids.
	Batch bool
	// ReceiptDigestOnly keeps the arguments out of signed receipts (only
	// their digest binds them): `receipt_arguments: digest` in the file.
	ReceiptDigestOnly bool

	schema     *jsonschema.Schema
	schemaJSON json.RawMessage
	order      []string // top-level properties in declaration order
	normalize  map[string][]string
	clarify    []clarifyRule
	display    map[string]displaySpec
	summary    summaryTemplates
	risk       []riskRule
	// rejectInvisible names the arguments whose strings Prepare checks
	// with visible.Find; all: every argument.
	rejectInvisible    map[string]bool
	rejectInvisibleAll bool
}

// InputSchema returns the tool's argument schema as JSON (draft 2020-12), as
// declared in the registry, for agents' tool listings. The caller may modify
// the returned slice.
func (t *Tool) InputSchema() json.RawMessage { return bytes.Clone(t.schemaJSON) }

type clarifyRule struct {
	field   string
	message string
}

type riskRule struct {
	src  string    // the `when` text, "" for a catch-all
	when condition // nil for a catch-all
	tier models.Tier
}

type displaySpec struct {
	label         string
	kind          string
	currencyField string
	labels        map[string]string
	nullLabel     string
}

// Display kinds.
const (
	kindText     = "text"
	kindMoney    = "money"
	kindDatetime = "datetime"
	kindEnum     = "enum"
	kindResource = "resource"
	kindList     = "list"
	kindBoolean  = "boolean"
)

var displayKinds = map[string]bool{
	kindText: true, kindMoney: true, kindDatetime: true, kindEnum: true,
	kindResource: true, kindList: true, kindBoolean: true,
}

// Risk tier limits.
const (
	minTTL = 10 * time.Second
	maxTTL = 24 * time.Hour
)

// The YAML document, decoded with unknown keys refused.
type fileDoc struct {
	Tools []toolDoc `yaml:"tools"`
}

type toolDoc struct {
	Name          string                `yaml:"name"`
	Title         string                `yaml:"title"`
	Description   string                `yaml:"description"`
	SideEffect    string                `yaml:"side_effect"`
	PolicyVersion string                `yaml:"policy_version"`
	Adapter       *adapterDoc           `yaml:"adapter"`
	Resource      yaml.Node             `yaml:"resource"`
	Schema        yaml.Node             `yaml:"schema"`
	Normalize     map[string][]string   `yaml:"normalize"`
	Clarify       []clarifyDoc          `yaml:"clarify"`
	Display       map[string]displayDoc `yaml:"display"`
	Summary       *summaryDoc           `yaml:"summary"`
	Risk          []riskDoc             `yaml:"risk"`
	// RejectInvisible lists top-level arguments (or "*" for all) whose
	// strings may hold no hidden code point (models/visible).
	RejectInvisible []string `yaml:"reject_invisible"`
	// ReceiptArguments is "full" (the default) or "digest".
	ReceiptArguments string `yaml:"receipt_arguments"`
}

type summaryDoc struct {
	Line    string `yaml:"line"`
	Approve string `yaml:"approve"`
}

type adapterDoc struct {
	Kind              string `yaml:"kind"`
	BaseURL           string `yaml:"base_url"`
	SecretEnv         string `yaml:"secret_env"`
	Timeout           string `yaml:"timeout"`
	UnsignedResponses *bool  `yaml:"unsigned_responses"`
}

type clarifyDoc struct {
	Field   string `yaml:"field"`
	When    string `yaml:"when"`
	Message string `yaml:"message"`
}

type displayDoc struct {
	Label         string            `yaml:"label"`
	Kind          string            `yaml:"kind"`
	CurrencyField string            `yaml:"currency_field"`
	Labels        map[string]string `yaml:"labels"`
	NullLabel     string            `yaml:"null_label"`
}

type riskDoc struct {
	Tier              string `yaml:"tier"`
	When              string `yaml:"when"`
	Confirmation      string `yaml:"confirmation"`
	Quorum            *int   `yaml:"quorum"`
	TTL               string `yaml:"ttl"`
	AllowSelfApproval bool   `yaml:"allow_self_approval"`
	// Require: approver-group factors, e.g.
	// [{group: finance, count: 1}, {group: security, count: 1}].
	Require []factorDoc `yaml:"require"`
}

type factorDoc struct {
	Group string `yaml:"group"`
	Count int    `yaml:"count"`
}

var (
	toolNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{1,63}$`)
	envNameRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	tierNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// Parse reads and validates a whole registry file. It reports every problem
// it finds, one per line, each naming the tool and the offending key (and,
// for a schema, the JSON pointer into it). example.yaml in this package is a
// complete, annotated file.
//
// The file is a mapping with one key, tools, a list of tools. Unknown keys
// anywhere outside a schema are errors. Each tool has:
//
//   - name (required): ^[a-z][a-z0-9_]{1,63}$, unique in the file.
//   - title, description (required): shown to agents and reviewers; the
//     description should tell an agent that the tool only creates a proposal
//     for a person to confirm.
//   - side_effect (required): none, reversible, irreversible or external.
//   - policy_version (required): any non-empty string; change it whenever the
//     tool's rules change, since confirmation tokens carry it.
//   - adapter (required): {kind: demo_ledger}, or {kind: http, base_url,
//     secret_env, timeout, unsigned_responses}. For http, base_url is an
//     absolute http or https URL, secret_env the name of the environment
//     variable holding the HMAC secret, timeout a Go duration ("10s", the
//     default) between 1s and 5m, and unsigned_responses (false by default)
//     accepts answers without a response signature when set to true.
//     demo_ledger takes no other key.
//   - resource (required): the top-level argument naming the target resource,
//     whose schema must be {type: string}; or {field: NAME, batch: true} for a
//     batch tool, whose argument must be {type: array, items: {type: string}}.
//     A batch's ids are sorted and de-duplicated at Prepare.
//   - schema (required): the JSON Schema (draft 2020-12) of the arguments,
//     written in YAML. The root is {type: object}; every object schema at any
//     depth has additionalProperties: false and lists every property in
//     required (optional values use a type that includes null);
//     patternProperties, boolean schemas and external $refs are refused.
//     "format" is asserted, and "pattern" uses Go's RE2 syntax.
//   - normalize (optional): argument name → list of normalizations applied in
//     order to the argument when it is a string, or to each string in it when
//     it is an array: trim (surrounding white space), upper, lower,
//     collapse_spaces (runs of white space to one space), rfc3339_utc (an
//     RFC 3339 / ISO 8601 date-time with a zone or offset, rewritten in UTC,
//     e.g. "2026-09-01T14:20:00+08:00" → "2026-09-01T06:20:00Z"; a date or
//     time without a zone is ambiguous and asks for clarification, a value
//     that is no date-time at all is a schema violation).
//   - clarify (optional): a list of {field, when: missing, message}. When the
//     field is absent, null or an empty string after normalization, Prepare
//     answers clarification_needed with the message instead of guessing or
//     reporting a schema violation. missing is the only condition.
//   - display (required): one entry per schema property, no more:
//     {label, kind, ...}. label is required; kind is text (default), money
//     (integer minor units; currency_field names the string argument holding
//     the ISO 4217 code), datetime (an RFC 3339 string, shown in the
//     reviewer's zone with the zone named), enum (labels: value → label, one
//     for every value of the property's enum), resource (only for a
//     single-resource tool's resource field: the id and the business
//     system's label), list (arrays: "3 items: a, b, c") or boolean
//     ("Yes"/"No"). null_label (optional) is shown for null, "—" otherwise.
//   - summary (optional): {line, approve}, the one-line summary a reviewer
//     reads first ("Refund {amount_minor} {currency} to order {order_id}")
//     and the words of the Approve button ("Approve refund of
//     {amount_minor} to {order_id}"). {FIELD} is the argument as displayed
//     (a resource field shows its bare id), {len(FIELD)} the length of an
//     array. Without it the line is the title and the target, and the
//     button says "Approve".
//   - reject_invisible (optional): a list of top-level argument names, or
//     ["*"] for every argument, whose strings (at any depth) may not hold
//     a code point a reviewer cannot see or that changes direction or
//     appearance (package models/visible: Cf, Cc, Zl/Zp, bidi controls,
//     variation selectors, non-NFC text). Prepare refuses such arguments
//     with schema_violation at the string's JSON pointer. Without it the
//     console shows such characters as ⟨U+…⟩ escapes with a warning.
//   - risk (required): an ordered list of rules; the first whose when holds
//     picks the tier. Each rule has tier (a name, ^[a-z][a-z0-9_]{0,31}$),
//     when (optional; see below), confirmation (click or webauthn), quorum
//     (distinct approvers, ≥ 1, default 1), ttl (the tier's time-to-live, a Go
//     duration from 10s to 24h) and
//     allow_self_approval (default false: the requester's principal may not
//     approve its own proposal; in a quorum of two or more it never counts,
//     whatever this says), and require (optional): approver-group factors
//     that must all be met, [{group: NAME, count: N}, …], each approver
//     counting toward one factor at most (models.ApprovalsMet); groups are
//     managed per tenant by administrators. The last rule must have no when, so that
//     every argument set gets a tier, and only the last.
//
// A when expression is comparisons FIELD OP LITERAL joined by and / or (and
// binds tighter; parentheses group). FIELD is a top-level argument, or
// len(FIELD) for the length of an array or (in characters) a string. OP is
// one of > >= < <= == !=; LITERAL is a JSON number, a "double-quoted" JSON
// string, true, false or null. Ordering operators compare numbers only,
// exactly (no float rounding); == and != compare any literal, and a null
// argument equals only null. A literal that does not fit the argument's
// declared type (a fraction against an integer too) is a Parse error, and so
// is a comparison over an argument without a declared type, ordering or len
// of a nullable argument that an earlier part of the expression does not
// guard (`amount != null and amount > 100`), a rule that an earlier rule
// makes unreachable (decided for comparisons of one argument with numbers)
// and a tier name used twice in a tool: so every value the schema allows
// can be compared and gets the tier the file means.
//
// Unknown keys are listed with their line, tool and place, and the other
// checks still run, so that one Parse names every problem. In a schema,
// unknown keywords are annotations, except misspellings of JSON Schema
// keywords ("minimun") and formats the validator does not assert, which
// are errors.
func Parse(data []byte) (*Registry, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("registry: the file is empty; it needs a tools list")
		}
		return nil, fmt.Errorf("registry: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("registry: the file must hold exactly one YAML document")
	}
	// Unknown keys are listed with their tool and place, and the checks go
	// on, so that one run names every problem of the file. A value of the
	// wrong YAML type leaves its field empty, which the checks below report
	// too; the decoder's message says which line.
	errs := unknownKeys(&root)
	var doc fileDoc
	if err := root.Decode(&doc); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("registry: %w", err)
		}
		for _, msg := range te.Errors {
			errs = append(errs, errors.New(typeMessage(&root, msg)))
		}
	}
	if len(doc.Tools) == 0 {
		errs = append(errs, errors.New("no tools declared"))
		return nil, fmt.Errorf("registry: %w", errors.Join(errs...))
	}

	sum := sha256.Sum256(data)
	r := &Registry{tools: map[string]*Tool{}, digest: "sha256:" + hex.EncodeToString(sum[:])}
	for i := range doc.Tools {
		d := &doc.Tools[i]
		where := fmt.Sprintf("tools[%d]", i)
		if d.Name != "" {
			where = fmt.Sprintf("tool %q", d.Name)
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", where, fmt.Sprintf(format, args...)))
		}
		t := buildTool(d, bad)
		if d.Name != "" {
			if _, dup := r.tools[d.Name]; dup {
				bad("the name is declared twice")
				continue
			}
			r.tools[d.Name] = t
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("registry: %w", errors.Join(errs...))
	}
	for _, t := range r.tools {
		r.sorted = append(r.sorted, t)
	}
	slices.SortFunc(r.sorted, func(a, b *Tool) int { return strings.Compare(a.Name, b.Name) })
	var err error
	if r.toolDigests, err = toolDigests(data); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return r, nil
}

// toolDigests digests each tool's declaration of a file that parsed, as
// data: the YAML decoded generically, hashed as canonical JSON.
func toolDigests(data []byte) (map[string]string, error) {
	var doc struct {
		Tools []map[string]any `yaml:"tools"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(doc.Tools))
	for _, t := range doc.Tools {
		name, _ := t["name"].(string)
		d, err := models.DigestValue(t)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// LoadFile reads and parses the registry file at path (see Parse).
func LoadFile(path string) (*Registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Demo returns the built-in demo registry (refund_order, send_customer_email,
// delete_logs), parsed from the embedded demo.yaml. Each call returns a fresh
// Registry. It panics only if the embedded file is broken, which a test
// rules out.
func Demo() *Registry {
	r, err := Parse(demoYAML)
	if err != nil {
		panic(fmt.Sprintf("registry: embedded demo.yaml is invalid: %v", err))
	}
	return r
}

// DemoYAML returns the text of the built-in demo registry, e.g. for an
// operator to copy and adapt. The caller may modify the returned slice.
func DemoYAML() []byte { return bytes.Clone(demoYAML) }

// buildTool validates one tool declaration, reporting every problem to bad.
// The returned tool is only used when bad was never called.
func buildTool(d *toolDoc, bad func(format string, args ...any)) *Tool {
	t := &Tool{
		Name:          d.Name,
		Title:         strings.TrimSpace(d.Title),
		Description:   strings.TrimSpace(d.Description),
		SideEffect:    models.SideEffect(d.SideEffect),
		PolicyVersion: strings.TrimSpace(d.PolicyVersion),
	}
	if !toolNameRE.MatchString(d.Name) {
		bad("name %q must match %s", d.Name, toolNameRE)
	}
	if t.Title == "" {
		bad("title is required")
	}
	if t.Description == "" {
		bad("description is required")
	}
	switch t.SideEffect {
	case models.SideEffectNone, models.SideEffectReversible, models.SideEffectIrreversible, models.SideEffectExternal:
	default:
		bad("side_effect %q must be one of none, reversible, irreversible, external", d.SideEffect)
	}
	if t.PolicyVersion == "" {
		bad("policy_version is required")
	}
	switch d.ReceiptArguments {
	case "", "full":
	case "digest":
		t.ReceiptDigestOnly = true
	default:
		bad("receipt_arguments %q must be full or digest", d.ReceiptArguments)
	}
	t.Adapter = buildAdapter(d.Adapter, bad)

	props := buildSchema(t, &d.Schema, bad) // nil when the schema is unusable
	buildResource(t, &d.Resource, props, bad)
	buildNormalize(t, d.Normalize, props, bad)
	buildClarify(t, d.Clarify, props, bad)
	buildDisplay(t, d.Display, props, bad)
	buildSummary(t, d.Summary, bad)
	buildRisk(t, d.Risk, props, bad)
	buildRejectInvisible(t, d.RejectInvisible, props, bad)
	return t
}

func buildRejectInvisible(t *Tool, names []string, props map[string]*propInfo, bad func(string, ...any)) {
	t.rejectInvisible = map[string]bool{}
	if slices.Contains(names, "*") && len(names) > 1 {
		bad(`reject_invisible: "*" already names every argument; list it alone`)
	}
	for _, n := range names {
		switch {
		case n == "*":
			t.rejectInvisibleAll = true
		case t.rejectInvisible[n]:
			bad("reject_invisible: %q is listed twice", n)
		case props != nil && props[n] == nil:
			bad("reject_invisible: %q is not a property of the schema", n)
		case props != nil && props[n].types != nil && !props[n].types["string"] && !props[n].types["array"] && !props[n].types["object"]:
			bad("reject_invisible: %q is declared as %s, which holds no string", n, typeList(props[n].types))
		default:
			t.rejectInvisible[n] = true
		}
	}
}

func buildAdapter(d *adapterDoc, bad func(string, ...any)) AdapterConfig {
	if d == nil {
		bad("adapter is required")
		return AdapterConfig{}
	}
	a := AdapterConfig{Kind: d.Kind, BaseURL: d.BaseURL, SecretEnv: d.SecretEnv}
	switch d.Kind {
	case AdapterDemoLedger:
		if d.BaseURL != "" || d.SecretEnv != "" || d.Timeout != "" || d.UnsignedResponses != nil {
			bad("adapter: demo_ledger takes no base_url, secret_env, timeout or unsigned_responses")
		}
	case AdapterHTTP:
		u, err := url.Parse(d.BaseURL)
		switch {
		case d.BaseURL == "":
			bad("adapter: http needs base_url")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			bad("adapter: base_url %q must be an absolute http or https URL", d.BaseURL)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			bad("adapter: base_url %q must not carry credentials, a query or a fragment", d.BaseURL)
		}
		switch {
		case d.SecretEnv == "":
			bad("adapter: http needs secret_env, the name of the environment variable holding the HMAC secret")
		case !envNameRE.MatchString(d.SecretEnv):
			bad("adapter: secret_env %q is not a valid environment variable name (letters, digits and _, not starting with a digit)", d.SecretEnv)
		}
		a.UnsignedResponses = d.UnsignedResponses != nil && *d.UnsignedResponses
		a.Timeout = DefaultAdapterTimeout
		if d.Timeout != "" {
			to, err := time.ParseDuration(d.Timeout)
			if err != nil || to < time.Second || to > 5*time.Minute {
				bad("adapter: timeout %q must be a duration between 1s and 5m", d.Timeout)
			}
			a.Timeout = to
		}
	case "":
		bad("adapter: kind is required (demo_ledger or http)")
	default:
		bad("adapter: unknown kind %q (demo_ledger or http)", d.Kind)
	}
	return a
}

// buildSchema converts, checks and compiles the schema and returns its
// top-level properties, or nil when the schema is unusable.
func buildSchema(t *Tool, n *yaml.Node, bad func(string, ...any)) map[string]*propInfo {
	if n.Kind == 0 {
		bad("schema is required")
		return nil
	}
	doc, err := yamlToJSON(n, "", 0)
	if err != nil {
		bad("schema %v", err)
		return nil
	}
	root, ok := doc.(map[string]any)
	if !ok {
		bad("schema: the root must be a mapping with type: object")
		return nil
	}
	if typ, _ := root["type"].(string); typ != "object" {
		bad("schema /type: the root must be type: object")
		return nil
	}
	if s, ok := root["$schema"]; ok && s != draft202012 {
		bad("schema /$schema: only %s is supported", draft202012)
		return nil
	}
	strict := true
	checkStrict(root, "", func(ptr, msg string) {
		strict = false
		bad("schema %s: %s", ptr, msg)
	})
	if !strict {
		return nil
	}
	checkKeywords(root, "", func(ptr, msg string) { bad("schema %s: %s", ptr, msg) })
	t.schema, err = compileSchema(t.Name, root)
	if err != nil {
		bad("schema does not compile: %v", err)
		return nil
	}
	t.schemaJSON, err = orderedJSON(n)
	if err != nil {
		bad("schema cannot be encoded as JSON: %v", err)
		return nil
	}
	t.order = propertyOrder(n)
	propsDoc, _ := root["properties"].(map[string]any)
	props := make(map[string]*propInfo, len(propsDoc))
	for name, ps := range propsDoc {
		m, _ := ps.(map[string]any)
		info := &propInfo{schema: m, types: schemaTypes(m)}
		if items, ok := m["items"].(map[string]any); ok {
			info.itemTypes = schemaTypes(items)
		}
		props[name] = info
	}
	return props
}

func buildResource(t *Tool, n *yaml.Node, props map[string]*propInfo, bad func(string, ...any)) {
	switch n.Kind {
	case 0:
		bad("resource is required")
		return
	case yaml.ScalarNode:
		t.ResourceField = n.Value
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			switch k {
			case "field":
				t.ResourceField = v.Value
			case "batch":
				if err := v.Decode(&t.Batch); err != nil {
					bad("resource: batch must be true or false")
				}
			default:
				bad("resource: unknown key %q (field, batch)", k)
			}
		}
	default:
		bad("resource must be an argument name or {field, batch}")
		return
	}
	if t.ResourceField == "" {
		bad("resource: the field is required")
		return
	}
	if props == nil {
		return
	}
	p, ok := props[t.ResourceField]
	switch {
	case !ok:
		bad("resource: %q is not a property of the schema", t.ResourceField)
	case t.Batch && !(len(p.types) == 1 && p.types["array"] && len(p.itemTypes) == 1 && p.itemTypes["string"]):
		bad("resource: batch field %q must be declared {type: array, items: {type: string}}", t.ResourceField)
	case !t.Batch && !(len(p.types) == 1 && p.types["string"]):
		bad("resource: field %q must be declared {type: string}", t.ResourceField)
	}
}

func buildNormalize(t *Tool, d map[string][]string, props map[string]*propInfo, bad func(string, ...any)) {
	t.normalize = map[string][]string{}
	for _, field := range sortedKeys(d) {
		names := d[field]
		if props != nil {
			p, ok := props[field]
			if !ok {
				bad("normalize: %q is not a property of the schema", field)
				continue
			}
			if p.types != nil && !p.types["string"] && !(p.types["array"] && (p.itemTypes == nil || p.itemTypes["string"])) {
				bad("normalize: %q is declared as %s; normalizations apply to strings", field, typeList(p.types))
			}
		}
		if len(names) == 0 {
			bad("normalize: %q lists no normalization", field)
		}
		for _, name := range names {
			if _, ok := normalizers[name]; !ok {
				bad("normalize: %q: unknown normalization %q (trim, upper, lower, collapse_spaces, rfc3339_utc)", field, name)
			}
		}
		t.normalize[field] = names
	}
}

func buildClarify(t *Tool, d []clarifyDoc, props map[string]*propInfo, bad func(string, ...any)) {
	seen := map[string]bool{}
	for i, c := range d {
		switch {
		case c.Field == "":
			bad("clarify[%d]: field is required", i)
			continue
		case props != nil && props[c.Field] == nil:
			bad("clarify[%d]: %q is not a property of the schema", i, c.Field)
		case seen[c.Field]:
			bad("clarify[%d]: %q has a rule already", i, c.Field)
		}
		seen[c.Field] = true
		if c.When != "missing" {
			bad("clarify[%d]: when %q must be missing", i, c.When)
		}
		msg := strings.TrimSpace(c.Message)
		if msg == "" {
			bad("clarify[%d]: message is required: it tells the agent what to ask", i)
		}
		t.clarify = append(t.clarify, clarifyRule{field: c.Field, message: msg})
	}
}

func buildDisplay(t *Tool, d map[string]displayDoc, props map[string]*propInfo, bad func(string, ...any)) {
	t.display = map[string]displaySpec{}
	if props != nil {
		for _, name := range t.order {
			if _, ok := d[name]; !ok {
				bad("display: property %q has no display entry; every argument needs a label", name)
			}
		}
	}
	for _, name := range sortedKeys(d) {
		e := d[name]
		where := "display: " + name
		s := displaySpec{
			label: strings.TrimSpace(e.Label), kind: e.Kind, currencyField: e.CurrencyField,
			labels: e.Labels, nullLabel: e.NullLabel,
		}
		if s.kind == "" {
			s.kind = kindText
		}
		t.display[name] = s
		var p *propInfo
		if props != nil {
			if p = props[name]; p == nil {
				bad("%s: not a property of the schema", where)
				continue
			}
		}
		if s.label == "" {
			bad("%s: label is required", where)
		}
		if !displayKinds[s.kind] {
			bad("%s: unknown kind %q (text, money, datetime, enum, resource, list, boolean)", where, s.kind)
			continue
		}
		if s.currencyField != "" && s.kind != kindMoney {
			bad("%s: currency_field is only for kind money", where)
		}
		if s.labels != nil && s.kind != kindEnum {
			bad("%s: labels is only for kind enum", where)
		}
		var types map[string]bool
		if p != nil {
			types = p.types
		}
		needType := func(want ...string) {
			if types == nil {
				return
			}
			for _, w := range want {
				if types[w] {
					return
				}
			}
			bad("%s: kind %s needs a property of type %s, not %s", where, s.kind, strings.Join(want, " or "), typeList(types))
		}
		switch s.kind {
		case kindMoney:
			needType("integer")
			switch {
			case s.currencyField == "":
				bad("%s: kind money needs currency_field", where)
			case props != nil && props[s.currencyField] == nil:
				bad("%s: currency_field %q is not a property of the schema", where, s.currencyField)
			case props != nil && props[s.currencyField].types != nil && !props[s.currencyField].types["string"]:
				bad("%s: currency_field %q must be a string property", where, s.currencyField)
			}
		case kindDatetime:
			needType("string")
		case kindList:
			needType("array")
		case kindBoolean:
			needType("boolean")
		case kindResource:
			if name != t.ResourceField || t.Batch {
				bad("%s: kind resource is only for the resource field of a single-resource tool", where)
			}
		case kindEnum:
			if len(s.labels) == 0 {
				bad("%s: kind enum needs labels", where)
			}
			if p == nil {
				break
			}
			values, _ := p.schema["enum"].([]any)
			declared := map[string]bool{}
			for _, v := range values {
				if v == nil {
					continue
				}
				str, ok := v.(string)
				if !ok {
					bad("%s: kind enum needs string enum values", where)
					continue
				}
				declared[str] = true
				if _, ok := s.labels[str]; !ok {
					bad("%s: enum value %q has no label", where, str)
				}
			}
			for _, k := range sortedKeys(s.labels) {
				if len(values) > 0 && !declared[k] {
					bad("%s: label for %q, which is not an enum value", where, k)
				}
			}
		}
	}
}

func buildRisk(t *Tool, d []riskDoc, props map[string]*propInfo, bad func(string, ...any)) {
	if len(d) == 0 {
		bad("risk: at least one rule is required, the last without when")
		return
	}
	for i, rd := range d {
		where := fmt.Sprintf("risk[%d]", i)
		rule := riskRule{src: strings.TrimSpace(rd.When)}
		rule.tier = models.Tier{
			Name:              rd.Tier,
			Confirmation:      models.Confirmation(rd.Confirmation),
			Quorum:            1,
			AllowSelfApproval: rd.AllowSelfApproval,
		}
		if !tierNameRE.MatchString(rd.Tier) {
			bad("%s: tier %q must match %s", where, rd.Tier, tierNameRE)
		}
		// Mandates and tokens name a tier; two rules of one name would make
		// them ambiguous.
		for j, prev := range d[:i] {
			if prev.Tier == rd.Tier && rd.Tier != "" {
				bad("%s: tier %q is named by risk[%d] already; each rule needs its own tier name", where, rd.Tier, j)
				break
			}
		}
		switch rule.tier.Confirmation {
		case models.ConfirmClick, models.ConfirmWebAuthn:
		default:
			bad("%s: confirmation %q must be click or webauthn", where, rd.Confirmation)
		}
		if rd.Quorum != nil {
			if *rd.Quorum < 1 {
				bad("%s: quorum must be at least 1", where)
			}
			rule.tier.Quorum = *rd.Quorum
		}
		for _, f := range rd.Require {
			rule.tier.Require = append(rule.tier.Require, models.Factor{Group: f.Group, Count: f.Count})
		}
		if err := models.CheckFactors(rule.tier.Require); err != nil {
			bad("%s: %v", where, err)
		}
		ttl, err := time.ParseDuration(rd.TTL)
		switch {
		case rd.TTL == "":
			bad("%s: ttl is required", where)
		case err != nil:
			bad("%s: ttl %q is not a duration such as 300s", where, rd.TTL)
		case ttl < minTTL || ttl > maxTTL:
			bad("%s: ttl %s must be between 10s and 24h", where, rd.TTL)
		}
		rule.tier.TTL = ttl
		last := i == len(d)-1
		switch {
		case rule.src == "" && !last:
			bad("%s: only the last rule may omit when; the rules after it could never match", where)
		case rule.src != "" && last:
			bad("%s: the last rule must have no when, so that every argument set gets a tier", where)
		case rule.src != "":
			c, err := parseWhen(rule.src, props)
			if err != nil {
				bad("%s: when %q: %v", where, rule.src, err)
				break
			}
			rule.when = c
			for j, prev := range t.risk {
				if prev.when != nil && subsumed(c, prev.when) {
					bad("%s: when %q can never pick tier %s: every argument set it matches is matched first by risk[%d] (%s); put the stricter rule first", where, rule.src, rd.Tier, j, prev.src)
					break
				}
			}
		}
		t.risk = append(t.risk, rule)
	}
}
