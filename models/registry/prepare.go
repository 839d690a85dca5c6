package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/countersign/countersign/internal/jsonscan"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/visible"
)

// Prepared is the result of Prepare: what a proposal snapshot stores.
type Prepared struct {
	// Arguments are the normalized arguments in RFC 8785 canonical JSON
	// (models.Canonical).
	Arguments json.RawMessage
	// Digest is their digest (models.Digest), the proposal's args_digest.
	Digest string
	// Resource is the target resource id of a single-resource tool.
	Resource string
	// ResourceSet is a batch tool's ids, sorted and de-duplicated
	// (models.ResourceSet); Arguments hold this same sorted list.
	ResourceSet []string
	// ResourceSetDigest is the digest of ResourceSet (batch tools only).
	ResourceSetDigest string
}

// noCurrency is the question for an amount whose currency is missing.
const noCurrency = "an amount without a currency is ambiguous; say which currency"

// Prepare turns an agent's raw arguments into the snapshot a proposal
// stores, in this order: parse, declared normalizations, clarification check,
// strict JSON Schema validation, resource extraction, canonical JSON. It
// returns a *models.Error with code
//   - EInvalidRequest when raw is not a single JSON object, or an object
//     holds the same key twice;
//   - EClarificationNeeded when a value is ambiguous (a field with a clarify
//     rule is missing, null or empty; a date-time has no zone; an amount's
//     currency is missing, null or empty) and nothing
//     else is wrong, with Fields listing every such field by JSON pointer;
//   - ESchemaViolation when the arguments break the schema, with Fields
//     holding one FieldProblem per offending field, its JSON pointer relative
//     to the arguments ("/amount_minor"; an extra property "foo" at "/foo", a
//     missing required "currency" at "/currency"), and the ambiguous
//     fields too, each with its clarify message. Integers beyond ±(2^53−1),
//     which the canonical form could not represent exactly, are violations.
func (t *Tool) Prepare(raw json.RawMessage) (Prepared, error) {
	v, err := decodeStrict(raw)
	if err != nil {
		return Prepared{}, err
	}
	args, ok := v.(map[string]any)
	if !ok {
		return Prepared{}, models.Errorf(models.EInvalidRequest, "arguments must be a JSON object, not %s", jsonTypeName(v))
	}

	ambiguous, invalid := t.applyNormalizations(args)

	for _, c := range t.clarify {
		if val, ok := args[c.field]; !ok || val == nil || val == "" {
			ambiguous = append(ambiguous, models.FieldProblem{Pointer: "/" + escapePointer(c.field), Message: c.message})
		}
	}
	// An amount is meaningless without its currency, and a currency is not
	// guessed: a null one (allowed by a nullable currency_field) is asked
	// about, as the errors table of the README says.
	for _, name := range sortedKeys(t.display) {
		spec := t.display[name]
		if spec.kind != kindMoney || args[name] == nil {
			continue
		}
		ptr := "/" + escapePointer(spec.currencyField)
		if cur, ok := args[spec.currencyField]; (!ok || cur == nil || cur == "") &&
			!slices.ContainsFunc(ambiguous, func(a models.FieldProblem) bool { return a.Pointer == ptr }) {
			ambiguous = append(ambiguous, models.FieldProblem{Pointer: ptr, Message: noCurrency})
		}
	}
	problems := invalid
	if err := t.schema.Validate(any(args)); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return Prepared{}, fmt.Errorf("registry: validating %s: %w", t.Name, err)
		}
		problems = append(problems, schemaProblems(verr)...)
	}
	problems = append(problems, numberProblems(args, "")...)
	problems = append(problems, t.invisibleProblems(args)...)
	// An ambiguous field is asked about alone only when nothing else is
	// wrong (its own schema problem, a missing required value, is the same
	// question); otherwise one answer names every field to fix, the
	// ambiguous ones with what to say.
	problems = slices.DeleteFunc(problems, func(p models.FieldProblem) bool {
		return slices.ContainsFunc(ambiguous, func(a models.FieldProblem) bool { return a.Pointer == p.Pointer })
	})
	if len(ambiguous) > 0 && len(problems) == 0 {
		e := models.Errorf(models.EClarificationNeeded, "some arguments are ambiguous and were not guessed: %s", pointers(ambiguous))
		e.Fields = mergeProblems(ambiguous)
		return Prepared{}, e
	}
	if len(problems) > 0 {
		fields := mergeProblems(append(problems, ambiguous...))
		e := models.Errorf(models.ESchemaViolation, "arguments do not match the %s schema: %s", t.Name, pointers(fields))
		if len(ambiguous) > 0 {
			e = models.Errorf(models.ESchemaViolation, "arguments do not match the %s schema: %s (ambiguous, to be asked rather than guessed: %s)",
				t.Name, pointers(fields), pointers(mergeProblems(ambiguous)))
		}
		e.Fields = fields
		return Prepared{}, e
	}

	var p Prepared
	if t.Batch {
		list, _ := args[t.ResourceField].([]any) // the schema guarantees an array of strings
		ids := make([]string, 0, len(list))
		for _, x := range list {
			ids = append(ids, x.(string))
		}
		set, digest, err := models.ResourceSet(ids)
		if err != nil {
			return Prepared{}, err
		}
		sorted := make([]any, len(set))
		for i, id := range set {
			sorted[i] = id
		}
		args[t.ResourceField] = sorted
		p.ResourceSet, p.ResourceSetDigest = set, digest
	} else {
		p.Resource, _ = args[t.ResourceField].(string)
	}

	doc, err := json.Marshal(args)
	if err != nil {
		return Prepared{}, models.Wrap(models.EInvalidRequest, err, "arguments cannot be encoded as JSON")
	}
	p.Arguments, err = models.Canonical(doc)
	if err != nil {
		return Prepared{}, err
	}
	p.Digest = models.CanonicalDigest(p.Arguments)
	return p, nil
}

