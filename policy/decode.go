package policy

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// The decoder walks a yaml.Node tree (YAML and JSON both parse to one) into
// the manifest structs. Unlike yaml.Decode it records the position of every
// field path, rejects unknown and duplicate keys with a suggestion, refuses
// floats where integers are wanted, and keeps going after an error so that
// one run reports every problem.

// maxNodes bounds the work a single manifest can cause (alias expansion
// included); a manifest is a few hundred nodes.
const maxNodes = 200_000

type decoder struct {
	r     *report
	nodes int
}

// nodeDecoder is implemented by types with their own YAML shape (an intent
// in string or map form, money as a map or a decimal string).
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, path string)
}

var nodeDecoderType = reflect.TypeFor[nodeDecoder]()

func (d *decoder) at(n *yaml.Node, path string) {
	if _, ok := d.r.pos[path]; !ok {
		d.r.pos[path] = Pos{File: d.r.file, Line: n.Line, Col: n.Column}
	}
}

func (d *decoder) fail(n *yaml.Node, path, code, want, format string, args ...any) {
	d.at(n, path)
	d.r.diags = append(d.r.diags, Diagnostic{
		Severity: SeverityError, Code: code,
		Pos:   Pos{File: d.r.file, Line: n.Line, Col: n.Column},
		Field: path, Problem: fmt.Sprintf(format, args...), Want: want,
	})
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int":
			return "an integer (" + n.Value + ")"
		case "!!float":
			return "a number (" + n.Value + ")"
		case "!!bool":
			return "a boolean (" + n.Value + ")"
		}
		return fmt.Sprintf("the string %q", n.Value)
	}
	return "an unsupported YAML node"
}

// resolve follows aliases, bounded by maxNodes.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = d.resolve(n)
	if n == nil {
		return
	}
	d.nodes++
	if d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.fail(n, path, "too-large", "keep a manifest under 200,000 YAML nodes", "manifest is too large or expands too many aliases")
		}
		return
	}
	d.at(n, path)
	if v.CanAddr() && v.Addr().Type().Implements(nodeDecoderType) {
		v.Addr().Interface().(nodeDecoder).decodeNode(d, n, path)
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && v.Kind() != reflect.Interface {
		return // an explicit null leaves the zero value; validation decides if that is allowed
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "type", "write a YAML list", "want a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "type", "write a string", "want a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			d.fail(n, path, "type", "write true or false", "want a boolean, got %s", kindName(n))
			return
		}
		v.SetBool(n.Value == "true" || n.Value == "True" || n.Value == "TRUE")
	case reflect.Int, reflect.Int64, reflect.Int32:
		i, ok := d.integer(n, path)
		if !ok {
			return
		}
		if v.OverflowInt(i) {
			d.fail(n, path, "range", "use a smaller number", "%s is out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		i, ok := d.integer(n, path)
		if !ok {
			return
		}
		if i < 0 || v.OverflowUint(uint64(i)) {
			d.fail(n, path, "range", "use a non-negative integer that fits", "%s is out of range", n.Value)
			return
		}
		v.SetUint(uint64(i))
	case reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!float" && n.ShortTag() != "!!int") {
			d.fail(n, path, "type", "write a number", "want a number, got %s", kindName(n))
			return
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, path, "type", "write a finite number", "%q is not a finite number", n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Interface:
		var x any
		if err := n.Decode(&x); err != nil {
			d.fail(n, path, "type", "", "cannot read value: %v", err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		d.fail(n, path, "internal", "", "field of kind %s cannot be decoded", v.Kind())
	}
}

func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		want := "write a whole number"
		if n.ShortTag() == "!!float" {
			want = "write a whole number; fractional values are not allowed here"
		}
		d.fail(n, path, "type", want, "want an integer, got %s", kindName(n))
		return 0, false
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		d.fail(n, path, "range", "use a number that fits in 64 bits", "%s is out of range", n.Value)
		return 0, false
	}
	return i, true
}

type fieldInfo struct {
	idx   map[string]int
	names []string
}

var fieldCache sync.Map // reflect.Type -> fieldInfo

// fieldIndex maps YAML keys to struct field indexes (cached per type).
func fieldIndex(t reflect.Type) (map[string]int, []string) {
	if fi, ok := fieldCache.Load(t); ok {
		return fi.(fieldInfo).idx, fi.(fieldInfo).names
	}
	idx := map[string]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		idx[name] = i
		names = append(names, name)
	}
	sort.Strings(names)
	fieldCache.Store(t, fieldInfo{idx, names})
	return idx, names
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "type", "write a map of fields", "want a map, got %s", kindName(n))
		return
	}
	idx, names := fieldIndex(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := d.resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "type", "use plain string keys", "map key must be a string, got %s", kindName(k))
			continue
		}
		fp := join(path, k.Value)
		fi, ok := idx[k.Value]
		if !ok {
			want := "known fields: " + strings.Join(names, ", ")
			if s := suggest(k.Value, names); s != "" {
				want = "did you mean " + s + "?"
			}
			d.fail(k, fp, "unknown-field", want, "unknown field %q", k.Value)
			continue
		}
		if seen[k.Value] {
			d.fail(k, fp, "duplicate-field", "keep one", "field %q appears twice", k.Value)
			continue
		}
		seen[k.Value] = true
		d.at(k, fp)
		d.decode(val, v.Field(fi), fp)
	}
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "type", "write a map", "want a map, got %s", kindName(n))
		return
	}
	if v.Type().Key().Kind() != reflect.String {
		d.fail(n, path, "internal", "", "map key type unsupported")
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "type", "use plain string keys", "map key must be a string, got %s", kindName(k))
			continue
		}
		fp := join(path, k.Value)
		if v.MapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key())).IsValid() {
			d.fail(k, fp, "duplicate-field", "keep one", "key %q appears twice", k.Value)
			continue
		}
		ev := reflect.New(v.Type().Elem()).Elem()
		d.decode(n.Content[i+1], ev, fp)
		v.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), ev)
	}
}

// parseDocument parses data as a single YAML (or JSON) document.
func parseDocument(file string, data []byte) (*yaml.Node, *Diagnostic) {
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		line := 0
		msg := err.Error()
		// yaml errors read "yaml: line N: ..."; keep the line for the position.
		if rest, ok := strings.CutPrefix(msg, "yaml: line "); ok {
			if num, tail, ok := strings.Cut(rest, ":"); ok {
				line, _ = strconv.Atoi(num)
				msg = strings.TrimSpace(tail)
			}
		}
		if msg == "EOF" {
			msg = "the file is empty"
		}
		pos := Pos{File: file, Line: line, Col: 1}
		// The parser's line is the start of the block it was in, not the
		// error's: find the error's own line and column.
		if l, c, note, ok := syntaxPos(data); ok {
			pos.Line, pos.Col = l, c
			switch {
			case note != "":
				msg += " (" + note + ")"
			case line != 0 && line < l:
				msg += fmt.Sprintf(" (in the block that starts at line %d)", line)
			}
		}
		return nil, &Diagnostic{Code: "syntax", Pos: pos, Problem: msg, Want: "fix the YAML/JSON syntax"}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Diagnostic{Code: "syntax", Pos: Pos{File: file, Line: extra.Line, Col: extra.Column}, Problem: "more than one YAML document", Want: "keep one manifest per file"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	return root, nil
}

func reflectElem[T any](p *T) reflect.Value { return reflect.ValueOf(p).Elem() }
