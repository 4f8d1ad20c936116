package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/invopop/jsonschema"
	"go.yaml.in/yaml/v3"
)

// Seed 002's permission says who a tool acts as and what it may touch. klock
// holds a call to it (guard/check): acts_as is passed to the tool with every
// call, and scope and forbidden are lists of entries the gateway checks the
// call's arguments against. An entry is one of
//
//	/srv/data/**, ${workdir}/.git/**   a path pattern (exact, /dir/* or
//	                                   /dir/**, as in intents): matched
//	                                   against the arguments that are paths,
//	                                   where they lead (cleaned, symlinks
//	                                   followed)
//	customer_id=cus_*                  an argument pattern: the argument's
//	                                   values (every string, number and
//	                                   boolean in it) against a glob (* any
//	                                   run of characters, ? one, \ escapes)
//	*=*payout*                         forbidden only: any argument's values
//
// scope bounds: every path argument must lead inside one of its path
// patterns (when it has any), and every value of an argument it names must
// match one of that argument's globs. forbidden refuses a call with a path
// argument leading into one of its path patterns or a value matching one
// of its argument patterns. Prose ("cross-customer access") cannot be
// checked and is refused at validation, like every field the gateway could
// not enforce.

// PermissionList is permission.scope or permission.forbidden: a YAML list of
// entries, or seed 002's one string of entries separated by commas.
type PermissionList []string

func (l *PermissionList) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		for _, e := range strings.Split(n.Value, ",") {
			if e = strings.TrimSpace(e); e != "" {
				// Each entry is located at the string that holds it.
				d.at(n, fmt.Sprintf("%s[%d]", path, len(*l)))
				*l = append(*l, e)
			}
		}
		return
	}
	var s []string
	d.decode(n, reflectElem(&s), path)
	*l = s
}

// JSONSchema describes a permission list: a list of entries or one string.
func (PermissionList) JSONSchema() *jsonschema.Schema {
	desc := `path patterns (/srv/data/**, ${workdir}/.git/**) and argument patterns (name=glob; *=glob in forbidden only)`
	return &jsonschema.Schema{Description: desc, OneOf: []*jsonschema.Schema{
		{Type: "array", Items: &jsonschema.Schema{Type: "string"}},
		{Type: "string", Description: "seed 002's form: entries separated by commas"},
	}}
}

// AnyArgument is the argument name of a forbidden entry that matches every
// argument's values.
const AnyArgument = "*"

// PermEntry is one parsed entry of scope or forbidden: a path pattern
// (Path set) or an argument pattern (Arg and Glob).
type PermEntry struct {
	Raw  string
	Path *PathPattern
	Arg  string
	Glob string
}

// ErrPermEntry marks an entry that is neither a path pattern nor an
// argument pattern: it cannot be checked.
var ErrPermEntry = errors.New("permission entry cannot be checked")