// Tier evaluates the tool's ordered risk rules over normalized arguments
// (Prepared.Arguments) and returns the tier of the first rule that matches;
// the last rule always matches. It returns EInvalidRequest when args is not a
// single JSON object, and ESchemaViolation, with the field's pointer, when a
// value breaks the schema so that a rule cannot compare it (a string where
// a number is declared). Parse makes sure that every value the schema
// allows can be compared, so arguments from Prepare never fail.
func (t *Tool) Tier(args json.RawMessage) (models.Tier, error) {
	v, err := decodeStrict(args)
	if err != nil {
		return models.Tier{}, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return models.Tier{}, models.Errorf(models.EInvalidRequest, "arguments must be a JSON object, not %s", jsonTypeName(v))
	}
	for _, r := range t.risk {
		if r.when == nil {
			return r.tier, nil
		}
		ok, err := r.when.eval(m)
		if err != nil {
			var ee *evalError
			if !errors.As(err, &ee) {
				return models.Tier{}, fmt.Errorf("registry: %s: risk tier %s: %w", t.Name, r.tier.Name, err)
			}
			ptr := "/" + escapePointer(ee.field)
			e := models.Errorf(models.ESchemaViolation, "arguments do not match the %s schema: %s", t.Name, ptr)
			e.Fields = []models.FieldProblem{{Pointer: ptr, Message: ee.msg}}
			return models.Tier{}, e
		}
		if ok {
			return r.tier, nil
		}
	}
	return models.Tier{}, fmt.Errorf("registry: %s: no risk rule matched", t.Name) // unreachable: Parse requires a catch-all
}

