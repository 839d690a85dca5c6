package jsonstrict

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// plainStructure never accepts a body checkStructure refuses: over request
// bodies with duplicate keys in every spelling and at every depth, nesting
// around the limit, escapes, trailing data, broken syntax and thousands of
// random splices of them. Plain requests take the quick path.
func TestPlainStructureOnlyWhereTheWalkAgrees(t *testing.T) {
	deep := func(n int, open, close string) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	plain := []string{
		`{"tool":"send_customer_email","arguments":{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Message 7","send_at":null}}`,
		`{"tool":"delete_logs","arguments":{"log_ids":["log_1","log_2"],"reason":"x"},"request_key":"k-1","context":"a \"quoted\" word"}`,
		` {"a" : [ {"b":1} , {"b":2} ] , "c" : {} } `, `{"a":{"a":{"a":1}}}`, `{"x":"\\u0061","y":"\""}`,
		`{"a":` + deep(63, "[", "]") + `}`,
	}
	corpus := append([]string{
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"\u0061":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `[{"a":1}]`, `{"a":[{"x":1},{"y":{"x":2,"x":3}}]}`,
		`{"a":1}{"b":2}`, `{"a":1} x`, `{"a":1`, `{"a":}`, `{"a" 1}`, `{a:1}`, `{"a":[1,]}`, `{"a":1,}`, `]`, `}`, `{]`, `"x"`, `5`, ``, ` `,
		`{"a":` + deep(64, "[", "]") + `}`, deep(64, `{"a":`, "}"), `{"a":` + deep(65, "[", "]") + `}`, deep(100, "[", "]"),
		`{"k\"":1,"k":2}`, `{"\\":1,"\\\\":2}`, "{\"a\":\"\x01\"}",
	}, plain...)
	var many strings.Builder
	many.WriteString("{")
	for i := range 40 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`"k` + strings.Repeat("x", i) + `":1`)
	}
	corpus = append(corpus, many.String()+"}")
	r := rand.New(rand.NewPCG(3, 4))
	n := len(corpus)
	for range 5000 {
		a, b := corpus[r.IntN(n)], corpus[r.IntN(n)]
		i, j := r.IntN(len(a)+1), r.IntN(len(b)+1)
		corpus = append(corpus, a[:i]+b[j:])
	}
	for _, body := range corpus {
		top, ok := plainStructure([]byte(body))
		if !ok {
			continue
		}
		if err := checkStructure([]byte(body), "request body"); err != nil {
			t.Errorf("%q passed as plain, but the walk says: %v", body, err)
			continue
		}
		want, err := topLevelNames([]byte(body), "request body")
		slices.Sort(top)
		slices.Sort(want)
		if err != nil || !slices.Equal(top, want) {
			t.Errorf("%q: top-level names %q, want %q (%v)", body, top, want, err)
		}
	}
	for _, body := range plain {
		if _, ok := plainStructure([]byte(body)); !ok {
			t.Errorf("%q did not take the quick path", body)
		}
	}
}
