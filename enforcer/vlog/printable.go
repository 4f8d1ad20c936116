package vlog

import (
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The human summary is read on a terminal, and most of what it prints is
// named by the agent: paths it created, its processes' names, the
// messages built from them. A name with a newline can forge a line of the
// summary; one with escape sequences can move the cursor, clear the screen
// and print "CLEAN" over a violation; bidi controls can reorder what is
// shown. Every string of a log is shown printable: a character that is not
// (control, format, invalid UTF-8) is written as its Go escape (\n, \x1b,
// \u202e), as strconv.Quote would. The JSON file keeps the exact bytes.

// Printable returns s with every character that is not printable written
// as its escape; s itself when there is none (the common case).
func Printable(s string) string {
	if isPrintable(s) {
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

func isPrintable(s string) bool {
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

// printableLog returns l when every string in it is printable, else a copy
// whose strings are (the lists it changes are copied; l is not touched).
func printableLog(l *Log) *Log {
	if allPrintable(reflect.ValueOf(l).Elem()) {
		return l
	}
	c := *l
	makePrintable(reflect.ValueOf(&c).Elem())
	return &c
}

func allPrintable(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return isPrintable(v.String())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !allPrintable(v.Field(i)) {
				return false
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			if !allPrintable(v.Index(i)) {
				return false
			}
		}
	case reflect.Pointer:
		return v.IsNil() || allPrintable(v.Elem())
	}
	return true
}

// makePrintable rewrites v's strings in place; slices and pointers are
// copied first, so what v shared with the original log stays as it was.
func makePrintable(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(Printable(v.String()))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				makePrintable(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Len() == 0 || allPrintable(v) {
			return
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(n, v)
		v.Set(n)
		for i := range n.Len() {
			makePrintable(n.Index(i))
		}
	case reflect.Pointer:
		if v.IsNil() || allPrintable(v.Elem()) {
			return
		}
		n := reflect.New(v.Elem().Type())
		n.Elem().Set(v.Elem())
		v.Set(n)
		makePrintable(n.Elem())
	}
}
