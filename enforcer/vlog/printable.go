package vlog

import (
	"reflect"

	"github.com/klocklabs/klock/internal/termsafe"
)

// The human summary is read on a terminal, and most of what it prints is
// named by the agent: paths it created, its processes' names, the
// messages built from them. A name with a newline can forge a line of the
// summary; one with escape sequences can move the cursor, clear the screen
// and print "CLEAN" over a violation; bidi controls can reorder what is
// shown. Every string of a log is shown printable: a character that is not
// (control, format, invalid UTF-8) is written as its Go escape (\n, \x1b,
// \u202e; internal/termsafe). The JSON file keeps the exact bytes.

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
		return termsafe.Printable(v.String())
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
		v.SetString(termsafe.String(v.String()))
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
