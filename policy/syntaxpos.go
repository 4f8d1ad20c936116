package policy

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// syntaxBudget bounds the bytes syntaxPos re-parses: a manifest is a few
// KiB, and past the budget the parser's own line stands.
const syntaxBudget = 32 << 20

// syntaxPos finds the line and column of a YAML syntax error. The parser's
// "line N" is the start of the block it was parsing (libyaml's context
// mark: line 9 for a bad indent on line 32), not the error. The error is on
// the first line after the longest prefix of whole lines that parses, with
// any flow collection ([, {) and quoted string still open there closed, so
// a prefix ending inside a valid multi-line list (or a JSON manifest) is
// not taken for the error. The column is the line's first non-blank
// character. note names a flow collection or string still open on that
// line, opened above it: often the real mistake (a missing } or ]). ok is
// false when the budget runs out first.
func syntaxPos(data []byte) (line, col int, note string, ok bool) {
	lines := strings.SplitAfter(string(data), "\n")
	budget := syntaxBudget
	for k := len(lines) - 1; k >= 0; k-- {
		prefix := strings.Join(lines[:k], "")
		if budget -= len(prefix); budget < 0 {
			return 0, 0, "", false
		}
		closed, open := closeOpen(prefix)
		if !parses(closed) {
			continue
		}
		if strings.TrimSpace(strings.Join(lines[k:], "")) == "" {
			// Only the end was missing: what is never closed is the error.
			if open < 0 {
				return 0, 0, "", false
			}
			line, col = lineCol(prefix, open)
			return line, col, "", true
		}
		l := lines[k]
		upto := prefix + l
		if _, open := closeOpen(upto); open >= 0 && open < len(prefix) {
			ol, oc := lineCol(upto, open)
			note = fmt.Sprintf("the %c opened at line %d column %d is still open here", upto[open], ol, oc)
		}
		return k + 1, 1 + len(l) - len(strings.TrimLeft(l, " ")), note, true
	}
	return 0, 0, "", false
}

// lineCol is the 1-based line and column of byte offset off in s.
func lineCol(s string, off int) (int, int) {
	return 1 + strings.Count(s[:off], "\n"), off - strings.LastIndexByte(s[:off], '\n')
}

// parses reports whether s is one YAML document (or none) without error.
func parses(s string) bool {
	var n yaml.Node
	err := yaml.NewDecoder(strings.NewReader(s)).Decode(&n)
	return err == nil || errors.Is(err, io.EOF)
}

// closeOpen appends what closes the quoted string and flow collections s
// leaves open: the quote where s ends, the brackets on a line indented
// deeper than any block, where flow content may continue. open is the
// offset of the innermost opener left open, -1 for none.
func closeOpen(s string) (closed string, open int) {
	var stack []int // offsets of open [ and {
	quote, quoteAt := byte(0), -1
	prev := byte('\n')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '"' && c == '\\':
			i++ // an escaped character, \" included
		case quote != 0 && c == quote:
			if quote == '\'' && i+1 < len(s) && s[i+1] == '\'' {
				i++ // '' is a quote inside a single-quoted string
			} else {
				quote = 0
			}
		case quote != 0:
		case c == '#' && (prev == ' ' || prev == '\t' || prev == '\n'):
			for i+1 < len(s) && s[i+1] != '\n' {
				i++ // a comment runs to the end of its line
			}
		case (c == '"' || c == '\'') && strings.IndexByte(" \t\n[{,:", prev) >= 0:
			quote, quoteAt = c, i // a quote starts a scalar only where a scalar starts
		case c == '[' || c == '{':
			stack = append(stack, i)
		case (c == ']' || c == '}') && len(stack) > 0:
			stack = stack[:len(stack)-1]
		}
		if i < len(s) {
			prev = s[i]
		}
	}
	if quote == 0 && len(stack) == 0 {
		return s, -1
	}
	open = quoteAt
	var b strings.Builder
	b.WriteString(strings.TrimRight(s, "\n"))
	if quote != 0 {
		b.WriteByte(quote)
	} else {
		open = stack[len(stack)-1]
	}
	b.WriteString("\n" + strings.Repeat(" ", 64))
	for i := len(stack) - 1; i >= 0; i-- {
		if s[stack[i]] == '[' {
			b.WriteByte(']')
		} else {
			b.WriteByte('}')
		}
	}
	return b.String(), open
}
