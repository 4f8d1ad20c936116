package policy

import (
	"encoding/json"

	"github.com/invopop/jsonschema"
)

// JSONSchema returns the JSON Schema of the manifest, for editors. The
// schema describes shape only; Parse enforces the cross-field rules.
func JSONSchema() ([]byte, error) {
	r := &jsonschema.Reflector{
		FieldNameTag:               "json",
		RequiredFromJSONSchemaTags: true,
		AllowAdditionalProperties:  false,
		ExpandedStruct:             true,
	}
	s := r.Reflect(&Manifest{})
	s.ID = "https://klock.dev/schema/manifest-v1.json"
	s.Title = "klock manifest (klock/v1)"
	s.Description = "An agent's declared intents (KLIS triples), tools (Tool Trust Contracts) and cost budget."
	s.Required = []string{"apiVersion", "agent", "intents", "cost_envelope"}
	return json.MarshalIndent(s, "", "  ")
}

// JSONSchema describes an intent: "PREDICATE TYPE:object" or the map form.
func (Intent) JSONSchema() *jsonschema.Schema {
	str := &jsonschema.Schema{
		Type:        "string",
		Pattern:     `^(PROVIDES|CONSUMES|MUTATES|DELETES|DEPENDS_ON|RENAMES)\s+(FILE|NET|PROC):\S+$`,
		Description: `e.g. "MUTATES FILE:/srv/repo/src/**", "CONSUMES NET:api.example.com:443/tcp", "CONSUMES NET:*.example.com:443/tcp" (a leading-label wildcard host), "PROVIDES PROC:/usr/bin/git"`,
	}
	props := jsonschema.NewProperties()
	props.Set("predicate", &jsonschema.Schema{Type: "string", Enum: []any{"PROVIDES", "CONSUMES", "MUTATES", "DELETES", "DEPENDS_ON", "RENAMES"}})
	props.Set("object", &jsonschema.Schema{Type: "string", Pattern: `^(FILE|NET|PROC):\S+$`})
	props.Set("subject", &jsonschema.Schema{Type: "string"})
	props.Set("confidence", &jsonschema.Schema{Type: "string", Enum: []any{"High", "Medium", "Low"}})
	props.Set("reason", &jsonschema.Schema{Type: "string"})
	obj := &jsonschema.Schema{Type: "object", Properties: props, Required: []string{"predicate", "object"}, AdditionalProperties: jsonschema.FalseSchema}
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{str, obj}}
}

// JSONSchema describes money: {units, currency} or "12.34 USD".
func (Money) JSONSchema() *jsonschema.Schema {
	props := jsonschema.NewProperties()
	props.Set("units", &jsonschema.Schema{Type: "integer", Minimum: json.Number("0"), Description: "integer minor units (cents, satoshis, wei)"})
	props.Set("currency", &jsonschema.Schema{Type: "string", Description: "ISO 4217 code, or USDC, USDT, BTC, ETH"})
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{
		{Type: "object", Properties: props, Required: []string{"units", "currency"}, AdditionalProperties: jsonschema.FalseSchema},
		{Type: "string", Pattern: `^[0-9]+(\.[0-9]+)? [A-Z]{3,4}$`, Description: `exact decimal and currency, e.g. "12.34 USD"`},
	}}
}
