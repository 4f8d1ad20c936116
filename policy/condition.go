package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Seed 002 writes a tool's autonomy condition in a plain comparison
// language:
//
//	unsupervised_if: "amount_usd <= 50 AND account.tier != enterprise"
//
// klock evaluates CEL. TranslateCondition rewrites the seed's form into CEL
// so that both run on one evaluator, and klock explain shows the CEL it
// will run, so a reviewer can check the reading:
//
//	amount_usd <= 50 && context.account.tier != "enterprise"
//
// The reading, rule by rule:
//   - AND, OR, NOT (any case) are &&, ||, !; = and == are ==; <> and != are !=.
//   - A name that is an input_schema argument is that argument; args.x and
//     context.x stay as written; any other dotted name (account.tier,
//     task.customer_id) is a value of the call's context: context.account.tier.
//   - A bare word on the right of a comparison that is not an argument
//     (enterprise, GOODWILL) is a string, as the seed writes enum values.
//     A bare word elsewhere that is not an argument is an error: klock does
//     not guess whether it is a value or a misspelled argument.
//   - 'single' or "double" quoted text is a string; numbers are numbers;
//     true, false and null are themselves.

// ErrCondition is wrapped by every *ConditionError.
var ErrCondition = errors.New("autonomy condition cannot be read")

// ConditionError locates a problem in a condition by its byte offset.
type ConditionError struct {
	Source  string
	Offset  int
	Problem string
	Want    string
}

func (e *ConditionError) Error() string {
	return fmt.Sprintf("%v: at column %d of %q: %s", ErrCondition, e.Offset+1, e.Source, e.Problem)
}

func (e *ConditionError) Unwrap() error { return ErrCondition }

// maxConditionLen bounds the translator's work; a condition is one line.
const maxConditionLen = 4096

type tokKind int

const (
	tEOF tokKind = iota
	tNum
	tStr
	tName // identifier or dotted path
	tOp   // comparison
	tAnd
	tOr
	tNot
	tLParen
	tRParen
)

type token struct {
	kind tokKind
	text string // as written; for tStr the unquoted content
	off  int
}

func lexCondition(src string) ([]token, error) {
	var out []token
	fail := func(off int, format string, a ...any) error {
		return &ConditionError{Source: src, Offset: off, Problem: fmt.Sprintf(format, a...),
			Want: "write comparisons such as amount_usd <= 50 joined by AND / OR"}
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			out = append(out, token{tLParen, "(", i})
			i++
		case c == ')':
			out = append(out, token{tRParen, ")", i})
			i++
		case c == '&' || c == '|':
			if i+1 < len(src) && src[i+1] == c {
				k := tAnd
				if c == '|' {
					k = tOr
				}
				out = append(out, token{k, src[i : i+2], i})
				i += 2
				continue
			}
			return nil, fail(i, "%q alone is not an operator (write AND or OR)", string(c))
		case c == '<' || c == '>' || c == '=' || c == '!':
			op := string(c)
			if i+1 < len(src) && (src[i+1] == '=' || c == '<' && src[i+1] == '>') {
				op = src[i : i+2]
			}
			if op == "!" {
				out = append(out, token{tNot, op, i})
			} else {
				out = append(out, token{tOp, op, i})
			}
			i += len(op)
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					return nil, fail(j, "backslashes are not read in a quoted value")
				}
				j++
			}
			if j >= len(src) {
				return nil, fail(i, "the quote opened here is not closed")
			}
			out = append(out, token{tStr, src[i+1 : j], i})
			i = j + 1
		case c >= '0' && c <= '9' || c == '-' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9' && negOK(out):
			j := i + 1
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '.') {
				j++
			}
			num := src[i:j]
			if strings.Count(num, ".") > 1 || strings.HasSuffix(num, ".") {
				return nil, fail(i, "%q is not a number", num)
			}
			if j < len(src) && isNameByte(src[j]) {
				return nil, fail(i, "%q is not a number or a name", src[i:j+1])
			}
			out = append(out, token{tNum, num, i})
			i = j
		case isNameStart(c):
			j := i
			for j < len(src) && (isNameByte(src[j]) || src[j] == '.') {
				j++
			}
			name := src[i:j]
			if strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
				return nil, fail(i, "%q is not a name or a dotted path", name)
			}
			for _, seg := range strings.Split(name, ".") {
				if !isNameStart(seg[0]) {
					return nil, fail(i, "%q: each part of a dotted path starts with a letter or '_'", name)
				}
			}
			switch strings.ToUpper(name) {
			case "AND":
				out = append(out, token{tAnd, name, i})
			case "OR":
				out = append(out, token{tOr, name, i})
			case "NOT":
				out = append(out, token{tNot, name, i})
			default:
				out = append(out, token{tName, name, i})
			}
			i = j
		default:
			return nil, fail(i, "%q is not part of a condition", string(c))
		}
	}
	return append(out, token{tEOF, "", len(src)}), nil
}

