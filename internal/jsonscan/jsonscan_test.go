package jsonscan_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/jsonscan"
)

// events renders what Walk reports for text: containers opened and
// closed with their depth, names with theirs (an escaped one marked), and
// whether the walk reached a balanced end.
func events(text string) (string, bool) {
	var out []string
	ok := jsonscan.Walk([]byte(text), jsonscan.Visitor{
		Open: func(d int, object bool) bool {
			out = append(out, fmt.Sprintf("%s%d", map[bool]string{true: "{", false: "["}[object], d))
			return true
		},
		Close: func(d int) bool { out = append(out, fmt.Sprintf("close%d", d)); return true },
		Name: func(d int, raw []byte, escaped bool) bool {
			mark := ""
			if escaped {
				mark = "\\"
			}
			out = append(out, fmt.Sprintf("%s%s@%d", mark, raw, d))
			return true
		},
	})
	return strings.Join(out, " "), ok
}

func TestWalk(t *testing.T) {
	for _, c := range []struct {
		text, want string
		ok         bool
	}{
		{`{}`, `{1 close1`, true},
		{` {"a" : 1 , "b":[ {"c":"x,\"d\":"} ] } `, `{1 a@1 b@1 [2 {3 c@3 close3 close2 close1`, true},
		// A string value holding quotes, commas and colons names nothing.
		{`{"a":"\"b\":1,\"c\":{"}`, `{1 a@1 close1`, true},
		{`{"\u0061":1,"a\\":2}`, `{1 \\u0061@1 \a\\@1 close1`, true},
		{`[{"a":1},{"a":1}]`, `[1 {2 a@2 close2 {2 a@2 close2 close1`, true},
		{`["a","b"]`, `[1 close1`, true},
		{`"x"`, ``, true},
		{`{"a":1`, `{1 a@1`, false},
		{`{"a":"1}`, `{1 a@1`, false},
		{`]`, ``, false},
		{`{"a":[1]]}`, `{1 a@1 [2 close2 close1`, false},
	} {
		got, ok := events(c.text)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %s (ok %v), want %s (ok %v)", c.text, got, ok, c.want, c.ok)
		}
	}
}

// A visitor that returns false stops the walk there, and Walk says so.
func TestWalkStops(t *testing.T) {
	var seen []string
	ok := jsonscan.Walk([]byte(`{"a":1,"b":2,"c":3}`), jsonscan.Visitor{Name: func(_ int, raw []byte, _ bool) bool {
		seen = append(seen, string(raw))
		return string(raw) != "b"
	}})
	if ok || !slices.Equal(seen, []string{"a", "b"}) {
		t.Errorf("ok %v, names seen %q; want false after a, b", ok, seen)
	}
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	max := 0
	if !jsonscan.Walk([]byte(deep), jsonscan.Visitor{Open: func(d int, _ bool) bool { max = d; return true }}) || max != 100 {
		t.Errorf("100 nested arrays: deepest %d", max)
	}
	if jsonscan.Walk([]byte(deep), jsonscan.Visitor{Open: func(d int, _ bool) bool { return d <= 64 }}) {
		t.Error("a visitor bounding the depth did not stop the walk")
	}
}
