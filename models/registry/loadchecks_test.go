package registry

import (
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/models"
)

// parseErr parses baseYAML with the replacements applied and returns the
// error text, failing when the file loads.
func parseErr(t *testing.T, pairs ...string) string {
	t.Helper()
	data := baseYAML
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(data, pairs[i]) {
			t.Fatalf("baseYAML has no %q", pairs[i])
		}
		data = strings.Replace(data, pairs[i], pairs[i+1], 1)
	}
	_, err := Parse([]byte(data))
	if err == nil {
		t.Fatalf("Parse succeeded with %q", pairs)
	}
	return err.Error()
}

func wantAll(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("error = %q\nwant it to contain %q", got, w)
		}
	}
}

// Unknown keys name their line, tool and place, never a Go type, and the
// checks go on: one run lists the typos and the other problems together.
func TestParseListsUnknownKeysWithTheOtherProblems(t *testing.T) {
	got := parseErr(t,
		"adapter: {kind: demo_ledger}", "adapter: {kind: demo_ledger, timout: 1s}",
		"        ttl: 120s\n", "        ttl: 120s\n        qourum: 2\n",
		"    policy_version: v1\n", "    policy_version: v1\n    polcy_version: x\n",
		"currency: {label: Currency}", "currency: {label: Currency, kind: txt, lable: x}",
	)
	wantAll(t, got,
		`line 7: tool "refund_order": unknown key "polcy_version" in the tool (known: name, title, description,`,
		`line 8: tool "refund_order": unknown key "timout" in adapter (known: kind, base_url, secret_env, timeout, unsigned_responses)`,
		`tool "refund_order": unknown key "lable" in display: currency (known: label, kind,`,
		`tool "refund_order": unknown key "qourum" in risk[0] (known: tier, when, confirmation, quorum, ttl,`,
		`display: currency: unknown kind "txt"`,
	)
	for _, leak := range []string{"registry.", "not found in type"} {
		if strings.Contains(got, leak) {
			t.Errorf("error %q shows %q", got, leak)
		}
	}
	top := "tool: []\n" + baseYAML
	_, err := Parse([]byte(top))
	if err == nil {
		t.Fatal("Parse accepted an unknown top-level key")
	}
	wantAll(t, err.Error(), `line 1: unknown key "tool" (known: tools)`)
}

