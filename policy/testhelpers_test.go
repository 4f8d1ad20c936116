package policy

import (
	"strings"
	"testing"
)

// base is a minimal valid manifest; tests splice intents and tools into it.
const base = `apiVersion: klock/v1
agent: {id: t-agent}
workdir: /w
intents:
%s
declared_tools:
%s
cost_envelope:
  expected_tokens_in: 100
  max_tokens_in: 200
  expected_tokens_out: 10
  max_tokens_out: 20
  expected_latency_ms: 10
  max_latency_ms: 20
  context_efficiency: 0.7
  expected_cost: "0.01 USD"
  max_cost: "0.02 USD"
`

func manifest(intents []string, tools string) string {
	var b strings.Builder
	for _, in := range intents {
		b.WriteString("  - " + in + "\n")
	}
	if tools == "" {
		tools = "  []"
	}
	return strings.Replace(strings.Replace(base, "%s", b.String(), 1), "%s", tools, 1)
}

func mustParse(t testing.TB, src string) *Manifest {
	t.Helper()
	m, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, src)
	}
	return m
}

func mustCompile(t testing.TB, intents ...string) *Ruleset {
	t.Helper()
	rs, err := Compile(mustParse(t, manifest(intents, "")))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func codes(err error) []string {
	ve, ok := err.(*ValidationError)
	if !ok {
		return nil
	}
	var out []string
	for _, d := range ve.Diags {
		out = append(out, d.Code)
	}
	return out
}
