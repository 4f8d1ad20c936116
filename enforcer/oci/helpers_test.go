package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// manifestYAML is a valid manifest with workdir /workspace; extra intents
// are appended to its list.
func manifestYAML(extra ...string) string {
	var b strings.Builder
	b.WriteString(`apiVersion: klock/v1
agent: {id: test-agent, version: 1.0.0, owner: {team: t}}
workdir: /workspace
intents:
  - CONSUMES FILE:${workdir}/**
  - MUTATES FILE:${workdir}/**
`)
	for _, e := range extra {
		b.WriteString("  - " + e + "\n")
	}
	b.WriteString(`cost_envelope:
  expected_tokens_in: 40000
  max_tokens_in: 120000
  expected_tokens_out: 4000
  max_tokens_out: 16000
  expected_latency_ms: 60000
  max_latency_ms: 300000
  context_efficiency: 0.7
  expected_cost: "0.40 USD"
  max_cost: "2.00 USD"
`)
	return b.String()
}

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runcSpec is `runc spec` (runc 1.1), the spec most bundles start from.
func runcSpec(t *testing.T) *specs.Spec {
	t.Helper()
	data, err := os.ReadFile("testdata/runc-spec.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
