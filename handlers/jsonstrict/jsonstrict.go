// Package jsonstrict decodes the JSON documents agents send, a request body
// of the agent API or a tool call's arguments over MCP, into Go values by
// one set of rules: exactly one JSON object of valid UTF-8, no lone UTF-16
// surrogate escape, no key named twice at any depth, every member name one
// of the target's field names spelled exactly (encoding/json would match
// "Tool" or "TOOL" to tool, so {"Tool":…,"tool":…} would be a duplicate in
// disguise), no unknown member, every value of its field's JSON type, an
// integral number (1.0, 1e0) accepted for an integer field and a fraction
// refused. A document means one thing to every parser, and the thing it
// means is what runs; how the transports frame the document (a body's size
// and content type, a JSON-RPC message) is theirs.
//
// Errors are *models.Error with code EInvalidRequest, worded in JSON terms
// (never a Go type or field), with a JSON pointer in Fields whenever the
// problem has one. IsFieldError tells a value that breaks the target's
// shape (what a tool's input schema describes) from a document that is not
// well-formed.
package jsonstrict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/countersign/countersign/handlers/jsonerr"
	"github.com/countersign/countersign/internal/jsonscan"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/visible"
)

// MaxDepth bounds JSON nesting. Requests are shallow; deeper documents are
// refused before any parser spends effort on them.
const MaxDepth = 64

// errField marks a document that is well-formed JSON but does not fit the
// target: an unknown or misspelled member, a value of the wrong type.
var errField = errors.New("the value does not fit the field")

// IsFieldError reports whether err, from Decode, is about a value that
// does not fit the target (its pointer in Fields) rather than a document
// that is not well-formed (empty, not UTF-8, malformed, a duplicate key).
func IsFieldError(err error) bool { return errors.Is(err, errField) }

// Decode decodes text, one whole JSON document, into dst (a pointer to a
// struct) by the package's rules. name is what messages call the document
// ("request body").
//
// Errors: EInvalidRequest, with a message that tells the sender what to fix.
func Decode(text []byte, dst any, name string) error {
	if len(bytes.TrimSpace(text)) == 0 {
		return models.Errorf(models.EInvalidRequest, "%s is empty; expected a JSON object", name)
	}
	if !utf8.Valid(text) {
		return models.Errorf(models.EInvalidRequest, "%s is not valid UTF-8", name)
	}
	if off, found := visible.LoneSurrogate(text); found {
		return models.Errorf(models.EInvalidRequest,
			"the %s holds a lone UTF-16 surrogate escape at byte %d (%.6s): send the character's full surrogate pair, or the character itself in UTF-8",
			name, off, text[off:])
	}
	top, plain := plainStructure(text)
	if !plain {
		if err := checkStructure(text, name); err != nil {
			return err
		}
		var err error
		if top, err = topLevelNames(text, name); err != nil {
			return err
		}
	}
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if err := checkStruct(text, top, t, ""); err != nil {
		return err
	}
	err := decode(text, dst)
	if err == nil {
		return nil
	}
	if integerMismatch(err) {
		// A whole number written 1.0 or 1e0 is the integer it denotes; a
		// fraction is refused by name. The rare document that needs it is
		// rewritten with each such number as an integer literal.
		fixed, ferr := wholeNumbers(text, t)
		if ferr != nil {
			return ferr
		}
		reflect.ValueOf(dst).Elem().SetZero()
		if err = decode(fixed, dst); err == nil {
			return nil
		}
	}
	return decodeError(text, t, err, name)
}

