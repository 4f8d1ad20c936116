package flagfile

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"
)

// Sentinel errors, wrapped by *Error.
var (
	ErrSyntax       = errors.New("not a mapping of settings")
	ErrUnknownKey   = errors.New("unknown key")
	ErrDuplicateKey = errors.New("duplicate key")
	ErrBadValue     = errors.New("bad value")
)

// Error is a problem with the file: Line is 0 when it is about the
// whole file.
type Error struct {
	File string
	Line int
	Key  string
	// Kind is the sentinel (ErrSyntax, ...); Err the cause, if any.
	Kind error
	Err  error
}

func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	msg := where + ": " + e.Kind.Error()
	if e.Key != "" {
		msg += fmt.Sprintf(" %q", e.Key)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap lets errors.Is find the sentinel and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Key is one setting of the file: its key and the flag it sets.
type Key struct {
	Name string // the file's key, snake_case
	Flag string // the flag's name, without dashes
}

// Setting is one key the file sets: a scalar is one value, a list one
// value per element (a repeatable flag is set once per element).
type Setting struct {
	Key, Flag string
	Values    []string
	Line      int
}

// Parse reads data, the file at path, as settings of keys. An empty file,
// or one of comments only, sets nothing.
func Parse(path string, data []byte, keys []Key) ([]Setting, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{File: path, Kind: ErrSyntax, Err: err}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, nil
	}
	m := doc.Content[0]
	if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
		return nil, nil
	}
	if m.Kind != yaml.MappingNode {
		return nil, &Error{File: path, Line: m.Line, Kind: ErrSyntax, Err: errors.New("the file must be a mapping of key: value")}
	}
	flags := make(map[string]string, len(keys))
	for _, k := range keys {
		flags[k.Name] = k.Flag
	}
	seen := map[string]bool{}
	var out []Setting
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, &Error{File: path, Line: k.Line, Kind: ErrSyntax, Err: errors.New("a key must be a plain word")}
		}
		f, ok := flags[k.Value]
		if !ok {
			return nil, &Error{File: path, Line: k.Line, Key: k.Value, Kind: ErrUnknownKey}
		}
		if seen[k.Value] {
			return nil, &Error{File: path, Line: k.Line, Key: k.Value, Kind: ErrDuplicateKey}
		}
		seen[k.Value] = true
		vals, err := values(v)
		if err != nil {
			return nil, &Error{File: path, Line: v.Line, Key: k.Value, Kind: ErrBadValue, Err: err}
		}
		out = append(out, Setting{Key: k.Value, Flag: f, Values: vals, Line: k.Line})
	}
	return out, nil
}

// values are a scalar's value or a list's scalars; null is no value.
func values(v *yaml.Node) ([]string, error) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return nil, nil
	case v.Kind == yaml.ScalarNode:
		return []string{v.Value}, nil
	case v.Kind == yaml.SequenceNode:
		out := make([]string, 0, len(v.Content))
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return nil, errors.New("a list's elements must be plain values")
			}
			out = append(out, e.Value)
		}
		return out, nil
	}
	return nil, errors.New("must be a value or a list of values")
}

// Apply sets fs's flags from settings, except those set on the command
// line (fs.Parse has run): a list sets a repeatable flag once per element,
// an empty value (key: or key: []) leaves the flag at its default.
func Apply(fs *flag.FlagSet, path string, settings []Setting) error {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	for _, s := range settings {
		if onCommandLine[s.Flag] {
			continue
		}
		if fs.Lookup(s.Flag) == nil {
			return &Error{File: path, Line: s.Line, Key: s.Key, Kind: ErrUnknownKey, Err: fmt.Errorf("no flag --%s", s.Flag)}
		}
		for _, v := range s.Values {
			if err := fs.Set(s.Flag, v); err != nil {
				return &Error{File: path, Line: s.Line, Key: s.Key, Kind: ErrBadValue, Err: err}
			}
		}
	}
	return nil
}

// Load reads the file at path and applies it to fs (Parse, then Apply).
// A missing file is not an error when optional (the default path); it
// is otherwise.
func Load(fs *flag.FlagSet, path string, keys []Key, optional bool) error {
	data, err := os.ReadFile(path)
	if optional && errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	settings, err := Parse(path, data, keys)
	if err != nil {
		return err
	}
	return Apply(fs, path, settings)
}
