package registry

import (
	"strings"
	"testing"
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

func probe(t *testing.T, when string) *Tool {
	t.Helper()
	r, err := Parse([]byte(strings.Replace(exprYAML, "WHEN", "'"+strings.ReplaceAll(when, "'", "''")+"'", 1)))
	if err != nil {
		t.Fatalf("when %q: %v", when, err)
	}
	tool, _ := r.Tool("probe")
	return tool
}

func TestWhenEvaluation(t *testing.T) {
	const args = `{"id":"x","n":5,"maybe":null,"s":"héllo","flag":true,"tags":["a","b","c"]}`
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
		{"n > 4.99", true},
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
	const args = `{"id":"x","n":5,"maybe":null,"s":"abc","flag":true,"tags":[]}`
	tool := probe(t, "maybe > 3")
	if tier, err := tool.Tier([]byte(args)); err == nil {
		t.Errorf("ordering a null gave %s, want an evaluation error", tier.Name)
	}
	// Values of the wrong type (arguments not produced by Prepare).
	cases := []struct{ when, args string }{
		{"n > 3", `{"n":"7"}`},
		{"len(tags) > 0", `{"tags":5}`},
		{`s == "x"`, `{"s":1}`},
		{"flag == true", `{"flag":"yes"}`},
	}
	for _, c := range cases {
		if tier, err := probe(t, c.when).Tier([]byte(c.args)); err == nil {
			t.Errorf("when %q on %s gave %s, want an evaluation error", c.when, c.args, tier.Name)
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
	}
	for _, c := range cases {
		data := strings.Replace(exprYAML, "WHEN", "'"+strings.ReplaceAll(c.when, "'", "''")+"'", 1)
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
