package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// exportRegistries are every registry file shipped with the project.
func exportRegistries(t *testing.T) map[string]*Registry {
	t.Helper()
	ex, err := LoadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*Registry{"demo": Demo(), "example": ex}
}

// walkStrict checks the strict function-calling rules at every depth of a
// schema: every object schema forbids additional properties and requires
// every property it declares, so an optional value can only be expressed as
// a nullable type. It returns one line per breach, each with its pointer.
func walkStrict(s any, ptr string) []string {
	m, ok := s.(map[string]any)
	if !ok {
		return []string{ptr + ": not a schema object"}
	}
	var bad []string
	types := map[string]bool{}
	switch tv := m["type"].(type) {
	case string:
		types[tv] = true
	case []any:
		for _, x := range tv {
			types[fmt.Sprint(x)] = true
		}
	}
	props, hasProps := m["properties"].(map[string]any)
	if types["object"] || hasProps {
		if ap, ok := m["additionalProperties"].(bool); !ok || ap {
			bad = append(bad, ptr+"/additionalProperties: must be false")
		}
		req := map[string]bool{}
		list, _ := m["required"].([]any)
		for _, r := range list {
			req[fmt.Sprint(r)] = true
		}
		for name := range props {
			if !req[name] {
				bad = append(bad, ptr+"/properties/"+name+": not required")
			}
		}
		if len(req) != len(props) {
			bad = append(bad, ptr+"/required: names something that is not a property")
		}
	}
	for name, sub := range props {
		bad = append(bad, walkStrict(sub, ptr+"/properties/"+name)...)
	}
	if defs, ok := m["$defs"].(map[string]any); ok {
		for name, sub := range defs {
			bad = append(bad, walkStrict(sub, ptr+"/$defs/"+name)...)
		}
	}
	if items, ok := m["items"]; ok {
		bad = append(bad, walkStrict(items, ptr+"/items")...)
	}
	for _, kw := range []string{"anyOf", "oneOf", "allOf", "prefixItems"} {
		if list, ok := m[kw].([]any); ok {
			for i, sub := range list {
				bad = append(bad, walkStrict(sub, ptr+"/"+kw+"/"+strconv.Itoa(i))...)
			}
		}
	}
	return bad
}

// keywordsOutside lists keywords at any depth that are not in allowed.
func keywordsOutside(s any, ptr string, allowed map[string]bool) []string {
	m, ok := s.(map[string]any)
	if !ok {
		return nil
	}
	var bad []string
	for k, v := range m {
		switch k {
		case "properties", "$defs":
			sub, _ := v.(map[string]any)
			for name, ps := range sub {
				bad = append(bad, keywordsOutside(ps, ptr+"/"+k+"/"+name, allowed)...)
			}
			continue
		case "items":
			bad = append(bad, keywordsOutside(v, ptr+"/items", allowed)...)
		case "anyOf":
			list, _ := v.([]any)
			for i, sub := range list {
				bad = append(bad, keywordsOutside(sub, ptr+"/anyOf/"+strconv.Itoa(i), allowed)...)
			}
		}
		if !allowed[k] {
			bad = append(bad, ptr+"/"+k)
		}
	}
	return bad
}

