package check

import (
	"fmt"

	"github.com/klocklabs/klock/guard/toolerr"
)

// Seed 002: "a tool's output schema is as much a contract as its input
// schema. A nullable field is declared nullable, nulls are rendered to the
// model as an explicit MISSING sentinel". So an output that breaks its
// declared output_schema never reaches the agent as data: a non-nullable
// number that came back null, or as the string "null", is the tool's
// failure (tool_internal_error), not a value the model may reason on. Only
// a field declared nullable may be null, and that null becomes MISSING on
// its way out (toolerr.ReplaceNulls).

// CheckOutput holds out, a tool's structured output as decoded by
// encoding/json (nil when the tool gave none), to the tool's output_schema.
// A tool without output_schema declared nothing and passes. The returned
// error is a tool_internal_error (reason output_schema) naming the field.
func (p *Pipeline) CheckOutput(tool string, out any) *toolerr.Error {
	c, ok := p.tools[tool]
	if !ok || len(c.outputs) == 0 {
		return nil
	}
	bad := func(format string, a ...any) *toolerr.Error {
		e := toolerr.New(toolerr.InternalError, "output_schema", "%s returned an output that breaks its output_schema: %s; the result was withheld (fix the tool, or declare the field nullable)",
			tool, fmt.Sprintf(format, a...))
		e.Check = "output"
		return e
	}
	obj, isObj := out.(map[string]any)
	if !isObj {
		return bad("it declares fields (%s) and returned %s, not an object", joinNames(c.outputs), jsonType(out))
	}
	for i := range c.outputs {
		o := &c.outputs[i]
		v, present := obj[o.name]
		switch {
		case !present && o.s.IsRequired() && !o.s.Nullable:
			// A nullable field left out says what a null says: MISSING.
			return bad("field %q is missing", o.name)
		case !present:
		case v == nil && !o.s.Nullable:
			return bad("field %q is null and is not declared nullable", o.name)
		case v == nil:
			// Nullable: MISSING on its way to the agent.
		default:
			if msg := checkValue(o, v); msg != "" {
				return bad("field %q %s", o.name, msg)
			}
		}
	}
	return nil
}

func joinNames(ps []param) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		s += p.name
	}
	return s
}
