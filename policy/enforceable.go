package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Rules that keep a contract enforceable: a field
// the gateway could not enforce is refused here, at validation, rather than
// parsed and ignored at run time.

// DefaultMaxConsecutiveErrors is seed 002's stopping rule when the contract
// sets none: after this many errors in a row a tool is stopped for the run.
const DefaultMaxConsecutiveErrors = 3

// ConsecutiveErrorLimit returns the tool's stopping rule.
func (t *Tool) ConsecutiveErrorLimit() int {
	if t.MaxConsecutiveErrors > 0 {
		return t.MaxConsecutiveErrors
	}
	return DefaultMaxConsecutiveErrors
}

// SensitiveCapability is the extra capability a category C tool needs
// (seed 004 §3.3: "require additional capabilities"), granted only by an
// operator in the manifest's grants.
func (t *Tool) SensitiveCapability() string { return "tool." + t.Name + ".sensitive" }

// RollbackCall reads rollback.mechanism as a call: "void_refund(refund_id)"
// is the tool void_refund with the argument refund_id; "void_refund" the
// tool with no argument named. ok is false when the mechanism is prose
// ("discard draft") rather than a tool name.
func (r Rollback) RollbackCall() (tool string, args []string, ok bool) {
	m := strings.TrimSpace(r.Mechanism)
	name, rest, paren := strings.Cut(m, "(")
	name = strings.TrimSpace(name)
	if !ValidName(name, 128) || strings.ContainsAny(name, " \t") {
		return "", nil, false
	}
	if paren {
		inner, ok := strings.CutSuffix(strings.TrimSpace(rest), ")")
		if !ok {
			return "", nil, false
		}
		for _, a := range strings.Split(inner, ",") {
			if a = strings.TrimSpace(a); a != "" {
				args = append(args, a)
			}
		}
	}
	return name, args, true
}

func validateEnforceable(m *Manifest, r *report) {
	byName := map[string]*Tool{}
	for i := range m.DeclaredTools {
		byName[m.DeclaredTools[i].Name] = &m.DeclaredTools[i]
	}
	for i := range m.DeclaredTools {
		t := &m.DeclaredTools[i]
		f := fmt.Sprintf("declared_tools[%d]", i)
		if t.MaxConsecutiveErrors < 0 {
			r.errorf("range", f+".max_consecutive_errors", "use a positive number (default 3)", "%d is negative", t.MaxConsecutiveErrors)
		}
		validateBelongs(t, f, byName, r)
		validatePermission(t, f, r)
		validateCategory(t, f, r)
	}
	for i, g := range m.Grants {
		for j, c := range g.Capabilities {
			if !capabilityRe.MatchString(c) {
				r.errorf("format", fmt.Sprintf("grants[%d].capabilities[%d]", i, j), "write tool.<name>.invoke or a finer code such as tool.energy.meter.read", "%q is not a capability code", c)
			}
		}
	}
}

// validateBelongs: must_belong_to is enforced by calling a declared READ
// tool (lookup) with the owner argument; without one it is unenforceable.
func validateBelongs(t *Tool, f string, tools map[string]*Tool, r *report) {
	names := make([]string, 0, len(t.InputSchema))
	for n := range t.InputSchema {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := t.InputSchema[name]
		if p == nil {
			continue
		}
		pf := f + ".input_schema." + name
		switch {
		case p.MustBelongTo == "" && p.Lookup != "":
			r.errorf("lookup", pf+".lookup", "add must_belong_to: <owner argument>, or remove lookup", "lookup without must_belong_to checks nothing")
		case p.MustBelongTo == "":
		case t.InputSchema[p.MustBelongTo] == nil:
			r.errorf("unknown-argument", pf+".must_belong_to", "name another argument of input_schema"+didYouMean(p.MustBelongTo, names), "%q is not an argument of %s", p.MustBelongTo, t.Name)
		case p.Lookup == "":
			r.errorf("unenforceable", pf+".must_belong_to", fmt.Sprintf("add lookup: <a declared READ tool taking %s whose result lists %s values>, or remove must_belong_to", p.MustBelongTo, name),
				"must_belong_to: %s cannot be enforced without a lookup tool", p.MustBelongTo)
		default:
			lt := tools[p.Lookup]
			switch {
			case lt == nil:
				r.errorf("unknown-tool", pf+".lookup", "name a declared READ tool", "%q is not in declared_tools", p.Lookup)
			case lt.SideEffects != SideEffectRead:
				r.errorf("lookup", pf+".lookup", "name a READ tool: a lookup must change nothing", "%s is %s", p.Lookup, lt.SideEffects)
			case lt.InputSchema[p.MustBelongTo] == nil:
				r.errorf("lookup", pf+".lookup", fmt.Sprintf("give %s an argument %s, or look up through a tool that has one", p.Lookup, p.MustBelongTo),
					"%s takes no argument %q to pass the owner in", p.Lookup, p.MustBelongTo)
			}
		}
	}
}

// validateCategory: seed 004's category A ("no external network, cannot
// run code") may not hold network or file system permissions.
func validateCategory(t *Tool, f string, r *report) {
	if t.Category != "A" {
		return
	}
	if t.ExternalCommunication || t.Type == "external" {
		r.errorf("category", f+".category", "classify it B, C or D, or drop its external communication",
			"category A (safe) tools may not reach the network, and %s communicates externally", t.Name)
	}
	for name, p := range t.InputSchema {
		if p != nil && p.Type == TypePath {
			r.errorf("category", f+".input_schema."+name, "classify it B, C or D, or take no file path",
				"category A (safe) tools may not touch the file system, and %s takes the path %q", t.Name, name)
		}
	}
}