// ParsePermEntry reads one entry.
func ParsePermEntry(s string) (PermEntry, error) {
	e := PermEntry{Raw: s}
	if strings.HasPrefix(s, "/") || strings.HasPrefix(s, WorkdirVar) || strings.HasPrefix(s, TmpdirVar) {
		p, err := ParsePathPattern(s)
		if err != nil {
			return e, fmt.Errorf("%w: %v", ErrPermEntry, err)
		}
		e.Path = &p
		return e, nil
	}
	name, glob, ok := strings.Cut(s, "=")
	name, glob = strings.TrimSpace(name), strings.TrimSpace(glob)
	switch {
	case !ok:
		return e, fmt.Errorf("%w: %q is neither a path pattern nor an argument pattern (name=glob): prose says nothing the gateway can check", ErrPermEntry, s)
	case name == "" || strings.IndexFunc(name, unicode.IsSpace) >= 0 || name != AnyArgument && strings.ContainsAny(name, "*?[]\\"):
		return e, fmt.Errorf("%w: %q: before = comes one argument's name (or *), got %q", ErrPermEntry, s, name)
	case glob == "":
		return e, fmt.Errorf("%w: %q: after = comes a glob of the argument's values (write name=* for any value)", ErrPermEntry, s)
	case (len(glob)-len(strings.TrimRight(glob, `\`)))%2 == 1:
		return e, fmt.Errorf("%w: %q: the glob ends in a lone \\ (escape it as \\\\)", ErrPermEntry, s)
	}
	e.Arg, e.Glob = name, glob
	return e, nil
}

// PathIn is the entry's path pattern with a leading ${workdir} expanded.
func (e PermEntry) PathIn(workdir string) PathPattern {
	p := *e.Path
	if rest, ok := strings.CutPrefix(p.Path, WorkdirVar); ok {
		p.Path = strings.TrimSuffix(workdir, "/") + rest
		if p.Path == "" {
			p.Path = "/"
		}
	}
	return p
}

// MatchValue reports whether the argument pattern's glob matches s: * is
// any run of characters (/ included), ? one character, \ escapes the next.
func (e PermEntry) MatchValue(s string) bool { return globMatch(e.Glob, s) }

func globMatch(g, s string) bool {
	for len(g) > 0 {
		switch g[0] {
		case '*':
			for len(g) > 0 && g[0] == '*' {
				g = g[1:]
			}
			if g == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(g, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			_, size := firstRune(s)
			g, s = g[1:], s[size:]
			continue
		case '\\':
			g = g[1:]
		}
		if s == "" || g[0] != s[0] {
			return false
		}
		g, s = g[1:], s[1:]
	}
	return s == ""
}

func firstRune(s string) (rune, int) {
	for i, r := range s {
		if i > 0 {
			return r, i
		}
	}
	return 0, len(s)
}

// validatePermission: acts_as travels to the tool in a header and in _meta
// (one line of text), and every scope and forbidden entry must be one the
// gateway can check against this tool's arguments.
func validatePermission(t *Tool, f string, r *report) {
	f += ".permission"
	if strings.IndexFunc(t.Permission.ActsAs, unicode.IsControl) >= 0 {
		r.errorf("format", f+".acts_as", "write the identity on one line, without control characters", "acts_as holds a control character: it could not travel in an HTTP header")
	}
	names := make([]string, 0, len(t.InputSchema))
	hasPath := false
	for n, p := range t.InputSchema {
		names = append(names, n)
		hasPath = hasPath || p != nil && p.Type == TypePath
	}
	sort.Strings(names)
	for _, list := range []struct {
		field   string
		entries PermissionList
	}{{"scope", t.Permission.Scope}, {"forbidden", t.Permission.Forbidden}} {
		for j, s := range list.entries {
			ef := fmt.Sprintf("%s.%s[%d]", f, list.field, j)
			e, err := ParsePermEntry(s)
			switch {
			case err != nil:
				r.errorf("unenforceable", ef, "write a path pattern (/srv/data/**, ${workdir}/.git/**) or an argument pattern (name=glob); keep prose in description", "%v", err)
			case e.Path != nil && len(names) > 0 && !hasPath:
				r.errorf("unenforceable", ef, "declare the tool's path arguments type: path (with within), or remove the entry",
					"%s's input_schema has no type path argument, so no argument is read as a path and %q checks nothing", t.Name, s)
			case e.Arg == AnyArgument && list.field == "scope":
				r.errorf("format", ef, "name the argument the entry bounds (name=glob), one entry per argument", "*= in scope would bound every argument with one glob")
			case e.Arg != "" && e.Arg != AnyArgument && len(names) > 0 && t.InputSchema[e.Arg] == nil:
				r.errorf("unknown-argument", ef, "name an argument of input_schema"+didYouMean(e.Arg, names), "%q is not an argument of %s", e.Arg, t.Name)
			}
		}
	}
}
