package vlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// The file's layout: one top-level field per line, indented, and each
// element of a list on a line of its own, compact. A session that touched
// tens of thousands of files has as many observed triples, and the file is
// written while the operator waits for `klock run` to return: encoded
// element by element into a buffered writer, the log never exists whole in
// memory a second time. json.Encoder with SetIndent built it three times
// (the compact encoding, its indented copy, the caller's buffer), each
// grown by doubling: for 40k triples, 0.3 s of CPU and some 10k page faults
// on the 2-core VM the figures come from (BenchmarkEncode). The result is
// still JSON that json.Unmarshal reads into the same Log (TestEncodeSameAsStd).

// logField is one field of Log as encoding/json names it.
type logField struct {
	index     int
	name      string
	omitEmpty bool
	list      bool
}

// logFields lists Log's fields in declaration order, from their json tags,
// so the layout cannot drift from the struct.
var logFields = func() []logField {
	t := reflect.TypeFor[Log]()
	var fs []logField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		fs = append(fs, logField{index: i, name: name, omitEmpty: strings.Contains(","+opts+",", ",omitempty,"),
			list: f.Type.Kind() == reflect.Slice})
	}
	return fs
}()

// encoder writes compact JSON values without HTML escaping into w.
type encoder struct {
	w   *bufio.Writer
	buf bytes.Buffer
	enc *json.Encoder
}

func newEncoder(w io.Writer) *encoder {
	e := &encoder{w: bufio.NewWriterSize(w, 64<<10)}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}

// value writes v compact (json.Encoder ends each value with a newline,
// which is dropped).
func (e *encoder) value(v any) error {
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return err
	}
	_, err := e.w.Write(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
	return err
}

// encodeTo writes the log, newline-terminated, filling the schema and the
// headline when they are not set yet.
func (l *Log) encodeTo(w io.Writer) error {
	c := *l
	if c.Schema == "" {
		c.Schema = Schema
	}
	if c.Verdict == "" {
		c.Verdict, c.Summary = c.Headline()
	}
	e := newEncoder(w)
	// Addressable, so that list elements go to the encoder as pointers:
	// boxing a 200-byte element by value allocated a copy of each.
	v := reflect.ValueOf(&c).Elem()
	e.w.WriteString("{")
	first := true
	for _, f := range logFields {
		fv := v.Field(f.index)
		if f.omitEmpty && isEmpty(fv) {
			continue
		}
		if !first {
			e.w.WriteString(",")
		}
		first = false
		e.w.WriteString("\n  \"" + f.name + "\": ")
		if !f.list || fv.IsNil() || fv.Len() == 0 {
			if err := e.value(fv.Interface()); err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			continue
		}
		e.w.WriteString("[")
		for i := range fv.Len() {
			if i > 0 {
				e.w.WriteString(",")
			}
			e.w.WriteString("\n    ")
			if err := e.value(fv.Index(i).Addr().Interface()); err != nil {
				return fmt.Errorf("%s[%d]: %w", f.name, i, err)
			}
		}
		e.w.WriteString("\n  ]")
	}
	e.w.WriteString("\n}\n")
	return e.w.Flush()
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
