package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/models"
)

// ExportFormat names a shape in which the registry's tools are handed to an
// agent framework.
type ExportFormat string

// Export formats.
const (
	// ExportCountersign is countersign's own listing: every tool with its
	// schema, side effect and risk tiers ({"tools": [...]}).
	ExportCountersign ExportFormat = "countersign"
	// ExportOpenAI is a list of strict function definitions for OpenAI's
	// Chat Completions "tools" parameter:
	// [{"type": "function", "function": {name, description, parameters,
	// strict: true}}].
	ExportOpenAI ExportFormat = "openai"
	// ExportAnthropic is a list of tool definitions for Anthropic's Messages
	// API: [{name, description, input_schema}].
	ExportAnthropic ExportFormat = "anthropic"
)

// ExportFormats lists every format Export accepts.
var ExportFormats = []ExportFormat{ExportCountersign, ExportOpenAI, ExportAnthropic}

// ParseExportFormat returns the named format; "" is ExportCountersign.
// EInvalidRequest for an unknown name.
func ParseExportFormat(name string) (ExportFormat, error) {
	if name == "" {
		return ExportCountersign, nil
	}
	for _, f := range ExportFormats {
		if string(f) == name {
			return f, nil
		}
	}
	return "", models.Errorf(models.EInvalidRequest, "unknown format %q; use countersign, openai or anthropic", name)
}

// ConfirmationNote ends every description an agent sees: a tool call is a
// request for a person's confirmation, never the write itself.
const ConfirmationNote = "Calling this tool only creates a confirmation request: nothing is written " +
	"until a person approves exactly these arguments in the countersign console and the approved " +
	"request is executed."

// AgentDescription is the tool's description as agents see it, ending with
// ConfirmationNote.
func (t *Tool) AgentDescription() string {
	return t.Description + "\n\n" + ConfirmationNote
}

// TierRule is one risk rule of a tool: the tier its arguments get when When
// holds (When is empty for the catch-all last rule).
type TierRule struct {
	When string
	Tier models.Tier
}

// Tiers returns the tool's risk rules in the order they are tried.
func (t *Tool) Tiers() []TierRule {
	out := make([]TierRule, len(t.risk))
	for i, r := range t.risk {
		out[i] = TierRule{When: r.src, Tier: r.tier}
	}
	return out
}

// Export renders every tool of the registry in the given format as JSON.
// For ExportOpenAI, a tool whose schema strict mode cannot express (see
// openAIParameters) is EInvalidRequest naming the tool and the keyword.
// The HTTP listing (GET /api/v1/tools) and the command line (countersign
// tools export) both print exactly these bytes. Every schema in every format
// is strict: each object has additionalProperties false and requires all of
// its properties, optional values being nullable (Parse guarantees it).
// EInvalidRequest for an unknown format.
func (r *Registry) Export(format ExportFormat) ([]byte, error) {
	var doc any
	switch format {
	case ExportCountersign, "":
		list := make([]exportTool, 0, len(r.sorted))
		for _, t := range r.sorted {
			list = append(list, exportCountersign(t))
		}
		doc = map[string]any{"tools": list}
	case ExportOpenAI:
		list := make([]openAITool, 0, len(r.sorted))
		for _, t := range r.sorted {
			params, notes, err := openAIParameters(t.schemaJSON)
			var ue *unexpressible
			if errors.As(err, &ue) {
				return nil, models.Errorf(models.EInvalidRequest,
					"tool %s cannot be exported for OpenAI's strict mode (countersign and anthropic can): %s", t.Name, ue.reason)
			}
			if err != nil {
				return nil, fmt.Errorf("registry: export %s: %w", t.Name, err)
			}
			desc := t.AgentDescription()
			if notes != "" {
				desc += "\n\nThe server also checks: " + notes + "."
			}
			list = append(list, openAITool{Type: "function", Function: openAIFunction{
				Name: t.Name, Description: desc, Parameters: params, Strict: true}})
		}
		doc = list
	case ExportAnthropic:
		list := make([]anthropicTool, 0, len(r.sorted))
		for _, t := range r.sorted {
			list = append(list, anthropicTool{Name: t.Name, Description: t.AgentDescription(), InputSchema: t.InputSchema()})
		}
		doc = list
	default:
		return nil, models.Errorf(models.EInvalidRequest, "unknown format %q; use countersign, openai or anthropic", format)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("registry: export: %w", err)
	}
	return buf.Bytes(), nil
}