// negOK: a '-' starts a negative number where an operand is expected.
func negOK(prev []token) bool {
	if len(prev) == 0 {
		return true
	}
	switch prev[len(prev)-1].kind {
	case tOp, tAnd, tOr, tNot, tLParen:
		return true
	}
	return false
}

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isNameByte(c byte) bool  { return isNameStart(c) || c >= '0' && c <= '9' }

type condParser struct {
	src   string
	toks  []token
	i     int
	args  map[string]*ParamSchema
	depth int
}

// TranslateCondition rewrites a seed 002 condition into CEL over the
// tool's arguments (args) and the call's context. The error is a
// *ConditionError locating the first problem.
func TranslateCondition(src string, args map[string]*ParamSchema) (string, error) {
	if len(src) > maxConditionLen {
		return "", &ConditionError{Source: src[:64] + "...", Problem: fmt.Sprintf("the condition is %d bytes", len(src)), Want: fmt.Sprintf("keep it under %d bytes", maxConditionLen)}
	}
	toks, err := lexCondition(src)
	if err != nil {
		return "", err
	}
	p := &condParser{src: src, toks: toks, args: args}
	out, err := p.or()
	if err != nil {
		return "", err
	}
	if t := p.peek(); t.kind != tEOF {
		return "", p.errAt(t, "join conditions with AND or OR", "unexpected %q after a complete condition", t.text)
	}
	return out, nil
}

func (p *condParser) peek() token { return p.toks[p.i] }
func (p *condParser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *condParser) errAt(t token, want, format string, a ...any) error {
	return &ConditionError{Source: p.src, Offset: t.off, Problem: fmt.Sprintf(format, a...), Want: want}
}

func (p *condParser) or() (string, error) {
	l, err := p.and()
	if err != nil {
		return "", err
	}
	for p.peek().kind == tOr {
		p.next()
		r, err := p.and()
		if err != nil {
			return "", err
		}
		l += " || " + r
	}
	return l, nil
}

func (p *condParser) and() (string, error) {
	l, err := p.unary()
	if err != nil {
		return "", err
	}
	for p.peek().kind == tAnd {
		p.next()
		r, err := p.unary()
		if err != nil {
			return "", err
		}
		l += " && " + r
	}
	return l, nil
}

func (p *condParser) unary() (string, error) {
	if p.peek().kind == tNot {
		p.next()
		x, err := p.unary()
		if err != nil {
			return "", err
		}
		return "!" + x, nil
	}
	return p.primary()
}

