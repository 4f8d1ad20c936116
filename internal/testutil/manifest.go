package testutil

import (
	"fmt"
	"strings"
)

// CostEnvelope is a minimal valid tools + cost section for test manifests.
const CostEnvelope = `declared_tools: []
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

// ManifestYAML writes a valid test manifest: agent id, mode (empty for the
// default), workdir (empty for none), the system-ro baseline and intents.
func ManifestYAML(agent, mode, workdir string, intents ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: klock/v1\nagent: {id: %s}\n", agent)
	if mode != "" {
		fmt.Fprintf(&b, "mode: %s\n", mode)
	}
	if workdir != "" {
		fmt.Fprintf(&b, "workdir: %s\n", workdir)
	}
	b.WriteString("baseline: system-ro\nintents:\n")
	if len(intents) == 0 {
		b.WriteString("  []\n")
	}
	for _, in := range intents {
		fmt.Fprintf(&b, "  - %s\n", in)
	}
	b.WriteString(CostEnvelope)
	return b.String()
}
