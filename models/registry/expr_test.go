package registry

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// exprYAML declares a tool whose single risk rule under test is WHEN.
const exprYAML = `tools:
  - name: probe
    title: Probe
    description: Creates a proposal for a person to confirm.
    side_effect: reversible
    policy_version: v1
    adapter: {kind: demo_ledger}
    resource: id
    schema:
      type: object
      properties:
        id: {type: string}
        n: {type: integer}
        maybe: {type: ["integer", "null"]}
        s: {type: string}
        flag: {type: boolean}
        tags: {type: array, items: {type: string}}
      required: [id, n, maybe, s, flag, tags]
      additionalProperties: false
    display:
      id: {label: Id}
      n: {label: N}
      maybe: {label: Maybe}
      s: {label: S}
      flag: {label: Flag, kind: boolean}
      tags: {label: Tags, kind: list}
    risk:
      - tier: hit
        when: WHEN
        confirmation: webauthn
        ttl: 60s
      - tier: miss
        confirmation: click
        ttl: 60s
`

// wideExprYAML adds to exprYAML a number, a nullable string and an
// argument without a declared type.
var wideExprYAML = strings.NewReplacer(
	"        tags: {type: array, items: {type: string}}\n",
	"        tags: {type: array, items: {type: string}}\n"+
		"        f: {type: number}\n        note: {type: [\"string\", \"null\"]}\n        e: {enum: [\"a\", \"b\"]}\n",
	"required: [id, n, maybe, s, flag, tags]", "required: [id, n, maybe, s, flag, tags, f, note, e]",
	"      tags: {label: Tags, kind: list}\n",
	"      tags: {label: Tags, kind: list}\n      f: {label: F}\n      note: {label: Note}\n      e: {label: E}\n",
).Replace(exprYAML)

func probe(t *testing.T, when string) *Tool {
	t.Helper()
	r, err := Parse([]byte(strings.Replace(wideExprYAML, "WHEN", "'"+strings.ReplaceAll(when, "'", "''")+"'", 1)))
	if err != nil {
		t.Fatalf("when %q: %v", when, err)
	}
	tool, _ := r.Tool("probe")
	return tool
}

func TestWhenEvaluation(t *testing.T) {
	const args = `{"id":"x","n":5,"maybe":null,"s":"héllo","flag":true,"tags":["a","b","c"],"f":5,"note":null,"e":"a"}`
	cases := []struct {
		when string
		want bool
	}{
		{"n > 4", true},
		{"n > 5", false},
		{"n >= 5", true},
		{"n < 5", false},
		{"n <= 5", true},
		{"n == 5", true},
		{"n == 5.0", true},
		{"n != 5", false},
		{"f > 4.99", true},
		{"f == 5", true},
		{"n > -1", true},
		{"n < 5e1", true},
		{`s == "héllo"`, true},
		{`s != "hello"`, true},
		{`s == "h\u00e9llo"`, true},
		{"flag == true", true},
		{"flag != true", false},
		{"maybe == null", true},
		{"maybe != null", false},
		{"maybe == 3", false}, // null equals only null
		{"len(tags) == 3", true},
		{"len(s) == 5", true}, // characters, not bytes
		{"len(tags) > 3", false},
		// and binds tighter than or.
		{"n > 100 and n > 0 or flag == true", true},
		{"flag == false or n > 100 and n > 0", false},
		{"(flag == false or n > 1) and n < 10", true},
		{"n > 1 and (flag == false or s == \"x\")", false},
		// Short-circuit: the comparison that cannot be made is never reached.
		{"maybe != null and maybe > 3", false},
		{"maybe == null or maybe > 3", true},
		{"note != null and len(note) > 3", false},
		{"flag == true and (note == null or len(note) > 3)", true},
		{"(maybe != null and note != null) and (maybe > 1 or len(note) > 1)", false},
		{"maybe != 3 and maybe != null and maybe > 3", false},
	}
	for _, c := range cases {
		tool := probe(t, c.when)
		tier, err := tool.Tier([]byte(args))
		if err != nil {
			t.Errorf("when %q: %v", c.when, err)
			continue
		}
		if got, want := tier.Name == "hit", c.want; got != want {
			t.Errorf("when %q = %v, want %v", c.when, got, want)
		}
	}
}

