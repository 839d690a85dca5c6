package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/countersign/countersign/internal/spell"
)

// propInfo is what the registry needs to know about one top-level property
// of a tool's schema to check the rest of the tool's declaration.
type propInfo struct {
	schema    map[string]any
	types     map[string]bool // declared JSON types; nil when "type" is absent
	itemTypes map[string]bool // for arrays: the declared types of "items"
}

// schemaTypes returns the set of JSON types a schema declares with "type", or
// nil when it declares none.
func schemaTypes(s map[string]any) map[string]bool {
	switch t := s["type"].(type) {
	case string:
		return map[string]bool{t: true}
	case []any:
		set := map[string]bool{}
		for _, x := range t {
			if name, ok := x.(string); ok {
				set[name] = true
			}
		}
		return set
	}
	return nil
}

func typeList(types map[string]bool) string {
	names := make([]string, 0, len(types))
	for t := range types {
		names = append(names, t)
	}
	sort.Strings(names)
	return strings.Join(names, "|")
}

// maxYAMLDepth bounds nesting (and alias expansion) in a schema.
const maxYAMLDepth = 64

// yamlToJSON converts a YAML node to the value encoding/json would decode
// from the equivalent JSON text with UseNumber: maps, slices, strings, bools,
// nil and json.Number. Keys must be unique; tags without a JSON equivalent
// are refused.
func yamlToJSON(n *yaml.Node, ptr string, depth int) (any, error) {
	if depth > maxYAMLDepth {
		return nil, fmt.Errorf("%s: nested too deeply", ptrOrRoot(ptr))
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return yamlToJSON(n.Content[0], ptr, depth+1)
	case yaml.AliasNode:
		return yamlToJSON(n.Alias, ptr, depth+1)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, fmt.Errorf("%s: line %d: keys must be plain strings", ptrOrRoot(ptr), k.Line)
			}
			if _, dup := m[k.Value]; dup {
				return nil, fmt.Errorf("%s: line %d: key %q appears twice", ptrOrRoot(ptr), k.Line, k.Value)
			}
			val, err := yamlToJSON(v, ptr+"/"+escapePointer(k.Value), depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			val, err := yamlToJSON(c, ptr+"/"+strconv.Itoa(i), depth+1)
			if err != nil {
				return nil, err
			}
			s = append(s, val)
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("%s: line %d: %w", ptrOrRoot(ptr), n.Line, err)
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				return nil, fmt.Errorf("%s: line %d: integer %s out of range", ptrOrRoot(ptr), n.Line, n.Value)
			}
			return json.Number(strconv.FormatInt(i, 10)), nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("%s: line %d: %s is not a finite number", ptrOrRoot(ptr), n.Line, n.Value)
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
		case "!!str", "!!timestamp":
			return n.Value, nil
		}
		return nil, fmt.Errorf("%s: line %d: YAML tag %s has no JSON equivalent", ptrOrRoot(ptr), n.Line, n.ShortTag())
	}
	return nil, fmt.Errorf("%s: unsupported YAML node", ptrOrRoot(ptr))
}

func ptrOrRoot(ptr string) string {
	if ptr == "" {
		return "/"
	}
	return ptr
}

// escapePointer escapes one JSON pointer reference token (RFC 6901).
func escapePointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// orderedJSON encodes a YAML node (already checked by yamlToJSON) as
// compact JSON, keeping the order of mapping keys, so that agents see the
// properties in the order the file declares them.
func orderedJSON(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	var enc func(n *yaml.Node, depth int) error
	enc = func(n *yaml.Node, depth int) error {
		if depth > maxYAMLDepth {
			return errors.New("nested too deeply")
		}
		switch n.Kind {
		case yaml.DocumentNode:
			if len(n.Content) == 0 {
				b.WriteString("null")
				return nil
			}
			return enc(n.Content[0], depth+1)
		case yaml.AliasNode:
			return enc(n.Alias, depth+1)
		case yaml.MappingNode:
			b.WriteByte('{')
			for i := 0; i+1 < len(n.Content); i += 2 {
				if i > 0 {
					b.WriteByte(',')
				}
				k, err := json.Marshal(n.Content[i].Value)
				if err != nil {
					return err
				}
				b.Write(k)
				b.WriteByte(':')
				if err := enc(n.Content[i+1], depth+1); err != nil {
					return err
				}
			}
			b.WriteByte('}')
		case yaml.SequenceNode:
			b.WriteByte('[')
			for i, c := range n.Content {
				if i > 0 {
					b.WriteByte(',')
				}
				if err := enc(c, depth+1); err != nil {
					return err
				}
			}
			b.WriteByte(']')
		default:
			v, err := yamlToJSON(n, "", depth)
			if err != nil {
				return err
			}
			s, err := json.Marshal(v)
			if err != nil {
				return err
			}
			b.Write(s)
		}
		return nil
	}
	if err := enc(n, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// propertyOrder returns the keys of the root schema's "properties" mapping in
// the order the YAML file lists them: the order reviewers see the arguments.
func propertyOrder(n *yaml.Node) []string {
	for n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return nil
		}
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "properties" {
			continue
		}
		props := n.Content[i+1]
		for props.Kind == yaml.AliasNode {
			props = props.Alias
		}
		var names []string
		for j := 0; j+1 < len(props.Content); j += 2 {
			names = append(names, props.Content[j].Value)
		}
		return names
	}
	return nil
}