// invisibleProblems lists, for the arguments under reject_invisible, every
// string holding a hidden code point (visible.Find), at its JSON pointer.
func (t *Tool) invisibleProblems(args map[string]any) []models.FieldProblem {
	if !t.rejectInvisibleAll && len(t.rejectInvisible) == 0 {
		return nil
	}
	var out []models.FieldProblem
	var walk func(v any, ptr string)
	walk = func(v any, ptr string) {
		switch x := v.(type) {
		case string:
			if f, found := visible.Find(x, visible.Strict); found {
				out = append(out, models.FieldProblem{Pointer: ptr, Message: fmt.Sprintf(
					"holds %s (%s) at byte %d; this tool refuses characters a reviewer cannot see", f.Escape(), f.Kind, f.Offset)})
			}
		case []any:
			for i, e := range x {
				walk(e, ptr+"/"+strconv.Itoa(i))
			}
		case map[string]any:
			for _, k := range sortedKeys(x) {
				walk(x[k], ptr+"/"+escapePointer(k))
			}
		}
	}
	for _, k := range sortedKeys(args) {
		if t.rejectInvisibleAll || t.rejectInvisible[k] {
			walk(args[k], "/"+escapePointer(k))
		}
	}
	return out
}

// decodeStrict decodes one JSON value with numbers kept as json.Number and
// refuses duplicate object keys, which different parsers resolve differently
// (a reviewer must see exactly what runs).
func decodeStrict(raw []byte) (any, error) {
	if v, ok := decodeQuick(raw); ok {
		return v, nil
	}
	return decodeTokens(raw)
}

// decodeQuick is decodeStrict for the text it accepts without doubt, in one
// call of encoding/json instead of token by token (two fifths cheaper for a
// tool's arguments): one JSON value, nested at most maxJSONDepth deep,
// without lone surrogate escapes, whose objects have as many keys once
// decoded as the text names members (so none is named twice, also in
// escaped spellings). ok is false for anything else, which decodeTokens
// then decides, with its errors.
func decodeQuick(raw []byte) (any, bool) {
	members, ok := countMembers(raw)
	if !ok {
		return nil, false
	}
	if _, found := visible.LoneSurrogate(raw); found {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	if decodedKeys(v) != members {
		return nil, false
	}
	return v, true
}

// countMembers counts the members of all objects in the JSON text raw (the
// names), and is false when containers nest more than maxJSONDepth deep
// (then a value inside may be deeper than decodeTokens takes) or the text is
// plainly not JSON.
func countMembers(raw []byte) (int, bool) {
	n := 0
	ok := jsonscan.Walk(raw, jsonscan.Visitor{
		Open: func(depth int, _ bool) bool { return depth <= maxJSONDepth },
		Name: func(int, []byte, bool) bool { n++; return true },
	})
	return n, ok
}

// decodedKeys counts the keys of all objects in v, as decoded.
func decodedKeys(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		n += len(v)
		for _, x := range v {
			n += decodedKeys(x)
		}
	case []any:
		for _, x := range v {
			n += decodedKeys(x)
		}
	}
	return n
}

// decodeTokens is decodeStrict token by token: it refuses a key named twice
// as soon as it meets it and says which.
func decodeTokens(raw []byte) (any, error) {
	if off, found := visible.LoneSurrogate(raw); found {
		return nil, models.Errorf(models.EInvalidRequest,
			"arguments hold a lone UTF-16 surrogate escape at byte %d: send the full surrogate pair or the character in UTF-8", off)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		var me *models.Error
		if errors.As(err, &me) {
			return nil, err
		}
		return nil, models.Wrap(models.EInvalidRequest, err, "arguments are not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, models.Errorf(models.EInvalidRequest, "arguments must be a single JSON value")
	}
	return v, nil
}

const maxJSONDepth = 64

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, models.Errorf(models.EInvalidRequest, "arguments are nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			m := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				if _, dup := m[key]; dup {
					return nil, models.Errorf(models.EInvalidRequest, "arguments hold the key %q twice", key)
				}
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				m[key] = val
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return m, nil
		case '[':
			s := []any{}
			for dec.More() {
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				s = append(s, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return s, nil
		}
		return nil, fmt.Errorf("unexpected %q", tok)
	default:
		return tok, nil // string, json.Number, bool or nil
	}
}

// normError is a normalization that could not be applied.
type normError struct {
	ambiguous bool // true: clarification_needed; false: schema_violation
	msg       string
}

func (e *normError) Error() string { return e.msg }

