package policy

import (
	"encoding/json"

	"github.com/invopop/jsonschema"
)

// The seeds' spellings (seedforms.go) load, so the schema an editor checks
// a manifest against must accept them too; the struct tags cannot say
// "this key or that one" or "per_<key>_per_<window>", so these extend the
// reflected schema.

func usdDecimalSchema(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{
		Description: desc,
		OneOf: []*jsonschema.Schema{
			{Type: "number", Minimum: json.Number("0")},
			{Type: "string", Pattern: `^[0-9]+(\.[0-9]+)?$`},
		},
	}
}

// JSONSchemaExtend adds KCC's *_usd spellings of expected_cost and max_cost.
func (CostEnvelope) JSONSchemaExtend(s *jsonschema.Schema) {
	s.Properties.Set("expected_cost_usd", usdDecimalSchema("KCC's spelling of expected_cost: US dollars, read exactly from the decimal text (at most 2 decimals)"))
	s.Properties.Set("max_cost_usd", usdDecimalSchema("KCC's spelling of max_cost: US dollars, read exactly from the decimal text (at most 2 decimals)"))
}

// JSONSchemaExtend adds seed 002's tool: (name's other spelling).
func (Tool) JSONSchemaExtend(s *jsonschema.Schema) {
	s.Properties.Set("tool", &jsonschema.Schema{Type: "string", Description: "seed 002's spelling of name"})
	var req []string
	for _, r := range s.Required {
		if r != "name" {
			req = append(req, r)
		}
	}
	s.Required = req
	s.AnyOf = []*jsonschema.Schema{{Required: []string{"name"}}, {Required: []string{"tool"}}}
}

// JSONSchemaExtend adds seed 002's per_<key>_per_<window> limits.
func (RateLimits) JSONSchemaExtend(s *jsonschema.Schema) {
	s.PatternProperties = map[string]*jsonschema.Schema{
		`^per_[a-z][a-z0-9_]*_per_(run|minute|hour|day)$`: {
			Type: "integer", Minimum: json.Number("0"),
			Description: "seed 002: per_agent_<window> is the tool's own limit; per_<key>_<window> limits per value of the argument <key>_id or <key>",
		},
	}
}

// JSONSchemaExtend lets else carry seed 002's note after the verdict.
func (Autonomy) JSONSchemaExtend(s *jsonschema.Schema) {
	if e, ok := s.Properties.Get("else"); ok {
		e.Pattern = `^(ESCALATE|DENY)(\s.*)?$`
		e.Description = "ESCALATE or DENY, optionally followed by a note (\"ESCALATE for human approval\")"
	}
}

// JSONSchemaExtend lets cost_per_invocation be KCC's bare decimal of US
// dollars or an amount with its currency, besides {tokens} / {money}.
func (ToolCost) JSONSchemaExtend(s *jsonschema.Schema) {
	obj := *s
	obj.Description = ""
	*s = jsonschema.Schema{
		Description: "KCC's cost contribution: tokens or money; a bare whole number is refused as ambiguous",
		OneOf: []*jsonschema.Schema{
			&obj,
			{Type: "number", Minimum: json.Number("0"), Description: "US dollars with a fractional part, e.g. 0.01 (write 1.00 for a dollar)"},
			{Type: "string", Pattern: `^[0-9]+(\.[0-9]+)? [A-Z]{3,4}$`, Description: `an exact amount and currency, e.g. "0.01 USD"`},
		},
	}
}

// JSONSchema describes a version label: text, or a number as seed 002
// writes version: 2.
func (Version) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{{Type: "string"}, {Type: "number"}}}
}
