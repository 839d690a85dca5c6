// Package jsonerr words what encoding/json reports about a request's
// arguments for the people and programs that sent them: JSON types and
// JSON field names, never a Go type or a Go field. The agent API and the
// MCP server both answer with it.
package jsonerr

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// TypeName names the JSON type that decodes into t: "a string", "a number",
// "an object"…; a pointer (a nullable value) adds "or null".
func TypeName(t reflect.Type) string {
	if t == reflect.TypeFor[json.RawMessage]() {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return TypeName(t.Elem()) + " or null"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}

// UnknownField returns the name of the field a decoder with
// DisallowUnknownFields refused, unquoted; ok is false for any other error.
func UnknownField(err error) (name string, ok bool) {
	if err == nil {
		return "", false
	}
	rest, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	return strings.Trim(rest, `"`), true
}

// WrongType returns the dotted path of the field whose value has the wrong
// JSON type ("" for the document itself), the value's JSON kind and the
// type it must have; ok is false for any other error.
func WrongType(err error) (field, got, want string, ok bool) {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return "", "", "", false
	}
	return te.Field, te.Value, TypeName(te.Type), true
}