func TestEveryExportIsStrict(t *testing.T) {
	for regName, reg := range exportRegistries(t) {
		tools := reg.Tools()
		for _, format := range ExportFormats {
			t.Run(regName+"/"+string(format), func(t *testing.T) {
				raw, err := reg.Export(format)
				if err != nil {
					t.Fatal(err)
				}
				type entry struct {
					name, desc string
					schema     any
				}
				var entries []entry
				switch format {
				case ExportCountersign:
					var doc struct {
						Tools []struct {
							Name        string `json:"name"`
							Description string `json:"description"`
							SideEffect  string `json:"side_effect"`
							InputSchema any    `json:"input_schema"`
							Tiers       []struct {
								Name string  `json:"name"`
								When *string `json:"when"`
							} `json:"tiers"`
						} `json:"tools"`
					}
					mustUnmarshal(t, raw, &doc)
					for i, x := range doc.Tools {
						entries = append(entries, entry{x.Name, x.Description, x.InputSchema})
						if got, want := models.SideEffect(x.SideEffect), tools[i].SideEffect; got != want {
							t.Errorf("%s: side_effect %q, want %q", x.Name, got, want)
						}
						if n := len(x.Tiers); n == 0 || x.Tiers[n-1].When != nil {
							t.Errorf("%s: tiers %+v: want the catch-all last", x.Name, x.Tiers)
						}
					}
				case ExportOpenAI:
					var doc []struct {
						Type     string `json:"type"`
						Function struct {
							Name        string `json:"name"`
							Description string `json:"description"`
							Parameters  any    `json:"parameters"`
							Strict      *bool  `json:"strict"`
						} `json:"function"`
					}
					mustUnmarshal(t, raw, &doc)
					for _, x := range doc {
						f := x.Function
						if x.Type != "function" || f.Strict == nil || !*f.Strict {
							t.Errorf("%s: type %q strict %v, want a strict function", f.Name, x.Type, f.Strict)
						}
						if len(f.Name) > 64 {
							t.Errorf("%s: name longer than 64 characters", f.Name)
						}
						if extra := keywordsOutside(f.Parameters, "", openAIKeywords); len(extra) > 0 {
							t.Errorf("%s: keywords strict mode refuses: %v", f.Name, extra)
						}
						entries = append(entries, entry{f.Name, f.Description, f.Parameters})
					}
				case ExportAnthropic:
					var doc []struct {
						Name        string `json:"name"`
						Description string `json:"description"`
						InputSchema any    `json:"input_schema"`
					}
					mustUnmarshal(t, raw, &doc)
					for _, x := range doc {
						entries = append(entries, entry{x.Name, x.Description, x.InputSchema})
					}
				}
				if len(entries) != len(tools) {
					t.Fatalf("%d tools exported, registry has %d", len(entries), len(tools))
				}
				for i, e := range entries {
					if e.name != tools[i].Name {
						t.Errorf("tool %d is %q, want %q", i, e.name, tools[i].Name)
					}
					if !strings.Contains(e.desc, ConfirmationNote) {
						t.Errorf("%s: the description does not say the call only asks for a confirmation", e.name)
					}
					if root, _ := e.schema.(map[string]any); root["type"] != "object" {
						t.Errorf("%s: root schema type %v, want object", e.name, root["type"])
					}
					if bad := walkStrict(e.schema, ""); len(bad) > 0 {
						t.Errorf("%s: not strict:\n%s", e.name, strings.Join(bad, "\n"))
					}
				}
			})
		}
	}
}

// The walker itself must catch what it is there to catch.
func TestWalkStrictCatchesLaxSchemas(t *testing.T) {
	for name, schema := range map[string]string{
		"open object":       `{"type":"object","properties":{},"required":[]}`,
		"optional property": `{"type":"object","properties":{"a":{"type":"string"}},"required":[],"additionalProperties":false}`,
		"nested open":       `{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}},"required":["b"]}},"required":["a"],"additionalProperties":false}`,
		"array item open":   `{"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"b":{"type":"integer"}},"required":[],"additionalProperties":false}}},"required":["a"],"additionalProperties":false}`,
	} {
		var s any
		mustUnmarshal(t, []byte(schema), &s)
		if bad := walkStrict(s, ""); len(bad) == 0 {
			t.Errorf("%s: walker found nothing", name)
		}
	}
}

func TestOpenAIExportMovesUnsupportedKeywordsToTheDescription(t *testing.T) {
	raw, err := Demo().Export(ExportOpenAI)
	if err != nil {
		t.Fatal(err)
	}
	var doc []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	mustUnmarshal(t, raw, &doc)
	i := slices.IndexFunc(doc, func(d struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}) bool {
		return d.Function.Name == "refund_order"
	})
	if i < 0 {
		t.Fatal("refund_order not exported")
	}
	f := doc[i].Function
	if strings.Contains(string(f.Parameters), "maxLength") {
		t.Errorf("parameters keep maxLength: %s", f.Parameters)
	}
	if !strings.Contains(f.Description, "reason maxLength 500") {
		t.Errorf("description does not name the constraint it took out:\n%s", f.Description)
	}
	// Property order is the registry's, which decides the order a model
	// writes the arguments in.
	if a, b := strings.Index(string(f.Parameters), `"order_id"`), strings.Index(string(f.Parameters), `"amount_minor"`); a < 0 || b < a {
		t.Errorf("property order lost: %s", f.Parameters)
	}
}

