package mcp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// everythingManifest declares server-everything's get-structured-content
// with the output contract given (its real output is {temperature: number,
// conditions: string, humidity: number}).
func everythingManifest(t *testing.T, outputSchema string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "everything.yaml")
	writeFile(t, p, `apiVersion: klock/v1
agent: {id: everything-01}
intents: []
declared_tools:
  - name: get-structured-content
    blast_radius: read
    side_effects: READ
    category: B
    max_consecutive_errors: 2
    input_schema:
      location: {type: enum, values: [New York, Chicago, Los Angeles]}
    output_schema: `+outputSchema+`
    audit_logging: {records: [actor, location, conditions, timestamp]}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`)
	return p
}

// TestOutputContractOnTheWire: a real server's structured output is held to
// the declared output_schema. A field declared a number that comes back a
// string is a tool_internal_error, never data for the model; after
// max_consecutive_errors such failures the tool is stopped for the run; a
// true contract passes, its audit_logging.records values are in the audit
// log, and klock audit verify checks the log's chain (and finds a change).
func TestOutputContractOnTheWire(t *testing.T) {
	everything := npmBin(t, "mcp-server-everything")
	args := map[string]any{"location": "Chicago"}

	state := t.TempDir()
	wrong := everythingManifest(t, `{temperature: {type: number}, conditions: {type: number}, humidity: {type: number}}`)
	s := connect(t, "-m", wrong, "--state-dir", state, "--", "node", everything, "stdio")
	for i := 0; i < 2; i++ {
		e := refusal(t, call(t, s, "get-structured-content", args))
		if e.Class != "tool_internal_error" || e.Reason != "output_schema" || !strings.Contains(e.Message, `"conditions" must be a number`) {
			t.Fatalf("call %d: %+v", i+1, e)
		}
	}
	e := refusal(t, call(t, s, "get-structured-content", args))
	if e.Class != "tool_restricted" || e.Reason != "stopped" {
		t.Fatalf("after 2 consecutive errors: %+v", e)
	}
	s.Close()

	state = t.TempDir()
	right := everythingManifest(t, `{temperature: {type: number}, conditions: {type: string}, humidity: {type: number, min: 0, max: 100}}`)
	s = connect(t, "-m", right, "--state-dir", state, "--", "node", everything, "stdio")
	if r := call(t, s, "get-structured-content", args); r.IsError {
		t.Fatalf("a true output contract refused: %s", text(r))
	}
	s.Close()
	log := filepath.Join(state, "gateway", "everything-01", "audit.jsonl")
	var recorded map[string]any
	for _, r := range auditRecords(t, log) {
		if r["event"] == "result" {
			recorded, _ = r["recorded"].(map[string]any)
		}
	}
	if recorded["location"] != "Chicago" || recorded["conditions"] == nil {
		t.Fatalf("audit_logging.records values not audited: %v", recorded)
	}
	if out, err := exec.Command(klockBin, "audit", "verify", log).CombinedOutput(); err != nil || !strings.Contains(string(out), "chain intact") {
		t.Fatalf("klock audit verify: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(log)
	os.WriteFile(log, []byte(strings.Replace(string(data), "Chicago", "Boston", 1)), 0o600)
	out, err := exec.Command(klockBin, "audit", "verify", log).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("a changed audit log verified: %v\n%s", err, out)
	}
}
