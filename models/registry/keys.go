package registry

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unknownKeys reports every mapping key of the registry file that the format
// does not know, outside a schema (which is JSON Schema, checked on its own)
// and resource (checked by buildResource). It walks the YAML node tree
// against the yaml tags of fileDoc, so that one pass names every typo with its
// line, its tool and its place in the tool, instead of stopping at the first
// or naming Go types.
func unknownKeys(root *yaml.Node) []error {
	var errs []error
	for root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil
	}
	fileType := reflect.TypeOf(fileDoc{})
	walkKeys(root, fileType, "", func(line int, where, key string, known []string) {
		errs = append(errs, fmt.Errorf("line %d: unknown key %q%s (known: %s)", line, key, where, strings.Join(known, ", ")))
	})
	for i, n := range items(mappingValue(root, "tools")) {
		tool := fmt.Sprintf("tools[%d]", i)
		if name := mappingValue(n, "name"); name != nil && name.Kind == yaml.ScalarNode && name.Value != "" {
			tool = fmt.Sprintf("tool %q", name.Value)
		}
		walkKeys(n, reflect.TypeOf(toolDoc{}), "", func(line int, where, key string, known []string) {
			if where == "" {
				where = " in the tool"
			}
			errs = append(errs, fmt.Errorf("line %d: %s: unknown key %q%s (known: %s)", line, tool, key, where, strings.Join(known, ", ")))
		})
	}
	return errs
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxYAMLDepth; i++ {
		n = n.Alias
	}
	return n
}

// mappingValue returns the value of key in a mapping node, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return deref(n.Content[i+1])
		}
	}
	return nil
}

// items returns the items of a sequence node, nil for anything else.
func items(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

var yamlNodeType = reflect.TypeOf(yaml.Node{})

// walkKeys checks the keys of n against the yaml tags of t, recursing into
// nested structs, slices and maps. where is the place inside the tool, as
// the tool's other messages name it ("adapter", "risk[0]", "display: note").
// Sub-trees the decoder keeps as yaml.Node (schema, resource) are not walked
// here; the top-level tools list is walked by the caller, tool by tool.
func walkKeys(n *yaml.Node, t reflect.Type, where string, report func(line int, where, key string, known []string)) {
	n = deref(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n == nil || t == yamlNodeType {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		fields := map[string]reflect.Type{}
		var known []string
		for i := 0; i < t.NumField(); i++ {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			fields[tag] = t.Field(i).Type
			known = append(known, tag)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if isMerge(k) {
				walkMerged(n.Content[i+1], t, where, report)
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				in := ""
				if where != "" {
					in = " in " + where
				}
				report(k.Line, in, k.Value, known)
				continue
			}
			if t == reflect.TypeOf(fileDoc{}) && k.Value == "tools" {
				continue // walked tool by tool
			}
			walkKeys(n.Content[i+1], ft, joinWhere(where, k.Value), report)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, c := range n.Content {
			walkKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", where, i), report)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if isMerge(n.Content[i]) {
				walkMerged(n.Content[i+1], t, where, report)
				continue
			}
			walkKeys(n.Content[i+1], t.Elem(), where+": "+n.Content[i].Value, report)
		}
	}
}

// isMerge reports whether k is YAML's merge key ("<<: *anchor").
func isMerge(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.Tag == "!!merge" }

// walkMerged checks the mappings a merge key brings in (one, or a list of
// them) as keys of the mapping holding it, of type t.
func walkMerged(v *yaml.Node, t reflect.Type, where string, report func(line int, where, key string, known []string)) {
	v = deref(v)
	if v != nil && v.Kind == yaml.SequenceNode {
		for _, m := range v.Content {
			walkKeys(m, t, where, report)
		}
		return
	}
	walkKeys(v, t, where, report)
}

func joinWhere(where, key string) string {
	if where == "" {
		return key
	}
	return where + " " + key
}

// typeErrorRE matches the YAML decoder's message for a value of the wrong
// kind: "line 5: cannot unmarshal !!str `note` into []string".
var typeErrorRE = regexp.MustCompile("^line ([0-9]+): cannot unmarshal !!([a-z]+)(?: `([^`]*)`)? into (.+)$")

// typeMessage says the decoder's msg in the file's own words: which tool
// and key, what kind of value stands there and what kind is needed, with
// no Go type names. A message it does not know is returned as it is.
func typeMessage(root *yaml.Node, msg string) string {
	m := typeErrorRE.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	got := map[string]string{"str": "a string", "int": "a whole number", "float": "a number", "bool": "true or false",
		"map": "a mapping", "seq": "a list", "null": "nothing", "timestamp": "a date"}[m[2]]
	if got == "" {
		got = "a value of another kind"
	}
	if m[3] != "" && (m[2] == "str" || m[2] == "int" || m[2] == "float" || m[2] == "bool") {
		got = fmt.Sprintf("%s (%q)", got, m[3])
	}
	want := "a value of another kind"
	switch gt := m[4]; {
	case strings.HasPrefix(gt, "[]"):
		want = "a list"
	case strings.HasPrefix(gt, "map["), strings.Contains(gt, "."):
		want = "a mapping"
	case strings.HasPrefix(gt, "int"), strings.HasPrefix(gt, "uint"):
		want = "a whole number"
	case strings.HasPrefix(gt, "float"):
		want = "a number"
	case gt == "bool":
		want = "true or false"
	case gt == "string":
		want = "a string"
	}
	place := keyAtLine(root, line, "!!"+m[2], m[3])
	if place == "" {
		return fmt.Sprintf("line %d: %s stands where %s is needed", line, got, want)
	}
	return fmt.Sprintf("line %d: %s must be %s, not %s", line, place, want, got)
}

// keyAtLine names the key whose value, of YAML tag tag (and text value when
// not ""), starts on line: `tool "x": key` for a key of a tool, the key
// alone at the top, "" when none does.
func keyAtLine(root *yaml.Node, line int, tag, value string) string {
	for root != nil && root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	var find func(n *yaml.Node, depth int) string
	find = func(n *yaml.Node, depth int) string {
		n = deref(n)
		if n == nil || depth > maxYAMLDepth {
			return ""
		}
		switch n.Kind {
		case yaml.MappingNode:
			// The deepest key whose value starts on line: a flow mapping
			// ("adapter: {timeout: [1]}") starts on its key's line too.
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k := find(n.Content[i+1], depth+1); k != "" {
					return n.Content[i].Value + " " + k
				}
				if v := deref(n.Content[i+1]); v != nil && v.Line == line && v.Tag == tag && (value == "" || v.Value == value) {
					return n.Content[i].Value
				}
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				if k := find(c, depth+1); k != "" {
					return k
				}
			}
		}
		return ""
	}
	for _, t := range items(mappingValue(root, "tools")) {
		if k := find(t, 0); k != "" {
			name := "tools[?]"
			if nm := mappingValue(t, "name"); nm != nil && nm.Value != "" {
				name = fmt.Sprintf("tool %q", nm.Value)
			}
			return name + ": " + k
		}
	}
	return find(root, 0)
}
