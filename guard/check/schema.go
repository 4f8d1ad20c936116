package check

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// param is one compiled input_schema entry.
type param struct {
	name    string
	s       *policy.ParamSchema
	pattern *regexp.Regexp
	binding []string // must_match split on "." (task.customer_id -> [task customer_id])
	roots   []string // type path: within, ${workdir} expanded
}

// compileSchema compiles a tool's input_schema. The manifest was validated
// by policy, so a pattern that does not compile here is a bug upstream; it
// is reported, not ignored.
func compileSchema(in map[string]*policy.ParamSchema, workdir string) ([]param, error) {
	names := make([]string, 0, len(in))
	for n := range in {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]param, 0, len(in))
	for _, n := range names {
		p := param{name: n, s: in[n]}
		if p.s == nil {
			return nil, fmt.Errorf("argument %q has an empty schema", n)
		}
		if p.s.Pattern != "" {
			re, err := regexp.Compile(p.s.Pattern)
			if err != nil {
				return nil, fmt.Errorf("argument %q: pattern: %w", n, err)
			}
			p.pattern = re
		}
		if p.s.MustMatch != "" {
			p.binding = strings.Split(p.s.MustMatch, ".")
		}
		if p.s.Type == policy.TypePath {
			if p.roots = p.s.WithinRoots(workdir); len(p.roots) == 0 {
				// Validation requires within; a path confined nowhere
				// would be confined to nothing, so say so rather than
				// allow any path.
				return nil, fmt.Errorf("argument %q: type path without within", n)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// checkArgs validates args against the compiled schema. A contract without
// input_schema accepts any object: it declared no constraint. With one,
// every argument must be declared (an argument nobody reviewed is not part
// of the contract). It returns where each type path argument leads.
func (c *contract) checkArgs(args, ctx map[string]any) (map[string]pathViews, *toolerr.Error) {
	if len(c.params) == 0 {
		return nil, nil
	}
	var paths map[string]pathViews
	for k := range args {
		if _, ok := c.tool.InputSchema[k]; !ok {
			return nil, toolerr.New(toolerr.InvalidArgs, "undeclared_argument",
				"%s: argument %q is not in the tool's input_schema (declared: %s)", c.tool.Name, k, strings.Join(c.argNames, ", "))
		}
	}
	for i := range c.params {
		p := &c.params[i]
		v, present := args[p.name]
		if !present {
			if p.s.IsRequired() {
				return nil, toolerr.New(toolerr.InvalidArgs, "missing_argument", "%s: required argument %q is missing", c.tool.Name, p.name)
			}
			continue
		}
		if v == nil {
			if !p.s.Nullable {
				return nil, toolerr.New(toolerr.InvalidArgs, "null_argument", "%s: argument %q is null and its schema is not nullable", c.tool.Name, p.name)
			}
			continue
		}
		if msg := checkValue(p, v); msg != "" {
			return nil, toolerr.New(toolerr.InvalidArgs, "constraint", "%s: argument %q %s", c.tool.Name, p.name, msg)
		}
		if p.roots != nil {
			views, e := c.checkPath(p, v.(string))
			if e != nil {
				return nil, e
			}
			if paths == nil {
				paths = map[string]pathViews{}
			}
			paths[p.name] = views
		}
		if p.binding != nil {
			want, ok := lookup(ctx, p.binding)
			if !ok {
				return nil, toolerr.New(toolerr.SandboxViolation, "binding_unresolved",
					"%s: argument %q must match %s, and the call's context has no %s (give the gateway the task context)", c.tool.Name, p.name, p.s.MustMatch, p.s.MustMatch)
			}
			if !sameValue(v, want) {
				return nil, toolerr.New(toolerr.SandboxViolation, "binding_mismatch",
					"%s: argument %q is %s, and the contract binds it to %s = %s", c.tool.Name, p.name, short(v), p.s.MustMatch, short(want))
			}
		}
	}
	return paths, nil
}

// checkValue returns "" when v satisfies p, else what is wrong.
func checkValue(p *param, v any) string {
	s := p.s
	switch s.Type {
	case "string", "enum", policy.TypePath:
		str, ok := v.(string)
		if !ok {
			return fmt.Sprintf("must be a string, got %s", jsonType(v))
		}
		if s.Type == "enum" || len(s.Values) > 0 {
			if !slices.Contains(s.Values, str) {
				return fmt.Sprintf("is %q, want one of %s", str, strings.Join(s.Values, ", "))
			}
		}
		n := utf8.RuneCountInString(str)
		if s.MinLength != nil && n < *s.MinLength {
			return fmt.Sprintf("is %d characters, shorter than min_length %d", n, *s.MinLength)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			return fmt.Sprintf("is %d characters, longer than max_length %d", n, *s.MaxLength)
		}
		if p.pattern != nil && !p.pattern.MatchString(str) {
			return fmt.Sprintf("is %s, which does not match the contract's pattern %s", short(str), s.Pattern)
		}
	case "number", "integer":
		f, ok := v.(float64)
		if !ok {
			return fmt.Sprintf("must be a %s, got %s", s.Type, jsonType(v))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "must be a finite number"
		}
		if s.Type == "integer" && f != math.Trunc(f) {
			return fmt.Sprintf("must be an integer, got %v", f)
		}
		if s.Min != nil && f < *s.Min {
			return fmt.Sprintf("is %v, below min %v", f, *s.Min)
		}
		if s.Max != nil && f > *s.Max {
			return fmt.Sprintf("is %v, above max %v", f, *s.Max)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Sprintf("must be a boolean, got %s", jsonType(v))
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Sprintf("must be an array, got %s", jsonType(v))
		}
		if s.MinLength != nil && len(a) < *s.MinLength {
			return fmt.Sprintf("has %d items, fewer than min_length %d", len(a), *s.MinLength)
		}
		if s.MaxLength != nil && len(a) > *s.MaxLength {
			return fmt.Sprintf("has %d items, more than max_length %d", len(a), *s.MaxLength)
		}
	case "object":
		if _, ok := v.(map[string]any); !ok {
			return fmt.Sprintf("must be an object, got %s", jsonType(v))
		}
	}
	return ""
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// lookup resolves a binding such as task.customer_id in the call context:
// context.x is ctx["x"]; task.x is ctx["task"]["x"], or ctx["task.x"].
func lookup(ctx map[string]any, path []string) (any, bool) {
	if len(path) < 2 || ctx == nil {
		return nil, false
	}
	if v, ok := ctx[strings.Join(path, ".")]; ok {
		return v, true
	}
	var cur any = ctx
	if path[0] == "task" {
		cur = ctx["task"]
	}
	for _, k := range path[1:] {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, cur != nil
}

// sameValue compares an argument with a bound context value; the context
// may carry a number as a string (it often comes from a command line).
func sameValue(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	switch b.(type) {
	case string, float64, bool, int, int64:
	default:
		return false
	}
	switch a.(type) {
	case string, float64, bool:
		return fmt.Sprint(a) == fmt.Sprint(b)
	}
	return false
}

func short(v any) string {
	s := fmt.Sprintf("%q", fmt.Sprint(v))
	if len(s) > 80 {
		s = s[:77] + `…"`
	}
	return s
}
