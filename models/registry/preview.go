package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/models"
)

// nullDisplay is shown for a null value unless the display entry names one.
const nullDisplay = "—"

// listPreviewItems is how many elements a list display names.
const listPreviewItems = 10

// Preview renders normalized arguments (Prepared.Arguments) for a reviewer:
// one PreviewField per argument, in the order the schema declares the
// properties. Value is the machine value exactly as in args (raw JSON);
// Display is human text, for eyes only and never parsed back. resourceLabel
// is the business system's label of the target resource, shown by a
// resource display ("ord_1001 · Hangzhou Yunqi Rd 88"); loc is the
// reviewer's time zone for datetime displays (UTC when nil).
//
// It returns EInvalidRequest when args is not a JSON object, misses an
// argument or holds one the schema does not declare (a reviewer must see
// every value), and ESchemaViolation, with the field's pointer, when a value
// cannot be shown faithfully: money in a currency without a known exponent,
// a date-time that is not RFC 3339 with a zone, a value of the wrong type;
// EClarificationNeeded when an amount has no currency (Prepare asks first).
func (t *Tool) Preview(args json.RawMessage, resourceLabel string, loc *time.Location) ([]models.PreviewField, error) {
	if loc == nil {
		loc = time.UTC
	}
	v, err := decodeStrict(args)
	if err != nil {
		return nil, err
	}
	values, ok := v.(map[string]any)
	if !ok {
		return nil, models.Errorf(models.EInvalidRequest, "arguments must be a JSON object, not %s", jsonTypeName(v))
	}
	var raws map[string]json.RawMessage
	if err := json.Unmarshal(args, &raws); err != nil {
		return nil, models.Wrap(models.EInvalidRequest, err, "arguments are not valid JSON")
	}
	for name := range values {
		if _, ok := t.display[name]; !ok {
			return nil, models.Errorf(models.EInvalidRequest, "argument %q is not declared by %s", name, t.Name)
		}
	}

	fields := make([]models.PreviewField, 0, len(t.order))
	for _, name := range t.order {
		raw, ok := raws[name]
		if !ok {
			return nil, models.Errorf(models.EInvalidRequest, "argument %q is missing", name)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, raw); err != nil {
			return nil, models.Wrap(models.EInvalidRequest, err, "arguments are not valid JSON")
		}
		spec := t.display[name]
		display, err := t.displayValue(name, spec, values, resourceLabel, loc)
		if err != nil {
			return nil, err
		}
		fields = append(fields, models.PreviewField{
			Name:    name,
			Label:   spec.label,
			Value:   json.RawMessage(compact.Bytes()),
			Display: display,
		})
	}
	return fields, nil
}

func (t *Tool) displayValue(name string, spec displaySpec, values map[string]any, resourceLabel string, loc *time.Location) (string, error) {
	v := values[name]
	if v == nil {
		if spec.nullLabel != "" {
			return spec.nullLabel, nil
		}
		return nullDisplay, nil
	}
	ptr := "/" + escapePointer(name)
	cannot := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		e := models.Errorf(models.ESchemaViolation, "%s cannot be displayed: %s", ptr, msg)
		e.Fields = []models.FieldProblem{{Pointer: ptr, Message: msg}}
		return e
	}
	switch spec.kind {
	case kindMoney:
		n, ok := v.(json.Number)
		if !ok {
			return "", cannot("an amount must be an integer number of minor units, not %s", jsonTypeName(v))
		}
		minor, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return "", cannot("an amount must be an integer number of minor units, not %s", n)
		}
		cur, ok := values[spec.currencyField].(string)
		if !ok {
			e := models.Errorf(models.EClarificationNeeded, "%s", noCurrency)
			e.Fields = []models.FieldProblem{{Pointer: "/" + escapePointer(spec.currencyField), Message: noCurrency}}
			return "", e
		}
		s, err := FormatMoney(minor, cur)
		if err != nil {
			msg := fmt.Sprintf("unknown currency %q", cur)
			e := models.Errorf(models.ESchemaViolation, "%s", msg)
			e.Fields = []models.FieldProblem{{Pointer: "/" + escapePointer(spec.currencyField), Message: msg}}
			return "", e
		}
		return s, nil
	case kindDatetime:
		s, ok := v.(string)
		if !ok {
			return "", cannot("a date-time must be a string, not %s", jsonTypeName(v))
		}
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return "", cannot("%q is not an RFC 3339 date-time with a zone", s)
		}
		return formatDatetime(tm, loc), nil
	case kindEnum:
		s, ok := v.(string)
		if !ok {
			return "", cannot("an enum value must be a string, not %s", jsonTypeName(v))
		}
		if label, ok := spec.labels[s]; ok {
			return label, nil
		}
		return s, nil
	case kindResource:
		s, ok := v.(string)
		if !ok {
			return "", cannot("a resource id must be a string, not %s", jsonTypeName(v))
		}
		if label := strings.TrimSpace(resourceLabel); label != "" {
			return s + " · " + label, nil
		}
		return s, nil
	case kindList:
		list, ok := v.([]any)
		if !ok {
			return "", cannot("a list must be an array, not %s", jsonTypeName(v))
		}
		return formatList(list), nil
	case kindBoolean:
		b, ok := v.(bool)
		if !ok {
			return "", cannot("a yes/no value must be a boolean, not %s", jsonTypeName(v))
		}
		if b {
			return "Yes", nil
		}
		return "No", nil
	default: // kindText
		return plainText(v), nil
	}
}

// TextField reports whether the argument name is displayed as free text
// (kind text): its display value may span lines, which a reviewer sees as
// line breaks, as the recipient of an e-mail body would.
func (t *Tool) TextField(name string) bool {
	spec, ok := t.display[name]
	return ok && spec.kind == kindText
}

// formatDatetime shows an instant in loc with the zone named twice, by
// abbreviation and by offset, e.g. "2026-09-01 14:20:00 CST (UTC+08:00)".
func formatDatetime(tm time.Time, loc *time.Location) string {
	lt := tm.In(loc)
	return lt.Format("2006-01-02 15:04:05.999999999 MST") + " (UTC" + lt.Format("-07:00") + ")"
}

// formatList names the first elements of an array: "3 items: a, b, c",
// "25 items: a, …, j, … and 15 more".
func formatList(list []any) string {
	noun := "items"
	if len(list) == 1 {
		noun = "item"
	}
	if len(list) == 0 {
		return "0 items"
	}
	shown := list
	if len(shown) > listPreviewItems {
		shown = shown[:listPreviewItems]
	}
	parts := make([]string, 0, len(shown)+1)
	for _, x := range shown {
		parts = append(parts, plainText(x))
	}
	if rest := len(list) - len(shown); rest > 0 {
		parts = append(parts, fmt.Sprintf("… and %d more", rest))
	}
	return fmt.Sprintf("%d %s: %s", len(list), noun, strings.Join(parts, ", "))
}

// plainText shows a value as is: strings without quotes, numbers as written,
// null as "—", arrays and objects as compact JSON.
func plainText(v any) string {
	switch x := v.(type) {
	case nil:
		return nullDisplay
	case string:
		return x
	case json.Number:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	default:
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // the view escapes; "<" must stay readable
		if err := enc.Encode(x); err != nil {
			return fmt.Sprint(x)
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
}
