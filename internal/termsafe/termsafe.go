// Package termsafe owns how klock shows text that someone else chose (file
// names an agent made, process names, tool-call arguments) on a terminal:
// printable, so that it cannot move the cursor, clear the screen, forge a
// line or reorder what is shown. A character that is not printable
// (control, format, invalid UTF-8) is written as its Go escape (\n, \x1b,
// \u202e), as strconv.Quote would. It has no errors.
package termsafe

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s with every character that is not printable written
// as its escape; s itself when there is none (the common case).
func String(s string) string {
	if Printable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// Printable reports whether every character of s is printable.
func Printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			goto slow
		}
	}
	return true
slow:
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || !strconv.IsPrint(r) {
			return false
		}
		i += size
	}
	return true
}
