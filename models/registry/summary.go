package registry

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Summary is what a write does, in one line for a reviewer, and the words
// that name that consequence on the Approve button.
type Summary struct {
	// Line is the one-line summary: "Refund ¥500.00 CNY to order ord_2001 ·
	// original payment method".
	Line string
	// Approve is the Approve button's text: "Approve refund of ¥500.00 to
	// ord_2001".
	Approve string
}

type summaryTemplates struct {
	line, approve []summaryPart
}

// summaryPart is literal text, or a placeholder naming an argument (count:
// the length of an array argument instead of its display).
type summaryPart struct {
	text  string
	field string
	count bool
}

var placeholder = regexp.MustCompile(`\{([^{}]*)\}`)
var lenPlaceholder = regexp.MustCompile(`^len\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$`)

func buildSummary(t *Tool, d *summaryDoc, bad func(string, ...any)) {
	if d == nil {
		return
	}
	if strings.TrimSpace(d.Line) == "" {
		bad("summary: line is required when summary is given")
	}
	t.summary.line = parseSummary(t, "summary: line", d.Line, bad)
	t.summary.approve = parseSummary(t, "summary: approve", d.Approve, bad)
}

func parseSummary(t *Tool, where, src string, bad func(string, ...any)) []summaryPart {
	var parts []summaryPart
	rest := src
	for {
		loc := placeholder.FindStringSubmatchIndex(rest)
		if loc == nil {
			break
		}
		if loc[0] > 0 {
			parts = append(parts, summaryPart{text: rest[:loc[0]]})
		}
		name := strings.TrimSpace(rest[loc[2]:loc[3]])
		p := summaryPart{field: name}
		if m := lenPlaceholder.FindStringSubmatch(name); m != nil {
			p = summaryPart{field: m[1], count: true}
		}
		if spec, ok := t.display[p.field]; !ok {
			bad("%s: {%s} names no argument of the tool", where, name)
		} else if p.count && spec.kind != kindList {
			bad("%s: {%s} needs an argument displayed as a list", where, name)
		}
		parts = append(parts, p)
		rest = rest[loc[1]:]
	}
	if strings.ContainsAny(rest, "{}") {
		bad("%s: unbalanced brace in %q", where, src)
	}
	if rest != "" {
		parts = append(parts, summaryPart{text: rest})
	}
	return parts
}

// Summary renders the tool's summary line and Approve text for normalized
// arguments, in loc for date-times (UTC when nil). resource is the
// proposal's target as a person should read it when the tool declares no
// summary. Errors as Preview.
func (t *Tool) Summary(args json.RawMessage, resource string, loc *time.Location) (Summary, error) {
	if len(t.summary.line) == 0 {
		line := t.Title
		if resource != "" {
			line += " · " + resource
		}
		return Summary{Line: line, Approve: "Approve"}, nil
	}
	values, err := decodeStrict(args)
	if err != nil {
		return Summary{}, err
	}
	obj, ok := values.(map[string]any)
	if !ok {
		return Summary{}, fmt.Errorf("registry: arguments must be a JSON object")
	}
	render := func(parts []summaryPart) (string, error) {
		var b strings.Builder
		for _, p := range parts {
			if p.field == "" {
				b.WriteString(p.text)
				continue
			}
			v := obj[p.field]
			spec := t.display[p.field]
			switch {
			case p.count:
				list, _ := v.([]any)
				b.WriteString(strconv.Itoa(len(list)))
			case spec.kind == kindResource:
				b.WriteString(plainText(v))
			default:
				s, err := t.displayValue(p.field, spec, obj, "", loc)
				if err != nil {
					return "", err
				}
				b.WriteString(s)
			}
		}
		return strings.Join(strings.Fields(b.String()), " "), nil
	}
	var s Summary
	if s.Line, err = render(t.summary.line); err != nil {
		return Summary{}, err
	}
	s.Approve = "Approve"
	if len(t.summary.approve) > 0 {
		if s.Approve, err = render(t.summary.approve); err != nil {
			return Summary{}, err
		}
	}
	return s, nil
}
