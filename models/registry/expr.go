package registry

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The `when` grammar of a risk rule. It is parsed once at load time into a
// small tree; nothing is ever evaluated as code.
//
//	expr       = and_expr { "or" and_expr }
//	and_expr   = primary { "and" primary }
//	primary    = "(" expr ")" | comparison
//	comparison = operand op literal
//	operand    = FIELD | "len" "(" FIELD ")"
//	op         = ">" | ">=" | "<" | "<=" | "==" | "!="
//	literal    = NUMBER | STRING | "true" | "false" | "null"
//
// FIELD is a top-level argument name. NUMBER is a JSON number, STRING a
// double-quoted JSON string. "and" binds tighter than "or"; both
// short-circuit from left to right.

// condition is a parsed `when` expression.
type condition interface {
	eval(args map[string]any) (bool, error)
}

type orCond []condition

func (c orCond) eval(args map[string]any) (bool, error) {
	for _, sub := range c {
		ok, err := sub.eval(args)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

type andCond []condition

func (c andCond) eval(args map[string]any) (bool, error) {
	for _, sub := range c {
		ok, err := sub.eval(args)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

type litKind int

const (
	litNumber litKind = iota
	litString
	litBool
	litNull
)

type literal struct {
	kind litKind
	num  *big.Rat
	str  string
	b    bool
	text string // as written, for messages
}

// comparison is FIELD OP LITERAL or len(FIELD) OP NUMBER.
type comparison struct {
	field  string
	length bool
	op     string
	lit    literal
	// types are the field's declared JSON types. A value of another type
	// breaks the schema and fails evaluation; a value of a declared type
	// other than the literal's is simply not equal to it.
	types map[string]bool
}

// evalError is a comparison that cannot be made on the value given: the
// value breaks the tool's schema (Parse makes sure that every value the
// schema allows can be compared). Tier reports it as a schema violation at
// the field.
type evalError struct {
	field string
	msg   string
}

func (e *evalError) Error() string { return e.msg }

func (c *comparison) String() string {
	if c.length {
		return fmt.Sprintf("len(%s) %s %s", c.field, c.op, c.lit.text)
	}
	return fmt.Sprintf("%s %s %s", c.field, c.op, c.lit.text)
}

func (c *comparison) eval(args map[string]any) (bool, error) {
	v := args[c.field] // a missing argument counts as null
	fail := func(format string, a ...any) (bool, error) {
		return false, &evalError{field: c.field, msg: fmt.Sprintf("%s: %s", c, fmt.Sprintf(format, a...))}
	}
	if c.types != nil && !valueFits(v, c.types) {
		return fail("%s is %s, not %s as declared", c.field, jsonTypeName(v), typeList(c.types))
	}
	if c.length {
		var n int
		switch x := v.(type) {
		case string:
			n = utf8.RuneCountInString(x)
		case []any:
			n = len(x)
		default:
			return fail("%s is %s, which has no length", c.field, jsonTypeName(v))
		}
		return compareOrder(big.NewRat(int64(n), 1).Cmp(c.lit.num), c.op), nil
	}
	if c.lit.kind == litNull {
		return equality(v == nil, c.op), nil
	}
	ordering := c.op != "==" && c.op != "!="
	if v == nil && !ordering {
		return equality(false, c.op), nil
	}
	mismatch := func() (bool, error) {
		if !ordering && c.types != nil {
			return equality(false, c.op), nil // another declared type: not equal
		}
		return fail("%s is %s, which cannot be compared with %s", c.field, jsonTypeName(v), c.lit.text)
	}
	switch c.lit.kind {
	case litNumber:
		n, ok := v.(json.Number)
		if !ok {
			return mismatch()
		}
		r, err := parseRat(string(n))
		if err != nil {
			return fail("%v", err)
		}
		return compareOrder(r.Cmp(c.lit.num), c.op), nil
	case litString:
		s, ok := v.(string)
		if !ok {
			return mismatch()
		}
		return equality(s == c.lit.str, c.op), nil
	default: // litBool
		b, ok := v.(bool)
		if !ok {
			return mismatch()
		}
		return equality(b == c.lit.b, c.op), nil
	}
}

// valueFits reports whether a value decoded with UseNumber is of one of the
// JSON types declared (a missing value counts as null).
func valueFits(v any, types map[string]bool) bool {
	switch x := v.(type) {
	case nil:
		return types["null"]
	case bool:
		return types["boolean"]
	case json.Number:
		if types["number"] {
			return true
		}
		r, err := parseRat(string(x))
		return types["integer"] && err == nil && r.IsInt()
	case string:
		return types["string"]
	case []any:
		return types["array"]
	case map[string]any:
		return types["object"]
	}
	return false
}

func equality(equal bool, op string) bool {
	if op == "==" {
		return equal
	}
	return !equal
}

func compareOrder(cmp int, op string) bool {
	switch op {
	case ">":
		return cmp > 0
	case ">=":
		return cmp >= 0
	case "<":
		return cmp < 0
	case "<=":
		return cmp <= 0
	case "==":
		return cmp == 0
	default: // "!="
		return cmp != 0
	}
}

// jsonTypeName names the JSON type of a value decoded with UseNumber.
func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

var jsonNumberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// maxExponent bounds the exponent of a number turned into an exact rational,
// so that "1e-999999999" cannot make big.Rat allocate gigabytes.
const maxExponent = 400

// parseRat converts a JSON number to an exact rational: integers of any size
// compare exactly, with no float rounding.
func parseRat(s string) (*big.Rat, error) {
	m := jsonNumberRE.FindStringSubmatch(s)
	if m == nil {
		return nil, fmt.Errorf("%q is not a JSON number", s)
	}
	if m[3] != "" {
		e, err := strconv.Atoi(strings.TrimLeft(m[3][1:], "+"))
		if err != nil || e > maxExponent || e < -maxExponent {
			return nil, fmt.Errorf("number %s is out of range", s)
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil, fmt.Errorf("%q is not a JSON number", s)
	}
	return r, nil
}

// parseWhen parses a `when` expression. When props is not nil, every field
// must be one of its keys, and a literal must fit the field's declared types,
// so that most type errors are caught at load time instead of at evaluation.
func parseWhen(src string, props map[string]*propInfo) (condition, error) {
	toks, err := lexWhen(src)
	if err != nil {
		return nil, err
	}
	p := &whenParser{toks: toks, props: props}
	c, err := p.orExpr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tokEOF {
		return nil, fmt.Errorf("unexpected %s at offset %d", t, t.pos)
	}
	if props != nil {
		if _, _, err := checkGuards(c, props, nil); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkGuards makes sure that no comparison of c can fail on a value the
// schema allows: ordering (and len) of a nullable argument must be guarded,
// evaluated only where an earlier part of the expression has established
// that the argument is not null (`x != null and x > 1`, `x == null or x > 1`).
// known holds the arguments known not to be null where c is evaluated. It
// returns the arguments known not to be null after c held, and after it did
// not hold.
func checkGuards(c condition, props map[string]*propInfo, known map[string]bool) (ifTrue, ifFalse map[string]bool, err error) {
	with := func(base map[string]bool, more ...map[string]bool) map[string]bool {
		out := maps.Clone(base)
		if out == nil {
			out = map[string]bool{}
		}
		for _, m := range more {
			for k := range m {
				out[k] = true
			}
		}
		return out
	}
	switch x := c.(type) {
	case andCond:
		// Each term runs only when the ones before it held; the whole is
		// false when some term is false with the ones before it true.
		ctx := with(known)
		var falseSets []map[string]bool
		for _, sub := range x {
			t, f, err := checkGuards(sub, props, ctx)
			if err != nil {
				return nil, nil, err
			}
			falseSets = append(falseSets, with(ctx, f))
			ctx = with(ctx, t)
		}
		return ctx, intersect(falseSets), nil
	case orCond:
		ctx := with(known)
		var trueSets []map[string]bool
		for _, sub := range x {
			t, f, err := checkGuards(sub, props, ctx)
			if err != nil {
				return nil, nil, err
			}
			trueSets = append(trueSets, with(ctx, t))
			ctx = with(ctx, f)
		}
		return intersect(trueSets), ctx, nil
	case *comparison:
		ordering := x.length || (x.op != "==" && x.op != "!=")
		nonNull := map[string]bool{x.field: true}
		switch {
		case ordering:
			if x.types["null"] && !known[x.field] {
				what := "order"
				if x.length {
					what = "length"
				}
				return nil, nil, fmt.Errorf("%s: %s may be null, which has no %s; guard it: %s != null and %s", x, x.field, what, x.field, x)
			}
			return with(known, nonNull), with(known, nonNull), nil
		case x.lit.kind == litNull && x.op == "!=":
			return with(known, nonNull), with(known), nil
		case x.lit.kind == litNull:
			return with(known), with(known, nonNull), nil
		case x.op == "==":
			return with(known, nonNull), with(known), nil
		default:
			return with(known), with(known, nonNull), nil
		}
	}
	return with(known), with(known), nil
}

func intersect(sets []map[string]bool) map[string]bool {
	out := map[string]bool{}
	if len(sets) == 0 {
		return out
	}
	for k := range sets[0] {
		in := true
		for _, s := range sets[1:] {
			in = in && s[k]
		}
		if in {
			out[k] = true
		}
	}
	return out
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokNumber
	tokString
	tokOp
	tokLParen
	tokRParen
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func (t token) String() string {
	if t.kind == tokEOF {
		return "end of expression"
	}
	return strconv.Quote(t.text)
}

var (
	identRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)
	numberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`)
)

func lexWhen(src string) ([]token, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			toks = append(toks, token{tokLParen, "(", i})
			i++
		case c == ')':
			toks = append(toks, token{tokRParen, ")", i})
			i++
		case strings.HasPrefix(src[i:], ">=") || strings.HasPrefix(src[i:], "<=") ||
			strings.HasPrefix(src[i:], "==") || strings.HasPrefix(src[i:], "!="):
			toks = append(toks, token{tokOp, src[i : i+2], i})
			i += 2
		case c == '>' || c == '<':
			toks = append(toks, token{tokOp, src[i : i+1], i})
			i++
		case c == '"':
			end := i + 1
			for end < len(src) && src[end] != '"' {
				if src[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(src) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			toks = append(toks, token{tokString, src[i : end+1], i})
			i = end + 1
		case c == '-' || (c >= '0' && c <= '9'):
			m := numberRE.FindString(src[i:])
			if m == "" {
				return nil, fmt.Errorf("malformed number at offset %d", i)
			}
			toks = append(toks, token{tokNumber, m, i})
			i += len(m)
		default:
			m := identRE.FindString(src[i:])
			if m == "" {
				return nil, fmt.Errorf("unexpected character %q at offset %d", c, i)
			}
			toks = append(toks, token{tokIdent, m, i})
			i += len(m)
		}
	}
	return append(toks, token{kind: tokEOF, pos: len(src)}), nil
}

type whenParser struct {
	toks  []token
	i     int
	props map[string]*propInfo
}

func (p *whenParser) peek() token { return p.toks[p.i] }

func (p *whenParser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func (p *whenParser) keyword(word string) bool {
	if t := p.peek(); t.kind == tokIdent && t.text == word {
		p.i++
		return true
	}
	return false
}

func (p *whenParser) orExpr() (condition, error) {
	var terms orCond
	for {
		c, err := p.andExpr()
		if err != nil {
			return nil, err
		}
		terms = append(terms, c)
		if !p.keyword("or") {
			break
		}
	}
	if len(terms) == 1 {
		return terms[0], nil
	}
	return terms, nil
}

func (p *whenParser) andExpr() (condition, error) {
	var terms andCond
	for {
		c, err := p.primary()
		if err != nil {
			return nil, err
		}
		terms = append(terms, c)
		if !p.keyword("and") {
			break
		}
	}
	if len(terms) == 1 {
		return terms[0], nil
	}
	return terms, nil
}

func (p *whenParser) primary() (condition, error) {
	if p.peek().kind == tokLParen {
		p.next()
		c, err := p.orExpr()
		if err != nil {
			return nil, err
		}
		if t := p.next(); t.kind != tokRParen {
			return nil, fmt.Errorf("expected \")\" at offset %d, found %s", t.pos, t)
		}
		return c, nil
	}
	return p.comparison()
}

var reservedWords = map[string]bool{"and": true, "or": true, "true": true, "false": true, "null": true}

func (p *whenParser) field() (string, error) {
	t := p.next()
	if t.kind != tokIdent || reservedWords[t.text] {
		return "", fmt.Errorf("expected an argument name at offset %d, found %s", t.pos, t)
	}
	if p.props != nil {
		if _, ok := p.props[t.text]; !ok {
			return "", fmt.Errorf("%q is not an argument of the tool", t.text)
		}
	}
	return t.text, nil
}

func (p *whenParser) comparison() (condition, error) {
	c := &comparison{}
	if t := p.peek(); t.kind == tokIdent && t.text == "len" && p.toks[p.i+1].kind == tokLParen {
		p.i += 2
		f, err := p.field()
		if err != nil {
			return nil, err
		}
		if t := p.next(); t.kind != tokRParen {
			return nil, fmt.Errorf("expected \")\" at offset %d, found %s", t.pos, t)
		}
		c.field, c.length = f, true
	} else {
		f, err := p.field()
		if err != nil {
			return nil, err
		}
		c.field = f
	}
	op := p.next()
	if op.kind != tokOp {
		return nil, fmt.Errorf("expected a comparison operator (> >= < <= == !=) at offset %d, found %s", op.pos, op)
	}
	c.op = op.text
	lit, err := p.literal()
	if err != nil {
		return nil, err
	}
	c.lit = lit
	if err := c.check(p.props); err != nil {
		return nil, err
	}
	return c, nil
}

func (p *whenParser) literal() (literal, error) {
	t := p.next()
	switch {
	case t.kind == tokNumber:
		r, err := parseRat(t.text)
		if err != nil {
			return literal{}, err
		}
		return literal{kind: litNumber, num: r, text: t.text}, nil
	case t.kind == tokString:
		var s string
		if err := json.Unmarshal([]byte(t.text), &s); err != nil {
			return literal{}, fmt.Errorf("malformed string %s at offset %d", t.text, t.pos)
		}
		return literal{kind: litString, str: s, text: t.text}, nil
	case t.kind == tokIdent && (t.text == "true" || t.text == "false"):
		return literal{kind: litBool, b: t.text == "true", text: t.text}, nil
	case t.kind == tokIdent && t.text == "null":
		return literal{kind: litNull, text: t.text}, nil
	}
	return literal{}, fmt.Errorf("expected a literal (number, \"string\", true, false or null) at offset %d, found %s", t.pos, t)
}

// check rejects comparisons that could never be evaluated: ordering anything
// but numbers, and literals that do not fit the field's declared types.
func (c *comparison) check(props map[string]*propInfo) error {
	ordering := c.op != "==" && c.op != "!="
	if c.length && c.lit.kind != litNumber {
		return fmt.Errorf("%s: len() compares with a number", c)
	}
	if ordering && c.lit.kind != litNumber {
		return fmt.Errorf("%s: %s compares numbers only", c, c.op)
	}
	if props == nil {
		return nil
	}
	types := props[c.field].types
	if types == nil {
		return fmt.Errorf("%s: %s declares no type; declare one so that the rule can be checked", c, c.field)
	}
	c.types = types
	if ordering && !c.length {
		for t := range types {
			if t != "integer" && t != "number" && t != "null" {
				return fmt.Errorf("%s: %s is declared as %s; %s compares numbers only", c, c.field, typeList(types), c.op)
			}
		}
	}
	if c.length {
		for t := range types {
			if t != "string" && t != "array" && t != "null" {
				return fmt.Errorf("%s: %s is declared as %s; len() is for strings and arrays", c, c.field, typeList(types))
			}
		}
	}
	if c.lit.kind == litNumber && !c.lit.num.IsInt() && (c.length || !types["number"]) {
		if c.length {
			return fmt.Errorf("%s: a length is an integer, and %s is not", c, c.lit.text)
		}
		return fmt.Errorf("%s: %s is declared as %s, and %s is not an integer", c, c.field, typeList(types), c.lit.text)
	}
	var fits bool
	switch {
	case c.length:
		fits = types["string"] || types["array"]
	case c.lit.kind == litNumber:
		fits = types["integer"] || types["number"]
	case c.lit.kind == litString:
		fits = types["string"]
	case c.lit.kind == litBool:
		fits = types["boolean"]
	case c.lit.kind == litNull:
		fits = types["null"]
	}
	if !fits {
		return fmt.Errorf("%s: %s is declared as %s", c, c.field, typeList(types))
	}
	return nil
}

// subsumed reports whether every argument set for which a holds makes b
// hold too, as far as that can be decided on single comparisons of one
// argument with a number (a rule after b with when a could then never
// fire). It answers false when it cannot tell.
func subsumed(a, b condition) bool {
	switch y := b.(type) {
	case orCond:
		for _, sub := range y {
			if subsumed(a, sub) {
				return true
			}
		}
	case andCond:
		all := true
		for _, sub := range y {
			all = all && subsumed(a, sub)
		}
		if all {
			return true
		}
	}
	switch x := a.(type) {
	case andCond:
		for _, sub := range x {
			if subsumed(sub, b) {
				return true
			}
		}
		return false
	case orCond:
		for _, sub := range x {
			if !subsumed(sub, b) {
				return false
			}
		}
		return true
	}
	ca, ok1 := a.(*comparison)
	cb, ok2 := b.(*comparison)
	if !ok1 || !ok2 || ca.field != cb.field || ca.length != cb.length {
		return false
	}
	if ca.String() == cb.String() {
		return true
	}
	if ca.lit.kind != litNumber || cb.lit.kind != litNumber {
		return false
	}
	// b holds for every number a holds for, and a holds for no null or
	// other value that b does not: only "!=" holds for those.
	if ca.op == "!=" && cb.op != "!=" {
		return false
	}
	return numbersWithin(ca.op, ca.lit.num, cb.op, cb.lit.num)
}

// numbersWithin reports whether {x : x opA a} ⊆ {x : x opB b} over the
// rationals.
func numbersWithin(opA string, a *big.Rat, opB string, b *big.Rat) bool {
	cmp := a.Cmp(b)
	switch opA {
	case "==":
		return compareOrder(cmp, opB)
	case ">", ">=":
		switch opB {
		case ">":
			return cmp > 0 || (cmp == 0 && opA == ">")
		case ">=":
			return cmp >= 0
		case "!=":
			return cmp > 0 || (cmp == 0 && opA == ">")
		}
	case "<", "<=":
		switch opB {
		case "<":
			return cmp < 0 || (cmp == 0 && opA == "<")
		case "<=":
			return cmp <= 0
		case "!=":
			return cmp < 0 || (cmp == 0 && opA == "<")
		}
	case "!=":
		return opB == "!=" && cmp == 0
	}
	return false
}