type exportTool struct {
	Name          string            `json:"name"`
	Title         string            `json:"title"`
	Description   string            `json:"description"`
	SideEffect    models.SideEffect `json:"side_effect"`
	PolicyVersion string            `json:"policy_version"`
	Resource      exportResource    `json:"resource"`
	InputSchema   json.RawMessage   `json:"input_schema"`
	Tiers         []exportTier      `json:"tiers"`
}

type exportResource struct {
	Field string `json:"field"`
	Batch bool   `json:"batch"`
}

type exportTier struct {
	Name              string              `json:"name"`
	When              *string             `json:"when"`
	Confirmation      models.Confirmation `json:"confirmation"`
	Quorum            int                 `json:"quorum"`
	TTLSeconds        int64               `json:"ttl_seconds"`
	AllowSelfApproval bool                `json:"allow_self_approval"`
}

func exportCountersign(t *Tool) exportTool {
	out := exportTool{
		Name: t.Name, Title: t.Title, Description: t.AgentDescription(), SideEffect: t.SideEffect,
		PolicyVersion: t.PolicyVersion, Resource: exportResource{Field: t.ResourceField, Batch: t.Batch},
		InputSchema: t.InputSchema(),
	}
	for _, r := range t.Tiers() {
		et := exportTier{Name: r.Tier.Name, Confirmation: r.Tier.Confirmation, Quorum: r.Tier.Quorum,
			TTLSeconds: int64(r.Tier.TTL / time.Second), AllowSelfApproval: r.Tier.AllowSelfApproval}
		if r.When != "" {
			w := r.When
			et.When = &w
		}
		out.Tiers = append(out.Tiers, et)
	}
	return out
}

type openAITool struct {
	Type     string         `json:"type"`
	Function openAIFunction `json:"function"`
}

type openAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// openAIKeywords are the JSON Schema keywords OpenAI's strict mode accepts.
// Any other keyword is taken out of the exported schema and named in the
// description instead; the server still enforces it when the call arrives.
// Three are rewritten rather than taken out: definitions becomes $defs (its
// $refs with it), oneOf becomes anyOf (strict mode has no oneOf; countersign
// still holds calls to exactly one alternative), and a format outside
// openAIFormats moves to the description like any other keyword.
var openAIKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true, "$ref": true, "$defs": true,
	"description": true, "title": true, "pattern": true, "format": true,
	"multipleOf": true, "minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"minItems": true, "maxItems": true,
}

// openAIFormats are the string formats strict mode supports.
var openAIFormats = map[string]bool{
	"date-time": true, "time": true, "date": true, "duration": true, "email": true,
	"hostname": true, "ipv4": true, "ipv6": true, "uuid": true,
}

// openAIParameters rewrites a strict schema for OpenAI's strict mode,
// keeping the declared key order, and describes what it took out. A schema
// it cannot express (a value schema left with no type, say one given by
// allOf alone) is an *unexpressible naming the keyword, rather than an
// export strict mode refuses or reads as "any value".
func openAIParameters(schema json.RawMessage) (json.RawMessage, string, error) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	root, err := decodeOrdered(dec)
	if err != nil {
		return nil, "", err
	}
	st := &stripper{}
	stripped := st.strip(root, "", "")
	if st.err != nil {
		return nil, "", st.err
	}
	b, err := json.Marshal(stripped)
	if err != nil {
		return nil, "", err
	}
	return b, strings.Join(st.notes, "; "), nil
}

// stripper rewrites a schema for strict mode, collecting the notes of what
// it took out and the first schema it cannot express.
type stripper struct {
	notes []string
	err   error
}

// unexpressible is a schema strict mode cannot express.
type unexpressible struct{ reason string }

func (e *unexpressible) Error() string { return e.reason }

func (st *stripper) note(path, keyword string, val any) {
	b, _ := json.Marshal(val)
	st.notes = append(st.notes, fmt.Sprintf("%s %s %s", orArguments(path), keyword, b))
}