func decode(text []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

// fieldError is a problem with the value at pointer ptr.
func fieldError(ptr, problem, format string, args ...any) error {
	return &models.Error{Code: models.EInvalidRequest, Message: fmt.Sprintf(format, args...),
		Fields: []models.FieldProblem{{Pointer: ptr, Message: problem}}, Err: errField}
}

// field names the member at ptr in messages: its name at the top level,
// its pointer below.
func field(ptr string) string {
	if strings.Count(ptr, "/") == 1 {
		return unescapePointer(ptr[1:])
	}
	return ptr
}

// members is the JSON member names of a struct type's fields, by name, as
// encoding/json sees them (embedded structs flattened), with each field's
// type.
func members(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && tag == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, mt := range members(ft) {
					if _, ok := out[n]; !ok {
						out[n] = mt
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// checkStruct requires every member name of the object text (whose names
// are top) to be one of t's field names exactly, byte for byte, and so at
// every depth below where a field's type holds a struct.
func checkStruct(text []byte, top []string, t reflect.Type, ptr string) error {
	if t.Kind() != reflect.Struct || unmarshaler(t) {
		return nil
	}
	fields := members(t)
	var descend []string
	for _, key := range top {
		ft, ok := fields[key]
		if !ok {
			here := ptr + "/" + escapePointer(key)
			for name := range fields {
				if strings.EqualFold(key, name) {
					return fieldError(here, fmt.Sprintf("must be spelled %q", name),
						"field %q must be spelled %q: field names are case-sensitive", field(here), name)
				}
			}
			return fieldError(here, "is not a field here", "unknown field %q", field(here))
		}
		if holdsStruct(ft) {
			descend = append(descend, key)
		}
	}
	if len(descend) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(text, &obj) != nil {
		return nil // not an object: the decoder names its type
	}
	for _, key := range descend {
		if err := checkValue(obj[key], fields[key], ptr+"/"+escapePointer(key)); err != nil {
			return err
		}
	}
	return nil
}

// checkValue is checkStruct for a value of type t at ptr.
func checkValue(raw json.RawMessage, t reflect.Type, ptr string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !holdsStruct(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		slices.Sort(names)
		return checkStruct(raw, names, t, ptr)
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return nil
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := checkValue(obj[k], t.Elem(), ptr+"/"+escapePointer(k)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return nil
		}
		for i, v := range list {
			if err := checkValue(v, t.Elem(), ptr+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// unmarshaler reports whether t decodes itself (json.RawMessage,
// time.Time): its member names, if any, are its own affair.
func unmarshaler(t reflect.Type) bool {
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

// holdsStruct reports whether a value of type t may hold a struct decoded
// by field names.
func holdsStruct(t reflect.Type) bool {
	if unmarshaler(t) {
		return false
	}
	switch t.Kind() {
	case reflect.Struct:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return holdsStruct(t.Elem())
	}
	return false
}

// integerMismatch reports whether err is a number the decoder would not
// store in an integer field: a fraction, an exponent, or out of range.
func integerMismatch(err error) bool {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || !strings.HasPrefix(te.Value, "number") {
		return false
	}
	return isInteger(te.Type.Kind())
}

func isInteger(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

// wholeNumbers returns text with every number that t stores in an integer
// field written as an integer literal, or the error naming a fraction or a
// number out of the field's range. text is a well-formed object without
// duplicate keys, so re-encoding it changes no member.
func wholeNumbers(text []byte, t reflect.Type) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, models.Wrap(models.EInvalidRequest, err, "malformed JSON")
	}
	v, err := walkNumbers(v, t, "")
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func walkNumbers(v any, t reflect.Type, ptr string) (any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil || unmarshaler(t) {
		return v, nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return v, nil
		}
		fields := members(t)
		for k, x := range obj {
			ft, ok := fields[k]
			if !ok {
				continue
			}
			var err error
			if obj[k], err = walkNumbers(x, ft, ptr+"/"+escapePointer(k)); err != nil {
				return nil, err
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return v, nil
		}
		for k, x := range obj {
			var err error
			if obj[k], err = walkNumbers(x, t.Elem(), ptr+"/"+escapePointer(k)); err != nil {
				return nil, err
			}
		}
	case reflect.Slice, reflect.Array:
		list, ok := v.([]any)
		if !ok {
			return v, nil
		}
		for i, x := range list {
			var err error
			if list[i], err = walkNumbers(x, t.Elem(), ptr+"/"+strconv.Itoa(i)); err != nil {
				return nil, err
			}
		}
	default:
		n, ok := v.(json.Number)
		if !ok || !isInteger(t.Kind()) {
			return v, nil
		}
		digits, whole := integerDigits(string(n))
		if !whole {
			return nil, fieldError(ptr, "must be a whole number", "field %q must be a whole number, not %s", field(ptr), n)
		}
		if !fits(digits, t) {
			return nil, fieldError(ptr, "is out of range", "field %q is out of range: %s", field(ptr), n)
		}
		return json.Number(digits), nil
	}
	return v, nil
}

// fits reports whether the integer literal digits fits a value of type t.
func fits(digits string, t reflect.Type) bool {
	if digits == "" {
		return false
	}
	z := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u, err := strconv.ParseUint(digits, 10, 64)
		return err == nil && !z.OverflowUint(u)
	}
	i, err := strconv.ParseInt(digits, 10, 64)
	return err == nil && !z.OverflowInt(i)
}

// integerDigits returns the integer literal a JSON number literal denotes
// ("1e2" → "100", "-0.0" → "0"), whole=false when it has a fractional part,
// and digits "" when it is beyond twenty digits (out of every integer
// type's range). It never builds a number larger than that, whatever the
// exponent.
func integerDigits(lit string) (digits string, whole bool) {
	sign := ""
	if strings.HasPrefix(lit, "-") {
		sign, lit = "-", lit[1:]
	}
	mant, expPart, hasExp := strings.Cut(strings.ToLower(lit), "e")
	exp := int64(0)
	if hasExp {
		var err error
		if exp, err = strconv.ParseInt(expPart, 10, 32); err != nil {
			exp = 1 << 31 // beyond any digits the document holds
			if strings.HasPrefix(expPart, "-") {
				exp = -exp
			}
		}
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	all := intPart + frac
	point := int64(len(intPart)) + exp // digits of all before the decimal point
	trimmed := strings.TrimLeft(all, "0")
	point -= int64(len(all) - len(trimmed))
	trimmed = strings.TrimRight(trimmed, "0")
	if trimmed == "" {
		return "0", true
	}
	if point < int64(len(trimmed)) {
		return "", false
	}
	if point > 20 {
		return "", true
	}
	return sign + trimmed + strings.Repeat("0", int(point)-len(trimmed)), true
}

// decodeError turns what the struct decoder reports (the document is
// already known to be well-formed) into a message naming the field.
func decodeError(text []byte, t reflect.Type, err error, name string) error {
	if f, got, want, ok := jsonerr.WrongType(err); ok {
		if f == "" {
			return fieldError("", "must be an object", "%s must be a JSON object", name)
		}
		ptr := "/" + strings.ReplaceAll(f, ".", "/")
		if strings.HasPrefix(got, "number") {
			got = "a number"
		} else {
			got = article(got)
		}
		return fieldError(ptr, "must be "+want, "field %q must be %s, not %s", f, want, got)
	}
	if n, ok := jsonerr.UnknownField(err); ok {
		return fieldError("/"+escapePointer(n), "is not a field here", "unknown field %q", n)
	}
	// A value that decodes itself refused its text (a time that is not
	// RFC 3339); find which, since the decoder does not say.
	if ptr, problem, ok := badValue(text, t); ok {
		return fieldError(ptr, problem, "field %q %s", field(ptr), problem)
	}
	return &models.Error{Code: models.EInvalidRequest, Message: name + " does not match the expected shape",
		Fields: []models.FieldProblem{{Pointer: "", Message: "does not match the expected shape"}}, Err: errors.Join(errField, err)}
}

// article puts "a" or "an" before the JSON kind encoding/json names.
func article(kind string) string {
	switch kind {
	case "object", "array":
		return "an " + kind
	case "":
		return "another type"
	}
	return "a " + kind
}

var timeType = reflect.TypeFor[time.Time]()

// badValue finds the first value in text that a self-decoding type of t
// refuses, and says what it must be.
func badValue(text []byte, t reflect.Type) (ptr, problem string, ok bool) {
	var walk func(raw json.RawMessage, t reflect.Type, ptr string) (string, string, bool)
	walk = func(raw json.RawMessage, t reflect.Type, ptr string) (string, string, bool) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if string(bytes.TrimSpace(raw)) == "null" {
			return "", "", false
		}
		if unmarshaler(t) {
			v := reflect.New(t).Interface().(json.Unmarshaler)
			if v.UnmarshalJSON(raw) == nil {
				return "", "", false
			}
			if t == timeType {
				return ptr, "must be an RFC 3339 date-time with a time zone, such as 2026-09-01T17:00:00Z", true
			}
			return ptr, "is not a valid value", true
		}
		switch t.Kind() {
		case reflect.Struct:
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil {
				return "", "", false
			}
			fields := members(t)
			keys := make([]string, 0, len(obj))
			for k := range obj {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if ft, ok := fields[k]; ok {
					if p, m, ok := walk(obj[k], ft, ptr+"/"+escapePointer(k)); ok {
						return p, m, true
					}
				}
			}
		case reflect.Map:
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &obj) != nil {
				return "", "", false
			}
			for k, x := range obj {
				if p, m, ok := walk(x, t.Elem(), ptr+"/"+escapePointer(k)); ok {
					return p, m, true
				}
			}
		case reflect.Slice, reflect.Array:
			var list []json.RawMessage
			if json.Unmarshal(raw, &list) != nil {
				return "", "", false
			}
			for i, x := range list {
				if p, m, ok := walk(x, t.Elem(), ptr+"/"+strconv.Itoa(i)); ok {
					return p, m, true
				}
			}
		}
		return "", "", false
	}
	return walk(text, t, "")
}

// frame is one open container while walking a document.
type frame struct {
	pointer   string          // JSON pointer of the container
	object    bool            // object (true) or array
	keys      map[string]bool // keys seen so far (objects)
	expectKey bool            // the next string token is a key (objects)
	key       string          // the member being read (objects)
	index     int             // next element index (arrays)
}

// checkStructure walks text token by token, without building values: it
// reports syntax errors with their offset, a top level that is not an
// object, trailing data, nesting beyond MaxDepth and duplicate keys at any
// depth. Duplicate keys are ambiguous (parsers disagree on which one wins),
// and an ambiguous write is never guessed.
func checkStructure(text []byte, name string) error {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 {
				return models.Errorf(models.EInvalidRequest, "malformed JSON: unexpected end of input")
			}
			return models.Errorf(models.EInvalidRequest, "%s is empty; expected a JSON object", name)
		}
		if err != nil {
			return syntaxError(err, dec.InputOffset())
		}
		if len(stack) == 0 {
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return fieldError("", "must be an object", "%s must be a JSON object", name)
			}
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		// A string in key position names the member that follows.
		if top != nil && top.object && top.expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return checkTrailing(dec)
				}
				stack[len(stack)-1].valueDone()
				continue
			}
			key, _ := tok.(string)
			if top.keys[key] {
				return &models.Error{Code: models.EInvalidRequest,
					Message: fmt.Sprintf("duplicate key %q in %s", key, describe(top.pointer, name)),
					Fields:  []models.FieldProblem{{Pointer: top.pointer + "/" + escapePointer(key), Message: "is named twice"}}}
			}
			top.keys[key] = true
			top.key = key
			top.expectKey = false
			continue
		}
		// tok is a value, the start of one, or the end of an array.
		var pointer string
		if top != nil {
			pointer = top.childPointer()
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= MaxDepth {
				return models.Errorf(models.EInvalidRequest, "JSON nested deeper than %d levels", MaxDepth)
			}
			obj := tok == json.Delim('{')
			f := &frame{pointer: pointer, object: obj, expectKey: obj}
			if obj {
				f.keys = map[string]bool{}
			}
			stack = append(stack, f)
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				return checkTrailing(dec)
			}
			stack[len(stack)-1].valueDone()
		default:
			top.valueDone()
		}
	}
}

// topLevelNames returns the member names of text's top-level object.
func topLevelNames(text []byte, name string) ([]string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(text, &top); err != nil {
		return nil, models.Wrap(models.EInvalidRequest, err, name+" must be a JSON object")
	}
	names := make([]string, 0, len(top))
	for key := range top {
		names = append(names, key)
	}
	slices.Sort(names)
	return names, nil
}

// plainStructure reports whether text certainly passes checkStructure,
// without its token-by-token walk (most of a create's request decoding):
// one JSON text (json.Valid: no syntax error, no trailing data) whose top
// level is an object, nested at most MaxDepth deep, whose objects name no
// key twice. A key spelled with an escape, which only its decoded form can
// be compared by, or an object of more than maxPlainKeys members leaves
// the answer to checkStructure, as does every document it would refuse.
// When ok, top is the top-level object's member names, in order.
func plainStructure(text []byte) (top []string, ok bool) {
	if !json.Valid(text) {
		return nil, false
	}
	if t := bytes.TrimLeft(text, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	var names [MaxDepth][]string // the names of each open object so far
	ok = jsonscan.Walk(text, jsonscan.Visitor{
		Open: func(depth int, _ bool) bool {
			if depth > MaxDepth {
				return false
			}
			names[depth-1] = nil
			return true
		},
		Name: func(depth int, raw []byte, escaped bool) bool {
			seen := names[depth-1]
			if escaped || len(seen) == maxPlainKeys || slices.Contains(seen, string(raw)) {
				return false
			}
			names[depth-1] = append(seen, string(raw))
			return true
		},
	})
	if !ok {
		return nil, false
	}
	return names[0], true
}

// maxPlainKeys bounds the members of an object plainStructure compares
// one by one.
const maxPlainKeys = 32

// valueDone records that one member or element of f is complete.
func (f *frame) valueDone() {
	if f.object {
		f.expectKey = true
	} else {
		f.index++
	}
}

// childPointer is the pointer of the value about to start in f.
func (f *frame) childPointer() string {
	if f.object {
		return f.pointer + "/" + escapePointer(f.key)
	}
	return f.pointer + "/" + strconv.Itoa(f.index)
}

func checkTrailing(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return models.Errorf(models.EInvalidRequest, "unexpected data after the JSON object at byte %d", dec.InputOffset())
	}
	return nil
}

func syntaxError(err error, offset int64) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return models.Errorf(models.EInvalidRequest, "malformed JSON at byte %d: %s", se.Offset, se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return models.Errorf(models.EInvalidRequest, "malformed JSON: unexpected end of input")
	}
	return models.Wrap(models.EInvalidRequest, err, fmt.Sprintf("malformed JSON near byte %d", offset))
}

// describe names a container for messages: the document or its pointer.
func describe(pointer, name string) string {
	if pointer == "" {
		return "the " + name
	}
	return strconv.Quote(pointer)
}

// escapePointer escapes a key as one reference token (RFC 6901).
func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

func unescapePointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
}