func TestWhenComparesIntegersExactly(t *testing.T) {
	// 2^53 + 1 and 2^53 are the same float64; they must not compare equal.
	tool := probe(t, "n > 9007199254740992")
	tier, err := tool.Tier([]byte(`{"id":"x","n":9007199254740993,"maybe":null,"s":"","flag":false,"tags":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tier.Name, "hit"; got != want {
		t.Errorf("tier = %s, want %s", got, want)
	}
}

func TestWhenEvaluationErrors(t *testing.T) {
	// Values of the wrong type (arguments not produced by Prepare): a
	// schema violation at the field, never an internal error.
	cases := []struct{ when, args, ptr string }{
		{"n > 3", `{"n":"7"}`, "/n"},
		{"len(tags) > 0", `{"tags":5}`, "/tags"},
		{`s == "x"`, `{"s":1}`, "/s"},
		{"flag == true", `{"flag":"yes"}`, "/flag"},
		{"n > 3", `{}`, "/n"},
		{"n == 3", `{"n":3.5}`, "/n"},
	}
	for _, c := range cases {
		tier, err := probe(t, c.when).Tier([]byte(c.args))
		if err == nil {
			t.Errorf("when %q on %s gave %s, want an evaluation error", c.when, c.args, tier.Name)
			continue
		}
		code, ptrs := fieldPointers(t, err)
		if code != models.ESchemaViolation || !slices.Equal(ptrs, []string{c.ptr}) {
			t.Errorf("when %q on %s: %v (%s %v), want schema_violation at %s", c.when, c.args, err, code, ptrs, c.ptr)
		}
	}
}

// TestWhenNeverFailsOnValidArguments evaluates rules over nullable and
// mixed arguments with every value the schema allows: Parse has refused
// whatever could not be compared, so Tier always answers a tier.
func TestWhenNeverFailsOnValidArguments(t *testing.T) {
	whens := []string{
		"maybe != null and maybe > 3",
		"maybe == null or maybe >= 3",
		"note != null and len(note) > 3",
		"maybe == 3 and maybe < 4",
		"maybe == 3",
		"maybe != 3",
		"note == \"x\"",
		"note != \"x\"",
	}
	values := map[string][]string{
		"maybe": {"null", "0", "3", "4"},
		"note":  {"null", `""`, `"abcd"`},
		"e":     {`"a"`, `"b"`},
	}
	for _, w := range whens {
		tool := probe(t, w)
		for _, m := range values["maybe"] {
			for _, n := range values["note"] {
				for _, e := range values["e"] {
					args := fmt.Sprintf(`{"id":"x","n":1,"maybe":%s,"s":"","flag":false,"tags":[],"f":1,"note":%s,"e":%s}`, m, n, e)
					if _, err := tool.Prepare([]byte(args)); err != nil {
						t.Fatalf("%s does not prepare: %v", args, err)
					}
					if _, err := tool.Tier([]byte(args)); err != nil {
						t.Errorf("when %q on %s: %v", w, args, err)
					}
				}
			}
		}
	}
}

func TestWhenParseErrors(t *testing.T) {
	cases := []struct {
		when string
		want string
	}{
		{"n >", "expected a literal"},
		{"n = 5", `unexpected character '='`},
		{"n > 5 and", "expected an argument name"},
		{"n > 5 or or n < 2", "expected an argument name"},
		{"and > 5", "expected an argument name"},
		{"n > 05", `unexpected "5"`},
		{"n > five", "expected a literal"},
		{"nope > 5", `"nope" is not an argument`},
		{"len(n) > 1", "n is declared as integer"},
		{"len(tags) == \"x\"", "len() compares with a number"},
		{"flag > 1", "flag is declared as boolean"},
		{"flag == 1", "flag is declared as boolean"},
		{"n == null", "n is declared as integer"},
		{"s != null", "s is declared as string"},
		{"len(maybe) > 0", "maybe is declared as integer|null"},
		{"s < \"b\"", "compares numbers only"},
		{"n > 1e999", "out of range"},
		{"((n > 1)", `expected ")"`},
		{"n > 1)", `unexpected ")"`},
		{"len(tags > 1", `expected ")"`},
		// Ordering a nullable argument needs a guard before it.
		{"maybe > 3", "maybe may be null, which has no order; guard it: maybe != null and maybe > 3"},
		{"len(note) > 3", "note may be null"},
		{"maybe != null or maybe > 3", "maybe may be null"},
		{"maybe == null and maybe > 3", "maybe may be null"},
		{"maybe != 3 and maybe > 3", "maybe may be null"},
		{"(maybe != null or flag == true) and maybe > 1", "maybe may be null"},
		{"maybe > 1 and maybe != null", "maybe may be null"},
		{"flag == true and (maybe != null or n > 1) and maybe < 1", "maybe may be null"},
		// A literal must fit the declared type.
		{"n > 4.99", "n is declared as integer, and 4.99 is not an integer"},
		{"len(tags) > 2.5", "a length is an integer, and 2.5 is not"},
		{"maybe == 3.5", "maybe is declared as integer|null, and 3.5 is not an integer"},
		// Without a declared type nothing can be checked.
		{`e == "a"`, "e declares no type"},
	}
	for _, c := range cases {
		data := strings.Replace(wideExprYAML, "WHEN", "'"+strings.ReplaceAll(c.when, "'", "''")+"'", 1)
		_, err := Parse([]byte(data))
		if err == nil {
			t.Errorf("when %q parsed, want an error containing %q", c.when, c.want)
			continue
		}
		if got, want := err.Error(), c.want; !strings.Contains(got, want) {
			t.Errorf("when %q: error = %q, want it to contain %q", c.when, got, want)
		}
	}
}