func (st *stripper) refuse(ptr, format string, args ...any) {
	if st.err == nil {
		where := ptr
		if where == "" {
			where = "the root"
		}
		st.err = &unexpressible{fmt.Sprintf("the schema at %s: %s", where, fmt.Sprintf(format, args...))}
	}
}

// strip removes keywords outside openAIKeywords from every schema object,
// recording each as "PATH KEYWORD VALUE"; ptr is the JSON pointer of v in
// the registry's schema, for refusals.
func (st *stripper) strip(v any, path, ptr string) any {
	obj, ok := v.(*orderedObject)
	if !ok {
		return v
	}
	out := &orderedObject{}
	hasDefs := obj.has("$defs")
	for i, k := range obj.keys {
		val := obj.vals[i]
		switch {
		case k == "properties" || k == "$defs" || k == "definitions":
			sub, ok := val.(*orderedObject)
			if !ok {
				out.set(k, val)
				continue
			}
			if k == "definitions" {
				if hasDefs {
					st.refuse(ptr, "both $defs and definitions; keep one")
					continue
				}
				k = "$defs"
			}
			props := &orderedObject{}
			for j, name := range sub.keys {
				sp := joinPath(path, name)
				if k == "$defs" {
					sp = joinPath(path, "$defs."+name)
				}
				props.set(name, st.strip(sub.vals[j], sp, ptr+"/"+obj.keys[i]+"/"+escapePointer(name)))
			}
			out.set(k, props)
		case k == "items":
			out.set(k, st.strip(val, path+"[]", ptr+"/items"))
		case k == "anyOf" || k == "oneOf":
			if k == "oneOf" {
				if obj.has("anyOf") {
					st.refuse(ptr, "both anyOf and oneOf")
					continue
				}
				st.notes = append(st.notes, fmt.Sprintf("%s matches exactly one of its alternatives", orArguments(path)))
			}
			if list, ok := val.([]any); ok {
				alts := make([]any, len(list))
				for j, s := range list {
					alts[j] = st.strip(s, path, ptr+"/"+k+"/"+strconv.Itoa(j))
				}
				val = alts
			}
			out.set("anyOf", val)
		case k == "$ref":
			if ref, ok := val.(string); ok && strings.HasPrefix(ref, "#/definitions/") {
				val = "#/$defs/" + strings.TrimPrefix(ref, "#/definitions/")
			}
			out.set(k, val)
		case k == "format":
			if f, ok := val.(string); ok && openAIFormats[f] {
				out.set(k, val)
			} else {
				st.note(path, k, val)
			}
		case openAIKeywords[k]:
			out.set(k, val)
		case k == "$schema":
			// Not a constraint; OpenAI refuses it.
		default:
			st.note(path, k, val)
		}
	}
	if !typed(out) {
		var gone []string
		for _, k := range obj.keys {
			if !out.has(k) && k != "$schema" && k != "description" && k != "title" {
				gone = append(gone, k)
			}
		}
		if len(gone) > 0 {
			st.refuse(ptr, "without %s nothing says its type; give it a type (or anyOf)", strings.Join(gone, ", "))
		} else {
			st.refuse(ptr, "a schema needs a type (or anyOf, $ref, enum or const)")
		}
	}
	return out
}

// typed reports whether a schema says what values it takes, as strict
// mode requires of every schema.
func typed(o *orderedObject) bool {
	for _, k := range []string{"type", "anyOf", "$ref", "enum", "const"} {
		if o.has(k) {
			return true
		}
	}
	return false
}

func orArguments(path string) string {
	if path == "" {
		return "the arguments"
	}
	return path
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// orderedObject is a JSON object that keeps its key order.
type orderedObject struct {
	keys []string
	vals []any
}

func (o *orderedObject) has(k string) bool { return slices.Contains(o.keys, k) }

func (o *orderedObject) set(k string, v any) {
	o.keys = append(o.keys, k)
	o.vals = append(o.vals, v)
}

// MarshalJSON writes the members in their order.
func (o *orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(o.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeOrdered reads one JSON value, objects as *orderedObject.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch d := tok.(type) {
	case json.Delim:
		switch d {
		case '{':
			obj := &orderedObject{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				obj.set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return obj, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected %v", d)
	default:
		return tok, nil
	}
}
