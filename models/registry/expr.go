package registry

import (
	"encoding/json"
	"fmt"
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
}

func (c *comparison) String() string {
	if c.length {
		return fmt.Sprintf("len(%s) %s %s", c.field, c.op, c.lit.text)
	}
	return fmt.Sprintf("%s %s %s", c.field, c.op, c.lit.text)
}

func (c *comparison) eval(args map[string]any) (bool, error) {
	v := args[c.field] // a missing argument counts as null
	if c.length {
		var n int
		switch x := v.(type) {
		case string:
			n = utf8.RuneCountInString(x)
		case []any:
			n = len(x)
		default:
			return false, fmt.Errorf("%s: %s is %s, which has no length", c, c.field, jsonTypeName(v))
		}
		return compareOrder(big.NewRat(int64(n), 1).Cmp(c.lit.num), c.op), nil
	}
	if c.lit.kind == litNull {
		return equality(v == nil, c.op), nil
	}
	if v == nil && (c.op == "==" || c.op == "!=") {
		return equality(false, c.op), nil
	}
	mismatch := func() error {
		return fmt.Errorf("%s: %s is %s, which cannot be compared with %s", c, c.field, jsonTypeName(v), c.lit.text)
	}
	switch c.lit.kind {
	case litNumber:
		n, ok := v.(json.Number)
		if !ok {
			return false, mismatch()
		}
		r, err := parseRat(string(n))
		if err != nil {
			return false, fmt.Errorf("%s: %w", c, err)
		}
		return compareOrder(r.Cmp(c.lit.num), c.op), nil
	case litString:
		s, ok := v.(string)
		if !ok {
			return false, mismatch()
		}
		return equality(s == c.lit.str, c.op), nil
	default: // litBool
		b, ok := v.(bool)
		if !ok {
			return false, mismatch()
		}
		return equality(b == c.lit.b, c.op), nil
	}
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
	return c, nil
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
		return nil // no declared type to check against
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