func (p *condParser) primary() (string, error) {
	t := p.peek()
	if t.kind == tLParen {
		p.depth++
		if p.depth > 64 {
			return "", p.errAt(t, "simplify the condition", "parentheses nest too deep")
		}
		p.next()
		x, err := p.or()
		if err != nil {
			return "", err
		}
		if c := p.next(); c.kind != tRParen {
			return "", p.errAt(c, "balance the parentheses", "want ')' to close the '(' at column "+strconv.Itoa(t.off+1)+", found %q", c.text)
		}
		p.depth--
		// A parenthesised condition may itself be compared (rare); keep it whole.
		return "(" + x + ")", nil
	}
	left, leftWord, err := p.operand(false)
	if err != nil {
		return "", err
	}
	if p.peek().kind != tOp {
		if leftWord != "" {
			return "", p.errAt(t, "declare it in input_schema, write context."+leftWord+" for a value of the call's context, or quote it", "%q is not an argument of the tool", leftWord)
		}
		return left, nil // a boolean argument or context value
	}
	op := p.next()
	right, _, err := p.operand(true)
	if err != nil {
		return "", err
	}
	if leftWord != "" {
		return "", p.errAt(t, "declare it in input_schema, write context."+leftWord+" for a value of the call's context, or quote it", "%q is not an argument of the tool", leftWord)
	}
	cel := map[string]string{"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[op.text]
	if cel == "" {
		return "", p.errAt(op, "use =, !=, <, <=, > or >=", "%q is not a comparison", op.text)
	}
	return left + " " + cel + " " + right, nil
}

// celKeywords cannot follow a '.' in CEL; such a key is indexed instead.
var celKeywords = map[string]bool{
	"in": true, "as": true, "break": true, "const": true, "continue": true, "else": true,
	"for": true, "function": true, "if": true, "import": true, "let": true, "loop": true,
	"package": true, "namespace": true, "return": true, "var": true, "void": true, "while": true,
	"true": true, "false": true, "null": true,
}

// selectors renders a dotted path's keys as CEL field selections.
func selectors(path string) string {
	var b strings.Builder
	for _, k := range strings.Split(path, ".") {
		if celKeywords[k] {
			b.WriteString("[" + strconv.Quote(k) + "]")
		} else {
			b.WriteString("." + k)
		}
	}
	return b.String()
}

// number renders a numeric literal as CEL reads it: without leading zeros,
// and an integer only when it fits CEL's int64.
func (p *condParser) number(t token) (string, string, error) {
	text, neg := strings.CutPrefix(t.text, "-")
	whole, frac, dot := strings.Cut(text, ".")
	whole = strings.TrimLeft(whole, "0")
	if whole == "" {
		whole = "0"
	}
	out := whole
	if dot {
		out += "." + frac
	} else if _, err := strconv.ParseInt(whole, 10, 64); err != nil {
		return "", "", p.errAt(t, "use a number within ±9223372036854775807, or write it with a decimal point", "%s is too large for an integer", t.text)
	}
	if neg {
		out = "-" + out
	}
	return out, "", nil
}

// operand renders one side of a comparison. word is set to a bare word
// that names no argument when it stands on the left (or alone), where it
// cannot be read as a value.
func (p *condParser) operand(right bool) (cel, word string, err error) {
	t := p.next()
	switch t.kind {
	case tNum:
		return p.number(t)
	case tStr:
		return strconv.Quote(t.text), "", nil
	case tName:
	case tEOF:
		return "", "", p.errAt(t, "complete the comparison, e.g. amount_usd <= 50", "the condition ends where a value is expected")
	default:
		return "", "", p.errAt(t, "write comparisons such as amount_usd <= 50", "want a value or a name, found %q", t.text)
	}
	name := t.text
	switch strings.ToLower(name) {
	case "true", "false", "null":
		return strings.ToLower(name), "", nil
	}
	head, rest, dotted := strings.Cut(name, ".")
	switch {
	case head == "args" || head == "context":
		if !dotted {
			return "", "", p.errAt(t, "name a key: "+name+".x", "%q alone is a map, not a value", name)
		}
		return head + selectors(rest), "", nil
	case p.args[head] != nil:
		ref := head
		if celReserved[head] {
			ref = "args[" + strconv.Quote(head) + "]"
		}
		if dotted {
			ref += selectors(rest)
		}
		return ref, "", nil
	case dotted:
		return "context" + selectors(name), "", nil
	case right:
		return strconv.Quote(name), "", nil
	}
	return "", name, nil
}