var normalizers = map[string]func(string) (string, error){
	"trim":            func(s string) (string, error) { return strings.TrimSpace(s), nil },
	"upper":           func(s string) (string, error) { return strings.ToUpper(s), nil },
	"lower":           func(s string) (string, error) { return strings.ToLower(s), nil },
	"collapse_spaces": collapseSpaces,
	"rfc3339_utc":     rfc3339UTC,
}

func collapseSpaces(s string) (string, error) {
	var b strings.Builder
	inSpace := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			if !inSpace {
				b.WriteByte(' ')
			}
			inSpace = true
			continue
		}
		inSpace = false
		b.WriteRune(r)
	}
	return b.String(), nil
}

// Date-time layouts accepted by rfc3339_utc. Fractional seconds are accepted
// after the seconds by time.Parse without being in the layout.
var (
	zonedLayouts = []string{
		"2006-01-02T15:04:05Z07:00",
		"2006-01-02 15:04:05Z07:00",
		"2006-01-02T15:04:05Z0700",
		"2006-01-02 15:04:05Z0700",
		"2006-01-02T15:04Z07:00",
		"2006-01-02 15:04Z07:00",
	}
	localLayouts = []string{
		"2006-01-02T15:04:05",
		"2006-01-02 15:04:05",
		"2006-01-02T15:04",
		"2006-01-02 15:04",
		"2006-01-02",
	}
)

// zoneOffset is the numeric offset ending a zoned date-time, hours and
// minutes. time.Parse takes an hour of 24 and a minute of 60 there, which
// RFC 3339 (time-hour 00–23, time-minute 00–59) does not.
var zoneOffset = regexp.MustCompile(`[+-]([0-9]{2}):?([0-9]{2})$`)

// rfc3339UTC rewrites a zoned date-time as RFC 3339 in UTC. A date-time
// without a zone is ambiguous: it is never read in some assumed zone.
func rfc3339UTC(s string) (string, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for _, l := range zonedLayouts {
		if tm, err := time.Parse(l, u); err == nil {
			if m := zoneOffset.FindStringSubmatch(u); m != nil && (m[1] > "23" || m[2] > "59") {
				return s, &normError{msg: fmt.Sprintf("%q has the offset %s; an RFC 3339 offset runs from 00:00 to 23:59", s, m[0])}
			}
			return tm.UTC().Format(time.RFC3339Nano), nil
		}
	}
	for _, l := range localLayouts {
		if _, err := time.Parse(l, u); err == nil {
			return s, &normError{ambiguous: true, msg: fmt.Sprintf("%q has no time zone; give the date-time with an offset, e.g. 2026-09-01T14:20:00+08:00 or …Z for UTC", s)}
		}
	}
	return s, &normError{msg: fmt.Sprintf("%q is not an RFC 3339 date-time", s)}
}

// applyNormalizations rewrites args in place and returns the fields whose
// values were ambiguous or could not be normalized.
func (t *Tool) applyNormalizations(args map[string]any) (ambiguous, invalid []models.FieldProblem) {
	apply := func(s, ptr string, names []string) string {
		for _, name := range names {
			out, err := normalizers[name](s)
			var ne *normError
			if errors.As(err, &ne) {
				p := models.FieldProblem{Pointer: ptr, Message: ne.msg}
				if ne.ambiguous {
					ambiguous = append(ambiguous, p)
				} else {
					invalid = append(invalid, p)
				}
				return s
			}
			s = out
		}
		return s
	}
	for _, field := range sortedKeys(t.normalize) {
		names := t.normalize[field]
		ptr := "/" + escapePointer(field)
		switch v := args[field].(type) {
		case string:
			args[field] = apply(v, ptr, names)
		case []any:
			for i, x := range v {
				if s, ok := x.(string); ok {
					v[i] = apply(s, ptr+"/"+strconv.Itoa(i), names)
				}
			}
		}
	}
	return ambiguous, invalid
}

var messagePrinter = message.NewPrinter(language.English)