// draft202012 is the only meta-schema a tool schema may name.
const draft202012 = "https://json-schema.org/draft/2020-12/schema"

// checkStrict reports every place where a schema breaks the strict
// function-calling rules (SPEC section 2): every object schema, at any depth,
// has additionalProperties: false and lists every property in required, so
// that an argument is either declared or refused and never silently optional.
// report receives a JSON pointer into the schema and a message.
func checkStrict(s any, ptr string, report func(ptr, msg string)) {
	m, ok := s.(map[string]any)
	if !ok {
		if _, isBool := s.(bool); isBool {
			report(ptrOrRoot(ptr), "boolean schemas are not allowed; write the schema out")
		} else {
			report(ptrOrRoot(ptr), "a schema must be an object")
		}
		return
	}
	types := schemaTypes(m)
	_, hasProps := m["properties"]
	if types["object"] || hasProps {
		if ap, ok := m["additionalProperties"].(bool); !ok || ap {
			report(ptr+"/additionalProperties", "additionalProperties must be false")
		}
		if _, ok := m["patternProperties"]; ok {
			report(ptr+"/patternProperties", "patternProperties is not allowed in a strict schema")
		}
		props, _ := m["properties"].(map[string]any)
		if _, ok := m["properties"]; ok && props == nil {
			report(ptr+"/properties", "properties must be a mapping")
		}
		required := map[string]bool{}
		if r, ok := m["required"]; ok {
			list, ok := r.([]any)
			if !ok {
				report(ptr+"/required", "required must be a list of property names")
			}
			for _, x := range list {
				name, ok := x.(string)
				if !ok {
					report(ptr+"/required", "required must be a list of property names")
					continue
				}
				required[name] = true
				if _, ok := props[name]; !ok {
					report(ptr+"/required", fmt.Sprintf("%q is required but not a property", name))
				}
			}
		}
		for _, name := range sortedKeys(props) {
			if !required[name] {
				report(ptr+"/properties/"+escapePointer(name), fmt.Sprintf("property %q must be listed in required (express optional values with a type that includes null)", name))
			}
		}
	}
	// Recurse into every keyword that holds subschemas.
	for _, kw := range []string{"properties", "$defs", "definitions", "dependentSchemas"} {
		if sub, ok := m[kw].(map[string]any); ok {
			for _, name := range sortedKeys(sub) {
				checkStrict(sub[name], ptr+"/"+kw+"/"+escapePointer(name), report)
			}
		}
	}
	for _, kw := range []string{"prefixItems", "allOf", "anyOf", "oneOf"} {
		if sub, ok := m[kw].([]any); ok {
			for i, s := range sub {
				checkStrict(s, ptr+"/"+kw+"/"+strconv.Itoa(i), report)
			}
		}
	}
	for _, kw := range []string{"items", "contains", "not", "if", "then", "else", "unevaluatedItems", "propertyNames"} {
		if sub, ok := m[kw]; ok {
			checkStrict(sub, ptr+"/"+kw, report)
		}
	}
	if ap, ok := m["additionalProperties"].(map[string]any); ok {
		checkStrict(ap, ptr+"/additionalProperties", report)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// refuseLoader keeps schema compilation inside the registry file: a $ref to
// anything but the schema itself or the standard meta-schemas fails instead
// of reading the disk or the network.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external reference %q is not allowed; put shared definitions under $defs", url)
}

// compileSchema compiles a tool schema for validation: draft 2020-12, with
// "format" asserted (not merely annotated) and Go (RE2) regular expressions.
func compileSchema(tool string, doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	url := "https://countersign.invalid/tools/" + tool + ".schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// schemaKeywords are the keywords of JSON Schema draft 2020-12 (every
// vocabulary), with the earlier drafts' definitions and dependencies, which
// the validator also reads.
var schemaKeywords = map[string]bool{
	"$schema": true, "$id": true, "$ref": true, "$anchor": true, "$dynamicRef": true,
	"$dynamicAnchor": true, "$vocabulary": true, "$comment": true, "$defs": true,
	"definitions": true, "dependencies": true,
	"prefixItems": true, "items": true, "contains": true, "additionalProperties": true,
	"properties": true, "patternProperties": true, "dependentSchemas": true,
	"propertyNames": true, "if": true, "then": true, "else": true, "allOf": true,
	"anyOf": true, "oneOf": true, "not": true,
	"unevaluatedItems": true, "unevaluatedProperties": true,
	"type": true, "const": true, "enum": true, "multipleOf": true, "maximum": true,
	"exclusiveMaximum": true, "minimum": true, "exclusiveMinimum": true,
	"maxLength": true, "minLength": true, "pattern": true, "maxItems": true,
	"minItems": true, "uniqueItems": true, "maxContains": true, "minContains": true,
	"maxProperties": true, "minProperties": true, "required": true,
	"dependentRequired": true, "format": true,
	"contentEncoding": true, "contentMediaType": true, "contentSchema": true,
	"title": true, "description": true, "default": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "examples": true,
}

// knownFormats are the formats the validator asserts (santhosh-tekuri/
// jsonschema: its built-in formats and regex). Any other format would be
// an annotation only, so a typo would silently turn a check off.
var knownFormats = []string{
	"date", "date-time", "duration", "email", "hostname", "ipv4", "ipv6",
	"iri", "iri-reference", "json-pointer", "period", "regex",
	"relative-json-pointer", "semver", "time", "uri", "uri-reference",
	"uri-template", "uuid",
}

// checkKeywords reports, in every subschema, a format the validator does
// not assert and a keyword that is a misspelling of a JSON Schema keyword
// ("minimun", "maxLenght", "Pattern"): either would load as a mere
// annotation and leave the value unchecked. Other unknown keywords are
// annotations, which JSON Schema allows (x-… extensions, notes).
func checkKeywords(s any, ptr string, report func(ptr, msg string)) {
	m, ok := s.(map[string]any)
	if !ok {
		return
	}
	for _, k := range sortedKeys(m) {
		if schemaKeywords[k] {
			continue
		}
		if kw := misspelledKeyword(k); kw != "" {
			report(ptr+"/"+escapePointer(k), fmt.Sprintf("unknown keyword %q; did you mean %q?", k, kw))
		}
	}
	if f, ok := m["format"]; ok {
		name, _ := f.(string)
		if !slices.Contains(knownFormats, name) {
			report(ptr+"/format", fmt.Sprintf("unknown format %v; the validator asserts only %s", jsonQuote(f), strings.Join(knownFormats, ", ")))
		}
	}
	for _, kw := range []string{"properties", "$defs", "definitions", "dependentSchemas"} {
		if sub, ok := m[kw].(map[string]any); ok {
			for _, name := range sortedKeys(sub) {
				checkKeywords(sub[name], ptr+"/"+kw+"/"+escapePointer(name), report)
			}
		}
	}
	for _, kw := range []string{"prefixItems", "allOf", "anyOf", "oneOf"} {
		if sub, ok := m[kw].([]any); ok {
			for i, s := range sub {
				checkKeywords(s, ptr+"/"+kw+"/"+strconv.Itoa(i), report)
			}
		}
	}
	for _, kw := range []string{"items", "contains", "not", "if", "then", "else", "unevaluatedItems",
		"unevaluatedProperties", "propertyNames", "additionalProperties", "contentSchema"} {
		if sub, ok := m[kw]; ok {
			checkKeywords(sub, ptr+"/"+kw, report)
		}
	}
}

func jsonQuote(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// misspelledKeyword returns the JSON Schema keyword k is a likely
// misspelling of, or "": the same keyword in other case, or one edit
// (insertion, deletion, substitution, transposition) from a keyword of five
// letters or more, two from one of eight or more. Shorter keywords ("not",
// "if", "enum") would match too many ordinary annotation names.
func misspelledKeyword(k string) string {
	best, bestDist := "", 3
	for _, kw := range sortedKeys(schemaKeywords) {
		if strings.EqualFold(k, kw) {
			return kw
		}
		limit := 0
		switch {
		case len(kw) >= 8:
			limit = 2
		case len(kw) >= 5:
			limit = 1
		}
		if d := spell.Distance(strings.ToLower(k), strings.ToLower(kw)); d <= limit && d < bestDist {
			best, bestDist = kw, d
		}
	}
	return best
}
