package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/countersign/countersign/handlers/jsonerr"
	"github.com/countersign/countersign/internal/jsonscan"
	"github.com/countersign/countersign/models"
	"github.com/countersign/countersign/models/visible"
)

// maxDepth bounds JSON nesting. Tool arguments are shallow; deeper documents
// are rejected before any parser spends effort on them.
const maxDepth = 64

// decodeJSON reads the request body into dst strictly: the content type must
// be application/json (UTF-8), the body at most h.maxBody bytes of valid
// UTF-8 holding exactly one JSON object, without duplicate keys at any depth,
// top-level fields other than dst's spelled exactly (Go's decoder would
// match "Tool" or "TOOL" to tool, so {"Tool":…,"tool":…} would be a
// duplicate in disguise) or wrongly typed fields. Every failure is
// EInvalidRequest with a message that tells the agent what to fix.
//
// The limit is enforced here and not only by middleware, so the handler is
// safe whatever server it is mounted in.
func (h *Handlers) decodeJSON(c echo.Context, dst any) error {
	req := c.Request()
	if err := checkContentType(req.Header.Get(echo.HeaderContentType)); err != nil {
		return err
	}
	if req.ContentLength > h.maxBody {
		return h.tooLarge()
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, h.maxBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return h.tooLarge()
		}
		return models.Wrap(models.EInvalidRequest, err, "could not read the request body")
	}
	if int64(len(body)) > h.maxBody {
		return h.tooLarge()
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return models.Errorf(models.EInvalidRequest, "request body is empty; expected a JSON object")
	}
	if !utf8.Valid(body) {
		return models.Errorf(models.EInvalidRequest, "request body is not valid UTF-8")
	}
	if err := checkSurrogates(body); err != nil {
		return err
	}
	top, plain := plainStructure(body)
	if !plain {
		if err := checkStructure(body); err != nil {
			return err
		}
		if top, err = topLevelNames(body); err != nil {
			return err
		}
	}
	if err := checkFieldNames(top, dst); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	return nil
}

// checkSurrogates refuses a \u escape naming half a UTF-16 surrogate pair
// ("\ud800"), which encoding/json would quietly store as U+FFFD: what the
// agent sent would not be what a reviewer sees and approves.
func checkSurrogates(body []byte) error {
	if off, found := visible.LoneSurrogate(body); found {
		return models.Errorf(models.EInvalidRequest,
			"the body holds a lone UTF-16 surrogate escape at byte %d (%.6s): send the character's full surrogate pair, or the character itself in UTF-8",
			off, body[off:])
	}
	return nil
}

func (h *Handlers) tooLarge() error {
	return models.Errorf(models.EInvalidRequest, "request body exceeds the limit of %d bytes", h.maxBody)
}

// checkContentType accepts application/json with no charset or charset=utf-8.
func checkContentType(v string) error {
	if v == "" {
		return models.Errorf(models.EInvalidRequest, "missing Content-Type; send \"Content-Type: application/json\"")
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil || mt != echo.MIMEApplicationJSON {
		return models.Errorf(models.EInvalidRequest, "Content-Type must be application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return models.Errorf(models.EInvalidRequest, "Content-Type charset must be utf-8")
	}
	return nil
}

// checkFieldNames requires every top-level key of body (a well-formed JSON
// object) to be one of dst's JSON field names exactly, byte for byte.
func checkFieldNames(top []string, dst any) error {
	names := map[string]bool{}
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	for _, key := range top {
		if names[key] {
			continue
		}
		for name := range names {
			if strings.EqualFold(key, name) {
				return models.Errorf(models.EInvalidRequest, "field %q must be spelled %q: field names are case-sensitive", key, name)
			}
		}
		return models.Errorf(models.EInvalidRequest, "unknown field %q", key)
	}
	return nil
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

// checkStructure walks body token by token, without building values: it
// reports syntax errors with their offset, a top level that is not an
// object, trailing data, nesting beyond maxDepth and duplicate keys at any
// depth. Duplicate keys are ambiguous (parsers disagree on which one wins),
// and an ambiguous write is never guessed.
func checkStructure(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 {
				return models.Errorf(models.EInvalidRequest, "malformed JSON: unexpected end of input")
			}
			return models.Errorf(models.EInvalidRequest, "request body is empty; expected a JSON object")
		}
		if err != nil {
			return syntaxError(err, dec.InputOffset())
		}
		if len(stack) == 0 {
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return models.Errorf(models.EInvalidRequest, "request body must be a JSON object")
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
				return models.Errorf(models.EInvalidRequest, "duplicate key %q in %s", key, describe(top.pointer))
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
			if len(stack) >= maxDepth {
				return models.Errorf(models.EInvalidRequest, "JSON nested deeper than %d levels", maxDepth)
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

// topLevelNames returns the member names of body's top-level object.
func topLevelNames(body []byte) ([]string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, models.Wrap(models.EInvalidRequest, err, "request body must be a JSON object")
	}
	names := make([]string, 0, len(top))
	for key := range top {
		names = append(names, key)
	}
	return names, nil
}

// plainStructure reports whether body certainly passes checkStructure,
// without its token-by-token walk (most of a create's request decoding):
// one JSON text (json.Valid: no syntax error, no trailing data) whose top
// level is an object, nested at most maxDepth deep, whose objects name no
// key twice. A key spelled with an escape, which only its decoded form can
// be compared by, or an object of more than maxPlainKeys members leaves
// the answer to checkStructure, as does every document it would refuse.
// When ok, top is the top-level object's member names, in order.
func plainStructure(body []byte) (top []string, ok bool) {
	if !json.Valid(body) {
		return nil, false
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	var names [maxDepth][]string // the names of each open object so far
	ok = jsonscan.Walk(body, jsonscan.Visitor{
		Open: func(depth int, _ bool) bool {
			if depth > maxDepth {
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

// decodeError turns what the struct decoder reports (the document is already
// known to be well-formed) into a message naming the field.
func decodeError(err error) error {
	if field, got, want, ok := jsonerr.WrongType(err); ok {
		if field == "" {
			return models.Errorf(models.EInvalidRequest, "request body must be a JSON object")
		}
		return models.Errorf(models.EInvalidRequest, "field %q must be %s, not %s", field, want, got)
	}
	if name, ok := jsonerr.UnknownField(err); ok {
		return models.Errorf(models.EInvalidRequest, "unknown field %q", name)
	}
	return models.Wrap(models.EInvalidRequest, err, "request body does not match the expected shape")
}

// describe names a container for messages: the top level or its pointer.
func describe(pointer string) string {
	if pointer == "" {
		return "the request body"
	}
	return strconv.Quote(pointer)
}

// escapePointer escapes a key as one reference token (RFC 6901).
func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}