// schemaProblems flattens a validation error into one problem per leaf,
// pointing at the offending field: a missing required property or a
// forbidden extra one is reported at its own pointer, not at its parent.
func schemaProblems(verr *jsonschema.ValidationError) []models.FieldProblem {
	var out []models.FieldProblem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		base := pointerOf(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, name := range k.Missing {
				out = append(out, models.FieldProblem{Pointer: base + "/" + escapePointer(name), Message: "required property is missing"})
			}
		case *kind.AdditionalProperties:
			for _, name := range k.Properties {
				out = append(out, models.FieldProblem{Pointer: base + "/" + escapePointer(name), Message: "property is not allowed"})
			}
		default:
			out = append(out, models.FieldProblem{Pointer: base, Message: e.ErrorKind.LocalizedString(messagePrinter)})
		}
	}
	walk(verr)
	return out
}

func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointer(t))
	}
	return b.String()
}

// maxSafeInteger is the largest integer every JSON implementation (and the
// RFC 8785 canonical form, which goes through float64) keeps exact.
const maxSafeInteger = 1<<53 - 1

// numberProblems reports numbers the canonical form would change: integers
// beyond ±(2^53−1) and numbers out of float64 range.
func numberProblems(v any, ptr string) []models.FieldProblem {
	var out []models.FieldProblem
	switch x := v.(type) {
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err != nil || i > maxSafeInteger || i < -maxSafeInteger {
				out = append(out, models.FieldProblem{Pointer: ptr, Message: "integer is too large to be represented exactly (limit ±9007199254740991)"})
			}
		} else if f, err := strconv.ParseFloat(s, 64); err != nil || math.IsInf(f, 0) || (f == 0 && nonZeroDigits(s)) {
			out = append(out, models.FieldProblem{Pointer: ptr, Message: "number is out of range"})
		} else if !sameValue(s, f) {
			// 9.007199254740993e15 or 0.1000000000000000055511151231257827:
			// the canonical form would store (and the reviewer would see and
			// approve) another number than the agent sent.
			out = append(out, models.FieldProblem{Pointer: ptr, Message: "number has more precision than can be represented exactly (at most 15 significant digits; integers within ±9007199254740991)"})
		}
	case map[string]any:
		for _, k := range sortedKeys(x) {
			out = append(out, numberProblems(x[k], ptr+"/"+escapePointer(k))...)
		}
	case []any:
		for i, e := range x {
			out = append(out, numberProblems(e, ptr+"/"+strconv.Itoa(i))...)
		}
	}
	return out
}

// nonZeroDigits reports whether the mantissa of a JSON number has a digit
// other than 0 (a number that parses to 0 without being 0 underflowed).
func nonZeroDigits(s string) bool {
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		s = s[:i]
	}
	return strings.ContainsAny(s, "123456789")
}

// sameValue reports whether the JSON number s has exactly the value the
// canonical form writes for the float64 f it parsed to (the shortest decimal
// that reads back as f, as RFC 8785 serializes numbers). f is finite and did
// not underflow, which bounds s's exponent, so the exact comparison is cheap.
func sameValue(s string, f float64) bool {
	exact, ok := new(big.Rat).SetString(s)
	if !ok {
		return false
	}
	written, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	return ok && exact.Cmp(written) == 0
}

// mergeProblems returns one problem per pointer, sorted by pointer, joining
// distinct messages for the same field.
func mergeProblems(ps []models.FieldProblem) []models.FieldProblem {
	byPtr := map[string][]string{}
	for _, p := range ps {
		if !slices.Contains(byPtr[p.Pointer], p.Message) {
			byPtr[p.Pointer] = append(byPtr[p.Pointer], p.Message)
		}
	}
	out := make([]models.FieldProblem, 0, len(byPtr))
	for _, ptr := range sortedKeys(byPtr) {
		out = append(out, models.FieldProblem{Pointer: ptr, Message: strings.Join(byPtr[ptr], "; ")})
	}
	return out
}

func pointers(ps []models.FieldProblem) string {
	names := make([]string, 0, len(ps))
	for _, p := range ps {
		if !slices.Contains(names, p.Pointer) {
			names = append(names, p.Pointer)
		}
	}
	return strings.Join(names, ", ")
}