func TestParseRefusesSchemaTypos(t *testing.T) {
	cases := []struct{ old, new, want string }{
		{"order_id: {type: string}", "order_id: {type: string, format: order-id}",
			`schema /properties/order_id/format: unknown format "order-id"; the validator asserts only date, date-time,`},
		{"amount_minor: {type: integer}", "amount_minor: {type: integer, minimun: 1}",
			`schema /properties/amount_minor/minimun: unknown keyword "minimun"; did you mean "minimum"?`},
		{"currency: {type: string}", "currency: {type: string, maxLenght: 3}",
			`schema /properties/currency/maxLenght: unknown keyword "maxLenght"; did you mean "maxLength"?`},
		{"currency: {type: string}", "currency: {type: string, Pattern: x}",
			`schema /properties/currency/Pattern: unknown keyword "Pattern"; did you mean "pattern"?`},
		{"      additionalProperties: false\n", "      additionalProperties: false\n      requierd: [order_id]\n",
			`schema /requierd: unknown keyword "requierd"; did you mean "required"?`},
	}
	for _, c := range cases {
		wantAll(t, parseErr(t, c.old, c.new), `tool "refund_order": `+c.want)
	}
	// Known formats and annotations that resemble no keyword still load.
	for _, s := range []string{
		"order_id: {type: string, format: uuid}",
		"order_id: {type: string, format: regex}",
		"order_id: {type: string, x-note: internal, note: shown nowhere}",
	} {
		if _, err := Parse([]byte(strings.Replace(baseYAML, "order_id: {type: string}", s, 1))); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func TestParseRefusesDeadAndAmbiguousRiskRules(t *testing.T) {
	const high = "      - tier: high\n        when: amount_minor > 20000\n        confirmation: webauthn\n        ttl: 120s\n"
	rules := func(s string) []string { return []string{high, high + s} }
	cases := []struct {
		rules []string
		want  string
	}{
		{rules("      - tier: mid\n        when: amount_minor > 100\n        confirmation: click\n        ttl: 60s\n" +
			"      - tier: top\n        when: amount_minor > 1000\n        confirmation: webauthn\n        ttl: 60s\n"),
			`risk[2]: when "amount_minor > 1000" can never pick tier top: every argument set it matches is matched first by risk[1] (amount_minor > 100); put the stricter rule first`},
		{rules("      - tier: mid\n        when: amount_minor >= 20001 and currency == \"CNY\"\n        confirmation: click\n        ttl: 60s\n"),
			`risk[1]: when "amount_minor >= 20001 and currency == \"CNY\"" can never pick tier mid`},
		{rules("      - tier: mid\n        when: amount_minor == 30000 or amount_minor > 50000\n        confirmation: click\n        ttl: 60s\n"),
			`risk[1]: when "amount_minor == 30000 or amount_minor > 50000" can never pick tier mid`},
		{rules("      - tier: high\n        when: amount_minor > 10\n        confirmation: click\n        ttl: 60s\n"),
			`risk[1]: tier "high" is named by risk[0] already; each rule needs its own tier name`},
		{[]string{"      - tier: low\n", "      - tier: high\n"},
			`risk[1]: tier "high" is named by risk[0] already`},
		{[]string{"amount_minor > 20000", "amount_minor > 100.5"},
			`risk[0]: when "amount_minor > 100.5": amount_minor > 100.5: amount_minor is declared as integer, and 100.5 is not an integer`},
	}
	for _, c := range cases {
		wantAll(t, parseErr(t, c.rules...), `tool "refund_order": `+c.want)
	}
	// Rules that can each fire still load: stricter first, or on another
	// argument, or a narrower range after a wider one that excludes it.
	for _, ok := range []string{
		"      - tier: mid\n        when: amount_minor > 100\n        confirmation: click\n        ttl: 60s\n",
		"      - tier: mid\n        when: currency == \"CNY\"\n        confirmation: click\n        ttl: 60s\n",
		"      - tier: mid\n        when: amount_minor >= 20000\n        confirmation: click\n        ttl: 60s\n",
		"      - tier: mid\n        when: amount_minor != 20001\n        confirmation: click\n        ttl: 60s\n",
		"      - tier: mid\n        when: amount_minor > 20000 or currency == \"CNY\"\n        confirmation: click\n        ttl: 60s\n",
	} {
		if _, err := Parse([]byte(strings.Replace(baseYAML, high, high+ok, 1))); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestParseRefusesBadRejectInvisibleAndSecretEnv(t *testing.T) {
	const at = "    normalize:\n"
	cases := []struct{ old, new, want string }{
		{at, "    reject_invisible: [amount_minor]\n" + at, `reject_invisible: "amount_minor" is declared as integer, which holds no string`},
		{at, "    reject_invisible: [currency, currency]\n" + at, `reject_invisible: "currency" is listed twice`},
		{at, "    reject_invisible: [\"*\", currency]\n" + at, `reject_invisible: "*" already names every argument; list it alone`},
		{"adapter: {kind: demo_ledger}", "adapter: {kind: http, base_url: https://x.example, secret_env: 1-bad}",
			`adapter: secret_env "1-bad" is not a valid environment variable name`},
	}
	for _, c := range cases {
		got := parseErr(t, c.old, c.new)
		wantAll(t, got, `tool "refund_order": `+c.want)
		if strings.Contains(c.want, "secret_env") && strings.Contains(got, "needs secret_env") {
			t.Errorf("error %q says secret_env is missing", got)
		}
	}
}

// A nullable currency_field with a null currency is the question the
// errors table promises (clarification_needed), not a schema violation.
func TestNullCurrencyIsAskedAbout(t *testing.T) {
	r, err := Parse([]byte(strings.Replace(baseYAML, "currency: {type: string}", `currency: {type: ["string", "null"]}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("refund_order")
	for _, args := range []string{
		`{"order_id":"o","amount_minor":100,"currency":null}`,
		`{"order_id":"o","amount_minor":100,"currency":"  "}`,
	} {
		_, err = tool.Prepare([]byte(args))
		code, ptrs := fieldPointers(t, err)
		if code != models.EClarificationNeeded || !slices.Equal(ptrs, []string{"/currency"}) {
			t.Errorf("Prepare(%s) = %v (%s %v), want clarification_needed at /currency", args, err, code, ptrs)
		}
	}
	_, err = tool.Preview([]byte(`{"order_id":"o","amount_minor":100,"currency":null}`), "", nil)
	if got, want := models.ErrorCode(err), models.EClarificationNeeded; got != want {
		t.Errorf("Preview with a null currency: %v, want %s", err, want)
	}
}

// YAML merge keys ("<<: *anchor") share declarations between tools, as the
// YAML decoder allows: a registry using one loads, its merged keys checked
// like the mapping's own, and the merge key itself is not an unknown key.
func TestParseAcceptsMergeKeys(t *testing.T) {
	rule := "      - tier: low\n        confirmation: click\n        ttl: 300s\n"
	doc := string(DemoYAML())
	if strings.Count(doc, rule) < 2 {
		t.Fatal("the demo registry's low rules moved; update the test")
	}
	doc = strings.Replace(doc, rule, "      - &lowrule\n        tier: low\n        confirmation: click\n        ttl: 300s\n", 1)
	doc = strings.Replace(doc, rule, "      - <<: *lowrule\n", 1)
	if _, err := Parse([]byte(doc)); err != nil {
		t.Fatalf("a registry with a merge key: %v", err)
	}
	bad := strings.Replace(doc, "      - <<: *lowrule\n", "      - <<: *lowrule\n        ttll: 300s\n", 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), `unknown key "ttll"`) {
		t.Fatalf("a misspelt key beside a merge: %v", err)
	}
}

// A value of the wrong kind is named by its tool and key, in YAML's words
// (a list, a mapping, a string), never in the decoder's Go types.
func TestWrongKindOfValueIsNamedInTheFilesWords(t *testing.T) {
	doc := "tools:\n  - name: x_tool\n    reject_invisible: note\n    risk: 5\n    adapter: {kind: demo_ledger, timeout: [1]}\n"
	_, err := Parse([]byte(doc))
	if err == nil {
		t.Fatal("a file of wrong kinds loaded")
	}
	for _, want := range []string{
		`line 3: tool "x_tool": reject_invisible must be a list, not a string ("note")`,
		`line 4: tool "x_tool": risk must be a list, not a whole number ("5")`,
		`line 5: tool "x_tool": adapter timeout must be a string, not a list`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "[]string") || strings.Contains(err.Error(), "unmarshal") {
		t.Errorf("the error speaks Go: %v", err)
	}
}
