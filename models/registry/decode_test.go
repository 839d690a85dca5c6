package registry

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// decodeStrict answers exactly what the token-by-token decoder answers —
// the same value, or an error with the same message — over valid and
// invalid texts alike: duplicate keys in every spelling and at every depth,
// nesting around the depth limit, lone and paired surrogates, invalid
// UTF-8, trailing data, and random cuts and splices of all of them.
func TestDecodeStrictAgreesWithTheTokenDecoder(t *testing.T) {
	deep := func(n int, open, close, inner string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	corpus := []string{
		`{"customer_id":"cus_001","template":"apology","subject":"Sorry","body":"Message 7","send_at":null}`,
		`{"amount_minor":1000,"currency":"CNY","order_id":"ord_1","reason":"x"}`, `{"n":1.50,"m":-0,"big":123456789012345678901234567890,"e":1E+2}`,
		`{}`, `[]`, `""`, `5`, `null`, `true`, ` {"a" : [ 1 , { "b" : [] } ] } `, "\t{\"a\":1}\n",
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":{"b":1,"b":1}}`, `[{"a":1},{"a":1}]`, `{"a":[{"x":1,"y":{"x":2,"x":3}}]}`,
		`{"a":"\"quoted\",\"a\":"}`, `{"a\"":1,"a":2}`, `{"k":"\\"}`, `{"\\":1,"\\\\":2}`,
		`{"s":"\ud83d\ude00"}`, `{"s":"\ud83d"}`, `{"s":"\ude00x"}`, `{"\ud800":1}`, "{\"s\":\"\xff\xfe\"}", "{\"\xff\":1,\"\xfe\":2}",
		`{"a":1}{"b":2}`, `{"a":1} x`, `{"a":1`, `{"a":}`, `{"a" 1}`, `{a:1}`, `[1,]`, `{"a":1,}`, `]`, `}`, `{]`, ``, ` `, `"`, `"\"`,
		deep(63, "[", "]", "1"), deep(64, "[", "]", "1"), deep(64, "[", "]", ""), deep(65, "[", "]", ""), deep(66, "[", "]", "1"),
		deep(63, `{"a":`, "}", "1"), deep(64, `{"a":`, "}", "1"), deep(65, `{"a":`, "}", "{}"), deep(200, "[", "]", ""),
	}
	r := rand.New(rand.NewPCG(1, 2))
	n := len(corpus)
	for range 3000 {
		a, b := corpus[r.IntN(n)], corpus[r.IntN(n)]
		i, j := r.IntN(len(a)+1), r.IntN(len(b)+1)
		corpus = append(corpus, a[:i]+b[j:])
	}
	for _, text := range corpus {
		want, wantErr := decodeTokens([]byte(text))
		got, err := decodeStrict([]byte(text))
		if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %#v (%v), want %#v (%v)", text, got, err, want, wantErr)
		}
	}
	if _, ok := decodeQuick([]byte(corpus[0])); !ok {
		t.Error("a plain argument object is not decoded in one call")
	}
}

// A prepared write's digest is the digest of its canonical arguments, the
// same for every spelling of the same arguments.
func TestPreparedDigest(t *testing.T) {
	r := Demo()
	for tool, spellings := range map[string][]string{
		"refund_order": {`{"order_id":"ord_1001","amount_minor":1000,"currency":"CNY","reason":"late"}`,
			` {"reason":"late","currency":"CNY","amount_minor":1.0E3,"order_id":"ord_1001"} `},
		"delete_logs": {`{"log_ids":["log_0002","log_0001"],"reason":"x"}`, `{"reason":"x","log_ids":["log_0001","log_0002","log_0001"]}`},
	} {
		tl, ok := r.Tool(tool)
		if !ok {
			t.Fatal(tool)
		}
		var first string
		for _, raw := range spellings {
			p, err := tl.Prepare([]byte(raw))
			if err != nil {
				t.Fatalf("%s: %v", raw, err)
			}
			want, err := models.Digest(p.Arguments)
			if err != nil || p.Digest != want {
				t.Fatalf("%s: digest %s, the arguments digest to %s (%v)", raw, p.Digest, want, err)
			}
			if first == "" {
				first = p.Digest
			}
			if p.Digest != first {
				t.Errorf("%s: digest %s, another spelling %s", raw, p.Digest, first)
			}
		}
	}
}
