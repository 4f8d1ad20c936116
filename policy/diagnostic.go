package policy

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors of this package.
var (
	// ErrInvalidManifest is wrapped by every *ValidationError.
	ErrInvalidManifest = errors.New("invalid manifest")
	// ErrSignature is wrapped by signing and verification failures.
	ErrSignature = errors.New("manifest signature")
)

// Severity of a Diagnostic.
type Severity int

const (
	SeverityError Severity = iota
	SeverityWarning
)

func (s Severity) String() string {
	if s == SeverityWarning {
		return "warning"
	}
	return "error"
}

// MarshalText renders the severity as "error" or "warning" in JSON.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Pos is a location in a manifest file. Line and Col are 1-based; zero means
// unknown.
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	default:
		return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
	}
}

// Diagnostic is one finding about a manifest.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Code     string   `json:"code"`  // stable identifier, e.g. "unknown-field"
	Pos      Pos      `json:"pos"`   // where
	Field    string   `json:"field"` // field path, e.g. declared_tools[1].side_effects
	Problem  string   `json:"problem"`
	Want     string   `json:"want,omitempty"` // what would be right
}

func (d Diagnostic) String() string {
	var b strings.Builder
	b.WriteString(d.Pos.String())
	b.WriteString(": ")
	if d.Severity == SeverityWarning {
		b.WriteString("warning: ")
	}
	if d.Field != "" {
		b.WriteString(d.Field)
		b.WriteString(": ")
	}
	b.WriteString(d.Problem)
	if d.Want != "" {
		b.WriteString("; ")
		b.WriteString(d.Want)
	}
	return b.String()
}

// ValidationError lists every error found in a manifest.
type ValidationError struct {
	File  string
	Diags []Diagnostic
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d error(s)", e.File, len(e.Diags))
	for _, d := range e.Diags {
		b.WriteString("\n  ")
		b.WriteString(d.String())
	}
	return b.String()
}

func (e *ValidationError) Unwrap() error { return ErrInvalidManifest }

// report collects diagnostics with positions resolved from field paths.
type report struct {
	file  string
	pos   map[string]Pos
	diags []Diagnostic
}

func (r *report) add(sev Severity, code, field, problem, want string) {
	r.diags = append(r.diags, Diagnostic{Severity: sev, Code: code, Pos: r.lookup(field), Field: field, Problem: problem, Want: want})
}

func (r *report) errorf(code, field, want, format string, args ...any) {
	r.add(SeverityError, code, field, fmt.Sprintf(format, args...), want)
}

func (r *report) warnf(code, field, want, format string, args ...any) {
	r.add(SeverityWarning, code, field, fmt.Sprintf(format, args...), want)
}

// lookup finds the position of a field path, falling back to the nearest
// enclosing path that has one, then to the file itself.
func (r *report) lookup(field string) Pos {
	for p := field; ; {
		if pos, ok := r.pos[p]; ok {
			return pos
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			if pos, ok := r.pos[""]; ok && p != "" {
				return pos
			}
			return Pos{File: r.file}
		}
		p = p[:i]
	}
}

func (r *report) errors() []Diagnostic   { return r.filter(SeverityError) }
func (r *report) warnings() []Diagnostic { return r.filter(SeverityWarning) }

func (r *report) filter(s Severity) []Diagnostic {
	var out []Diagnostic
	for _, d := range r.diags {
		if d.Severity == s {
			out = append(out, d)
		}
	}
	return out
}
