package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Match says which paths a PathPattern covers.
type Match uint8

const (
	// MatchExact covers exactly one path.
	MatchExact Match = iota
	// MatchChildren ("/dir/*") covers the direct children of dir.
	MatchChildren
	// MatchSubtree ("/dir/**") covers dir and everything below it.
	MatchSubtree
)

func (m Match) String() string {
	return [...]string{"exact", "children", "subtree"}[m]
}

// MarshalText renders the match kind.
func (m Match) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// PathPattern is an absolute, clean path with a match kind. These three
// forms are all a kernel backend can enforce exactly: Landlock and BPF-LSM
// rules are exact paths or path-beneath hierarchies; "*.go"-style globs are
// not expressible and are rejected.
type PathPattern struct {
	Path  string // absolute, clean, no trailing slash (except "/")
	Match Match
}

func (p PathPattern) String() string {
	switch p.Match {
	case MatchChildren:
		return strings.TrimSuffix(p.Path, "/") + "/*"
	case MatchSubtree:
		return strings.TrimSuffix(p.Path, "/") + "/**"
	}
	return p.Path
}

// Covers reports whether the pattern covers the clean absolute path q.
func (p PathPattern) Covers(q string) bool {
	switch p.Match {
	case MatchExact:
		return q == p.Path
	case MatchSubtree:
		return q == p.Path || p.Path == "/" || strings.HasPrefix(q, p.Path+"/")
	case MatchChildren:
		dir := path.Dir(q)
		return dir == p.Path && q != p.Path
	}
	return false
}

// ErrUnenforceable marks a pattern the kernel cannot enforce exactly; the
// error text names the nearest enforceable form.
var ErrUnenforceable = errors.New("pattern cannot be enforced exactly by the kernel")

// WorkdirVar expands to the manifest's workdir inside FILE: and PROC: objects.
const WorkdirVar = "${workdir}"

// ParsePathPattern reads an absolute path, "/dir/*" or "/dir/**".
// A leading ${workdir} is kept for later expansion.
func ParsePathPattern(s string) (PathPattern, error) {
	if s == "" {
		return PathPattern{}, errors.New("empty path; want an absolute path such as /srv/repo/src/**")
	}
	if strings.ContainsRune(s, 0) {
		return PathPattern{}, errors.New("path contains a NUL byte")
	}
	if rest, ok := strings.CutPrefix(s, TmpdirVar); ok && (rest == "" || rest[0] == '/') {
		// The agent's /tmp: the same path in every session, private or
		// not, so it is expanded here, before anything reads the path.
		s = "/tmp" + rest
	}
	if !strings.HasPrefix(s, "/") && !strings.HasPrefix(s, WorkdirVar) {
		return PathPattern{}, fmt.Errorf("path %q is relative; kernel rules are absolute: write ${workdir}/%s or an absolute path", s, strings.TrimPrefix(s, "./"))
	}
	body, match := s, MatchExact
	switch {
	case strings.HasSuffix(s, "/**"):
		body, match = strings.TrimSuffix(s, "/**"), MatchSubtree
	case s == "/*":
		body, match = "/", MatchChildren
	case strings.HasSuffix(s, "/*"):
		body, match = strings.TrimSuffix(s, "/*"), MatchChildren
	}
	if body == "" {
		body = "/"
	}
	lit := strings.TrimPrefix(body, WorkdirVar)
	if i := strings.IndexAny(lit, "*?[]{}$"); i >= 0 {
		i += len(body) - len(lit)
		return PathPattern{}, fmt.Errorf("%w: %q has a wildcard inside it; kernel rules are an exact path, a directory's direct children (/dir/*) or a whole subtree (/dir/**); nearest enforceable form: %s (wider), or list the exact files", ErrUnenforceable, s, nearest(s, body[:i]))
	}
	clean := path.Clean(body)
	if strings.HasPrefix(body, WorkdirVar) {
		clean = WorkdirVar + path.Clean("/"+strings.TrimPrefix(body, WorkdirVar))
		if clean == WorkdirVar+"/" {
			clean = WorkdirVar
		}
	}
	if clean != body && clean+"/" != body {
		return PathPattern{}, fmt.Errorf("path %q is not clean (it has . or .. or //); the kernel sees %q: write that", s, PathPattern{Path: clean, Match: match}.String())
	}
	return PathPattern{Path: clean, Match: match}, nil
}

// nearest is the enforceable pattern that covers the glob s whose literal
// part is prefix: the children of the last full directory of prefix when the
// glob stays in that directory, its subtree otherwise.
func nearest(s, prefix string) string {
	dir := prefix
	if !strings.HasSuffix(dir, "/") {
		dir = path.Dir(dir)
	}
	dir = strings.TrimSuffix(dir, "/")
	tail := s[len(dir)+1:]
	if strings.Contains(tail, "/") || strings.Contains(tail, "**") {
		return dir + "/**"
	}
	return dir + "/*"
}

// expandWorkdir replaces a leading ${workdir}.
func (p PathPattern) expandWorkdir(workdir string) PathPattern {
	if rest, ok := strings.CutPrefix(p.Path, WorkdirVar); ok {
		p.Path = path.Clean(workdir + "/" + rest)
	}
	return p
}
