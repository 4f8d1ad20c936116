package check

import (
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

const contractsDoc = `apiVersion: klock/v1
agent: {id: contracts-01}
intents: []
declared_tools:
  - name: meter_read
    blast_radius: read
    side_effects: READ
    category: B
    capability: tool.energy.meter.read
    max_consecutive_errors: 2
    output_schema:
      kwh: {type: number}
      note: {type: string, nullable: true}
      timestamp: {type: string, required: false}
  - name: query
    blast_radius: read
    side_effects: READ
    category: C
  - name: platform
    blast_radius: read
    side_effects: READ
    category: D
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`

func contracts(t *testing.T, grants string) *Pipeline {
	t.Helper()
	m, err := policy.Parse("contracts.yaml", []byte(contractsDoc+grants))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOutputSchema: a declared non-nullable number that comes back null or
// as a string is the tool's failure; null passes only where nullable.
func TestOutputSchema(t *testing.T) {
	p := contracts(t, "")
	for _, tt := range []struct {
		name string
		out  any
		want string // "" passes; else a fragment of the message
	}{
		{"number", map[string]any{"kwh": 123.5, "note": "x"}, ""},
		{"nullable null", map[string]any{"kwh": 1.0, "note": nil}, ""},
		{"optional absent, nullable absent", map[string]any{"kwh": 1.0, "note": "n"}, ""},
		{"null number", map[string]any{"kwh": nil, "note": "x"}, `"kwh" is null`},
		{"stringified null", map[string]any{"kwh": "null", "note": "x"}, `"kwh" must be a number, got a string`},
		{"missing required", map[string]any{"note": "x"}, `"kwh" is missing`},
		{"not an object", "123.5", "not an object"},
		{"no output", nil, "not an object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := p.CheckOutput("meter_read", tt.out)
			switch {
			case tt.want == "" && e != nil:
				t.Fatalf("refused: %v", e)
			case tt.want != "" && e == nil:
				t.Fatalf("%v passed", tt.out)
			case tt.want != "" && (e.Class != toolerr.InternalError || e.Reason != "output_schema" || !strings.Contains(e.Message, tt.want)):
				t.Fatalf("got %+v, want tool_internal_error output_schema with %q", e, tt.want)
			}
		})
	}
	if e := p.CheckOutput("query", "anything"); e != nil {
		t.Fatalf("a tool without output_schema declared nothing: %v", e)
	}
}

// TestConsecutiveErrorsStopTheToolForTheRun: seed 002's stopping rule.
func TestConsecutiveErrorsStopTheToolForTheRun(t *testing.T) {
	p := contracts(t, "")
	call := &Call{Tool: "meter_read", RunID: "r1"}
	p.Outcome("meter_read", "r1", true)
	p.Outcome("meter_read", "r1", false) // a success resets the count
	p.Outcome("meter_read", "r1", true)
	if d := p.Decide(call); d.Verdict != Allow {
		t.Fatalf("one error in a row stopped it: %v", d.Err)
	}
	p.Outcome("meter_read", "r1", true) // max_consecutive_errors: 2
	d := p.Decide(call)
	if d.Verdict != Deny || d.Err.Class != toolerr.Restricted || d.Err.Reason != "stopped" {
		t.Fatalf("after 2 errors in a row: %v %+v", d.Verdict, d.Err)
	}
	p.Outcome("meter_read", "r1", false) // a late success does not restart it
	if d := p.Decide(call); d.Verdict != Deny {
		t.Fatal("a stopped tool restarted within its run")
	}
	if d := p.Decide(&Call{Tool: "meter_read", RunID: "r2"}); d.Verdict != Allow {
		t.Fatalf("another run is not stopped: %v", d.Err)
	}
	// The default is 3.
	for i := 0; i < 2; i++ {
		p.Outcome("query", "r1", true)
	}
	m, _ := policy.Parse("c.yaml", []byte(contractsDoc+"grants: [{tool: query, capabilities: [tool.query.invoke, tool.query.sensitive]}]\n"))
	p2, _ := New(m)
	for i := 0; i < 3; i++ {
		if d := p2.Decide(&Call{Tool: "query", RunID: "r"}); d.Verdict != Allow {
			t.Fatalf("call %d: %v", i, d.Err)
		}
		p2.Outcome("query", "r", true)
	}
	if d := p2.Decide(&Call{Tool: "query", RunID: "r"}); d.Verdict != Deny || d.Err.Reason != "stopped" {
		t.Fatalf("default of 3: %v %+v", d.Verdict, d.Err)
	}
}

// TestCategoriesAreSecurityRules: C needs its extra capability from the
// grants; D waits for governance on its first use in each run; grants
// withhold and grant finer codes.
func TestCategoriesAreSecurityRules(t *testing.T) {
	p := contracts(t, "")
	d := p.Decide(&Call{Tool: "query"})
	if d.Verdict != Deny || d.Err.Class != toolerr.CapabilityMissing || !strings.Contains(d.Err.Message, "tool.query.sensitive") {
		t.Fatalf("category C without its extra capability: %v %+v", d.Verdict, d.Err)
	}
	d = p.Decide(&Call{Tool: "platform", RunID: "r1"})
	if d.Verdict != Escalate || d.Check != "category" || !d.Governance {
		t.Fatalf("category D first use: %v %q governance %v", d.Verdict, d.Check, d.Governance)
	}
	p.Governed("platform", "r1")
	if d := p.Decide(&Call{Tool: "platform", RunID: "r1"}); d.Verdict != Allow {
		t.Fatalf("category D after its governance approval: %v %v", d.Verdict, d.Why)
	}
	if d := p.Decide(&Call{Tool: "platform", RunID: "r2"}); d.Verdict != Escalate {
		t.Fatalf("category D in a new run: %v", d.Verdict)
	}
	if d := p.Decide(&Call{Tool: "meter_read"}); d.Verdict != Allow {
		t.Fatalf("finer capability code held by default: %v", d.Err)
	}

	p = contracts(t, `grants:
  - {tool: query, capabilities: [tool.query.invoke, tool.query.sensitive]}
  - {tool: meter_read, capabilities: [tool.energy.meter.write]}
`)
	if d := p.Decide(&Call{Tool: "query"}); d.Verdict != Allow {
		t.Fatalf("category C with its extra capability granted: %v", d.Err)
	}
	d = p.Decide(&Call{Tool: "meter_read"})
	if d.Verdict != Deny || d.Err.Class != toolerr.CapabilityMissing || !strings.Contains(d.Err.Message, "tool.energy.meter.read") {
		t.Fatalf("withheld finer code: %v %+v", d.Verdict, d.Err)
	}
}
