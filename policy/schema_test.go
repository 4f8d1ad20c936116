package policy

import (
	"strings"
	"testing"
)

// What loads is what the schema describes: the seeds' spellings included.
func TestSchemaDescribesSeedForms(t *testing.T) {
	js, err := JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"max_cost_usd"`, `"expected_cost_usd"`, `"tool": {`, `_per_(run|minute|hour|day)$`, `^(ESCALATE|DENY)(\\s.*)?$`, `seed 002's syntax`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("schema lacks %s", want)
		}
	}
	if strings.Contains(string(js), `"else_note"`) {
		t.Error("schema lists else_note, which a manifest cannot set")
	}
}
