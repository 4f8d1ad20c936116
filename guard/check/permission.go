package check

import (
	"fmt"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// permission is a tool's compiled permission.scope and permission.forbidden
// (seed 002; policy/permission.go says what an entry means), ${workdir}
// expanded. A call that leaves scope or touches forbidden is refused with
// tool_restricted (reason permission_scope or permission_forbidden) naming
// the field, the entry and the argument.
type permission struct {
	scopePaths, forbidPaths []policy.PathPattern
	scopeArgs               map[string][]policy.PermEntry
	forbidArgs              []policy.PermEntry
	// schema: the tool declares input_schema, so only its type path
	// arguments are paths; without one, every absolute path (or file://
	// URI) an argument holds is.
	schema bool
}

// compilePermission compiles t's entries; nil when it declares none.
// Validation refused every entry that does not parse.
func compilePermission(t *policy.Tool, workdir string) (*permission, error) {
	if len(t.Permission.Scope)+len(t.Permission.Forbidden) == 0 {
		return nil, nil
	}
	p := &permission{scopeArgs: map[string][]policy.PermEntry{}, schema: len(t.InputSchema) > 0}
	for i, list := range []policy.PermissionList{t.Permission.Scope, t.Permission.Forbidden} {
		for _, s := range list {
			e, err := policy.ParsePermEntry(s)
			if err != nil {
				return nil, err
			}
			switch {
			case e.Path != nil && i == 0:
				p.scopePaths = append(p.scopePaths, e.PathIn(workdir))
			case e.Path != nil:
				p.forbidPaths = append(p.forbidPaths, e.PathIn(workdir))
			case i == 0:
				p.scopeArgs[e.Arg] = append(p.scopeArgs[e.Arg], e)
			default:
				p.forbidArgs = append(p.forbidArgs, e)
			}
		}
	}
	return p, nil
}

// pathArg is one argument value read as a path, and where it leads.
type pathArg struct {
	name, raw string
	views     pathViews
}

// checkPermission holds the call's arguments to the tool's permission;
// paths are where its type path arguments lead (checkArgs). A refusal in
// a confidential call names the argument and the entry, not the value.
func (c *contract) checkPermission(args map[string]any, paths map[string]pathViews, confidential bool) *toolerr.Error {
	p := c.perm
	if p == nil {
		return nil
	}
	show := func(v string) string { return short(v) }
	if confidential {
		show = func(string) string { return "(confidential)" }
	}
	pas, e := c.pathArgs(args, paths, show)
	if e != nil {
		return e
	}
	for _, pa := range pas {
		if e := c.checkPathPermission(pa, show); e != nil {
			return e
		}
	}
	names := make([]string, 0, len(args))
	for n := range args {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		vals := leaves(args[n], nil)
		if v, ok := paths[n]; ok {
			// A path argument is matched as written and where it leads.
			vals = append(vals, v.kernel, v.lexical)
		}
		if e := c.checkArgPermission(n, vals, show); e != nil {
			return e
		}
	}
	return nil
}

// pathArgs lists the call's path values: its type path arguments when the
// tool has an input_schema, else every absolute path or file:// URI among
// its arguments' strings (at the top level or in a list).
func (c *contract) pathArgs(args map[string]any, paths map[string]pathViews, show func(string) string) ([]pathArg, *toolerr.Error) {
	var out []pathArg
	if c.perm.schema {
		for n, v := range paths {
			raw, _ := args[n].(string)
			out = append(out, pathArg{name: n, raw: raw, views: v})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
		return out, nil
	}
	if len(c.perm.scopePaths)+len(c.perm.forbidPaths) == 0 {
		return nil, nil
	}
	for n, v := range args {
		for _, s := range stringsOf(v) {
			p, ok := asPath(s)
			if !ok {
				continue
			}
			var views pathViews
			var err error
			if views.kernel, err = resolvePath(p); err == nil {
				views.lexical, err = resolvePath(path.Clean(p))
			}
			if err != nil {
				return nil, c.permErr("permission_unresolvable", "%s: argument %q is %s, which cannot be resolved (%v): it cannot be checked against permission", c.tool.Name, n, show(s), err)
			}
			out = append(out, pathArg{name: n, raw: s, views: views})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// checkPathPermission: a path leading into forbidden (either view) is
// refused, and so is one leading outside every scope path (either view).
func (c *contract) checkPathPermission(pa pathArg, show func(string) string) *toolerr.Error {
	for _, leads := range []string{pa.views.kernel, pa.views.lexical} {
		for _, f := range c.perm.forbidPaths {
			if covers(f, leads) {
				return c.permErr("permission_forbidden", "%s: argument %q is %s, which leads to %s, inside %s of permission.forbidden",
					c.tool.Name, pa.name, show(pa.raw), show(leads), f)
			}
		}
		if len(c.perm.scopePaths) == 0 {
			continue
		}
		in := false
		for _, s := range c.perm.scopePaths {
			in = in || covers(s, leads)
		}
		if !in {
			return c.permErr("permission_scope", "%s: argument %q is %s, which leads to %s, outside permission.scope (%s)",
				c.tool.Name, pa.name, show(pa.raw), show(leads), patterns(c.perm.scopePaths))
		}
	}
	return nil
}

// checkArgPermission holds one argument's values to the argument entries:
// any value matching a forbidden glob refuses; a scoped argument's every
// value must match one of its scope globs.
func (c *contract) checkArgPermission(name string, vals []string, show func(string) string) *toolerr.Error {
	for _, f := range c.perm.forbidArgs {
		if f.Arg != name && f.Arg != policy.AnyArgument {
			continue
		}
		for _, v := range vals {
			if f.MatchValue(v) {
				return c.permErr("permission_forbidden", "%s: argument %q holds %s, which matches %q of permission.forbidden", c.tool.Name, name, show(v), f.Raw)
			}
		}
	}
	scope := c.perm.scopeArgs[name]
	if len(scope) == 0 {
		return nil
	}
	for _, v := range vals {
		ok := false
		for _, s := range scope {
			ok = ok || s.MatchValue(v)
		}
		if !ok {
			raws := make([]string, len(scope))
			for i, s := range scope {
				raws[i] = s.Raw
			}
			return c.permErr("permission_scope", "%s: argument %q holds %s, outside permission.scope (%s)", c.tool.Name, name, show(v), strings.Join(raws, ", "))
		}
	}
	return nil
}

func (c *contract) permErr(reason, format string, a ...any) *toolerr.Error {
	return toolerr.New(toolerr.Restricted, reason, format, a...)
}

// covers: the pattern covers p, as written or where its own path leads (a
// pattern may name a link: /var/run is /run).
func covers(pat policy.PathPattern, p string) bool {
	if pat.Covers(p) {
		return true
	}
	real, err := resolvePath(pat.Path)
	if err != nil || real == pat.Path {
		return false
	}
	pat.Path = real
	return pat.Covers(p)
}

func patterns(ps []policy.PathPattern) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// leaves appends every string, number and boolean v holds (in lists and
// objects, at any depth) in its JSON text: what an argument entry's glob
// is matched against.
func leaves(v any, out []string) []string {
	switch x := v.(type) {
	case string:
		return append(out, x)
	case float64:
		return append(out, strconv.FormatFloat(x, 'f', -1, 64))
	case bool:
		return append(out, strconv.FormatBool(x))
	case []any:
		for _, e := range x {
			out = leaves(e, out)
		}
	case map[string]any:
		for _, e := range x {
			out = leaves(e, out)
		}
	case nil:
	default:
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// stringsOf is v when it is a string, its strings when it is a list.
func stringsOf(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// asPath reads s as a path: an absolute path on one line, or a file://
// URI's path.
func asPath(s string) (string, bool) {
	if strings.ContainsAny(s, "\n\x00") {
		return "", false
	}
	if strings.HasPrefix(s, "file://") {
		u, err := url.Parse(s)
		if err != nil || u.Path == "" {
			return "", false
		}
		return u.Path, true
	}
	return s, strings.HasPrefix(s, "/")
}
