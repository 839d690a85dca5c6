package jsonstrict_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/handlers/jsonstrict"
	"github.com/countersign/countersign/models"
)

type money struct {
	Field string `json:"field"`
	Cap   int64  `json:"cap"`
}

type doc struct {
	Tool    string              `json:"tool"`
	Wait    *int                `json:"wait"`
	Small   int8                `json:"small"`
	Count   uint                `json:"count"`
	Money   *money              `json:"money"`
	Caps    []money             `json:"caps"`
	ByName  map[string]money    `json:"by_name"`
	Enums   map[string][]string `json:"enums"`
	Expires time.Time           `json:"expires"`
}

// Each refusal names its pointer, below the top level too, and says
// whether the value or the document is at fault.
func TestRefusalsNameTheirPointer(t *testing.T) {
	for _, c := range []struct {
		text, pointer, mention string
		field                  bool
	}{
		{`{"TOOL":"x"}`, "/TOOL", `field "TOOL" must be spelled "tool"`, true},
		{`{"money":{"FIELD":"x"}}`, "/money/FIELD", `field "/money/FIELD" must be spelled "field"`, true},
		{`{"caps":[{"field":"a"},{"Cap":1}]}`, "/caps/1/Cap", "case-sensitive", true},
		{`{"by_name":{"a/b":{"colour":1}}}`, "/by_name/a~1b/colour", "unknown field", true},
		{`{"money":{"cap":1,"cap":2}}`, "/money/cap", `duplicate key "cap" in "/money"`, false},
		{`{"wait":1.5}`, "/wait", `field "wait" must be a whole number, not 1.5`, true},
		{`{"money":{"cap":1e-3}}`, "/money/cap", "whole number", true},
		{`{"small":128}`, "/small", "out of range", true},
		{`{"small":1.28e2}`, "/small", "out of range", true},
		{`{"count":-1}`, "/count", "out of range", true},
		{`{"count":-1.0}`, "/count", "out of range", true},
		{`{"wait":1e99999999999999999999}`, "/wait", "out of range", true},
		{`{"wait":"soon"}`, "/wait", `field "wait" must be a number, not a string`, true},
		{`{"expires":"2026-12-20"}`, "/expires", "RFC 3339", true},
		{`{"money":{"cap":2.0},"expires":"2026-12-20"}`, "/expires", "RFC 3339", true},
		{`[]`, "", "must be a JSON object", true},
	} {
		var d doc
		err := jsonstrict.Decode([]byte(c.text), &d, "document")
		var me *models.Error
		if !errors.As(err, &me) || me.Code != models.EInvalidRequest || len(me.Fields) != 1 || me.Fields[0].Pointer != c.pointer ||
			!strings.Contains(me.Message, c.mention) || jsonstrict.IsFieldError(err) != c.field {
			t.Errorf("%s: %v (%+v), want %s mentioning %q (field error %v)", c.text, err, me, c.pointer, c.mention, c.field)
		}
	}
}

// An integral number is the integer it denotes, however it is written.
func TestIntegralNumbersDecode(t *testing.T) {
	for text, want := range map[string]int{
		`{"wait":0.0}`: 0, `{"wait":1e0}`: 1, `{"wait":1E1}`: 10, `{"wait":-0.0}`: 0, `{"wait":25e-1}`: -1,
		`{"wait":0.25e2}`: 25, `{"wait":100e-2}`: 1, `{"wait":0e999999999999}`: 0, `{"wait":30}`: 30,
	} {
		var d doc
		err := jsonstrict.Decode([]byte(text), &d, "document")
		if want < 0 {
			if err == nil {
				t.Errorf("%s: a fraction was accepted as %d", text, *d.Wait)
			}
			continue
		}
		if err != nil || d.Wait == nil || *d.Wait != want {
			t.Errorf("%s: %v %v, want %d", text, d.Wait, err, want)
		}
	}
	var d doc
	if err := jsonstrict.Decode([]byte(`{"tool":"t","money":{"field":"f","cap":5.0},"caps":[{"cap":2e1}],"by_name":{"x":{"cap":3.00}},"enums":{"a":["1.0"]}}`), &d, "document"); err != nil ||
		d.Tool != "t" || d.Money.Cap != 5 || d.Caps[0].Cap != 20 || d.ByName["x"].Cap != 3 || d.Enums["a"][0] != "1.0" {
		t.Errorf("nested integral numbers: %+v %v", d, err)
	}
}
