package policy

import (
	"errors"
	"slices"
	"testing"
)

// A confidential argument is a string, never a per-argument rate key, and
// redact patterns compile; each refusal is a typed, located diagnostic.
func TestConfidentialArguments(t *testing.T) {
	tool := func(extra string) string {
		return "  - name: pay\n    blast_radius: local\n    side_effects: READ\n" + extra
	}
	ok := tool("    input_schema: {card: {type: string, confidential: true}, note: {type: string}}\n    audit_logging: {confidential: true, redact: ['\\d{3}-\\d{2}-\\d{4}']}\n")
	m := mustParse(t, manifest([]string{"CONSUMES FILE:/w/**"}, ok))
	if got := m.DeclaredTools[0].ConfidentialArgs(); !slices.Equal(got, []string{"card"}) {
		t.Fatalf("ConfidentialArgs = %v", got)
	}
	for name, tc := range map[string]struct{ tools, field string }{
		"number":   {tool("    input_schema: {n: {type: number, confidential: true}}\n"), "declared_tools[0].input_schema.n.confidential"},
		"rate key": {tool("    input_schema: {card: {type: string, confidential: true}}\n    rate_limits: {per_argument: {card: {per_day: 1}}}\n"), "declared_tools[0].rate_limits.per_argument.card"},
		"pattern":  {tool("    audit_logging: {redact: ['(']}\n"), "declared_tools[0].audit_logging.redact"},
	} {
		_, err := Parse("t.yaml", []byte(manifest([]string{"CONSUMES FILE:/w/**"}, tc.tools)))
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: %v", name, err)
			continue
		}
		found := false
		for _, d := range ve.Diags {
			found = found || d.Field == tc.field
		}
		if !found {
			t.Errorf("%s: no diagnostic at %s: %v", name, tc.field, err)
		}
	}
}