func TestExportUnknownFormat(t *testing.T) {
	if _, err := ParseExportFormat("gemini"); !models.IsCode(err, models.EInvalidRequest) {
		t.Errorf("ParseExportFormat(gemini) = %v, want invalid_request", err)
	}
	if _, err := Demo().Export("gemini"); !models.IsCode(err, models.EInvalidRequest) {
		t.Errorf("Export(gemini) = %v, want invalid_request", err)
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}

// combinators is a registry the server accepts whose schema uses what
// strict mode lacks or spells otherwise: definitions, oneOf, a format it
// does not know.
const combinators = `
tools:
  - name: tag_order
    title: Tag an order
    description: Tags an order.
    side_effect: reversible
    policy_version: t-1
    adapter: {kind: demo_ledger}
    resource: order_id
    schema:
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      definitions:
        tag: {type: string, minLength: 1}
      properties:
        order_id: {type: string, pattern: "^ord_[0-9]{4}$"}
        homepage: {type: string, format: uri}
        seen: {type: string, format: date-time}
        tags:
          type: array
          items: {$ref: "#/definitions/tag"}
          uniqueItems: true
        level:
          oneOf:
            - {type: integer, minimum: 1}
            - {type: integer, maximum: -1}
      required: [order_id, homepage, seen, tags, level]
      additionalProperties: false
    display:
      order_id: {label: Order, kind: resource}
      homepage: {label: Home}
      seen: {label: Seen}
      tags: {label: Tags, kind: list}
      level: {label: Level}
    risk:
      - tier: low
        confirmation: click
        ttl: 300s
`

// untypedSchemas lists the value schemas at any depth that say nothing of
// their type, formats strict mode does not support, and $refs that point
// at nothing in the document.
func untypedSchemas(root, s any, ptr string) []string {
	m, ok := s.(map[string]any)
	if !ok {
		return nil
	}
	var bad []string
	if _, t := m["type"]; !t && m["anyOf"] == nil && m["$ref"] == nil && m["enum"] == nil && m["const"] == nil {
		bad = append(bad, ptr+": no type")
	}
	if f, ok := m["format"].(string); ok && !openAIFormats[f] {
		bad = append(bad, ptr+": format "+f)
	}
	if ref, ok := m["$ref"].(string); ok {
		var at any = root
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#"), "/")[1:] {
			next, _ := at.(map[string]any)
			at = next[tok]
		}
		if at == nil {
			bad = append(bad, ptr+": dangling $ref "+ref)
		}
	}
	for _, kw := range []string{"properties", "$defs"} {
		sub, _ := m[kw].(map[string]any)
		for name, ps := range sub {
			bad = append(bad, untypedSchemas(root, ps, ptr+"/"+kw+"/"+name)...)
		}
	}
	if items, ok := m["items"]; ok {
		bad = append(bad, untypedSchemas(root, items, ptr+"/items")...)
	}
	list, _ := m["anyOf"].([]any)
	for i, sub := range list {
		bad = append(bad, untypedSchemas(root, sub, ptr+"/anyOf/"+strconv.Itoa(i))...)
	}
	return bad
}

// The OpenAI export rewrites what strict mode spells otherwise: every value
// schema keeps a type, every $ref its target, and what the rewrite loosens
// is named in the description.
func TestOpenAIExportRewritesCombinators(t *testing.T) {
	reg, err := Parse([]byte(combinators))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := reg.Export(ExportOpenAI)
	if err != nil {
		t.Fatal(err)
	}
	var doc []struct {
		Function struct {
			Description string `json:"description"`
			Parameters  any    `json:"parameters"`
		} `json:"function"`
	}
	mustUnmarshal(t, raw, &doc)
	f := doc[0].Function
	if bad := untypedSchemas(f.Parameters, f.Parameters, ""); len(bad) > 0 {
		t.Errorf("not strict:\n%s\n%s", strings.Join(bad, "\n"), raw)
	}
	if extra := keywordsOutside(f.Parameters, "", openAIKeywords); len(extra) > 0 {
		t.Errorf("keywords strict mode refuses: %v", extra)
	}
	if bad := walkStrict(f.Parameters, ""); len(bad) > 0 {
		t.Errorf("not strict:\n%s", strings.Join(bad, "\n"))
	}
	seen := f.Parameters.(map[string]any)["properties"].(map[string]any)["seen"].(map[string]any)
	if seen["format"] != "date-time" {
		t.Errorf("a supported format was taken out: %v", seen)
	}
	for _, want := range []string{`homepage format "uri"`, "level matches exactly one", "minLength 1", "uniqueItems"} {
		if !strings.Contains(f.Description, want) {
			t.Errorf("description does not say %q:\n%s", want, f.Description)
		}
	}
}

// A value schema strict mode cannot express (its type given by allOf
// alone) is refused, naming the tool and the keyword, rather than exported
// as "any value".
func TestOpenAIExportRefusesWhatItCannotExpress(t *testing.T) {
	src := strings.Replace(combinators, `        level:
          oneOf:`, `        level:
          allOf:`, 1)
	reg, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.Export(ExportOpenAI)
	var me *models.Error
	if !errors.As(err, &me) || me.Code != models.EInvalidRequest || !strings.Contains(me.Message, "tag_order") ||
		!strings.Contains(me.Message, "allOf") || !strings.Contains(me.Message, "/properties/level") {
		t.Errorf("Export(openai) = %v, want invalid_request naming tag_order, /properties/level and allOf", err)
	}
	for _, format := range []ExportFormat{ExportCountersign, ExportAnthropic} {
		if _, err := reg.Export(format); err != nil {
			t.Errorf("Export(%s): %v", format, err)
		}
	}
}
