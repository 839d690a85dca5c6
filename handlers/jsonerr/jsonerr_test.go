package jsonerr_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/handlers/jsonerr"
)

type args struct {
	ID    string          `json:"proposal_id"`
	Wait  *int            `json:"wait_seconds"`
	Tags  []string        `json:"tags"`
	Extra json.RawMessage `json:"extra"`
	Inner struct {
		On bool `json:"on"`
	} `json:"inner"`
}

func decode(doc string) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.DisallowUnknownFields()
	var a args
	return dec.Decode(&a)
}

// The decoder's errors are worded in JSON terms: no Go type, no Go field.
func TestWording(t *testing.T) {
	for _, c := range []struct {
		doc, field, got, want string
	}{
		{`{"proposal_id": 7}`, "proposal_id", "number", "a string"},
		{`{"wait_seconds": "soon"}`, "wait_seconds", "string", "a number"},
		{`{"tags": {}}`, "tags", "object", "an array"},
		{`{"inner": {"on": "yes"}}`, "inner.on", "string", "a boolean"},
		{`[]`, "", "array", "an object"},
	} {
		err := decode(c.doc)
		field, got, want, ok := jsonerr.WrongType(err)
		if !ok || field != c.field || got != c.got || want != c.want {
			t.Errorf("%s: %q %q %q %v (%v)", c.doc, field, got, want, ok, err)
		}
		for _, leak := range []string{"int", "[]", "*", "Go ", "args"} {
			if strings.Contains(want, leak) {
				t.Errorf("%s: %q names a Go type", c.doc, want)
			}
		}
	}
	if got := jsonerr.TypeName(reflect.TypeFor[*int]()); got != "a number or null" {
		t.Errorf("a nullable number: %q", got)
	}
	if name, ok := jsonerr.UnknownField(decode(`{"colour": 1}`)); !ok || name != "colour" {
		t.Errorf("unknown field: %q %v", name, ok)
	}
	if _, ok := jsonerr.UnknownField(decode(`{"proposal_id": 7}`)); ok {
		t.Error("a type error taken for an unknown field")
	}
	if _, _, _, ok := jsonerr.WrongType(decode(`{"colour": 1}`)); ok {
		t.Error("an unknown field taken for a type error")
	}
}
