package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// klock explain says what CONSUMES NET:raw gives an agent without
// capabilities: pings through ping sockets, never a SOCK_RAW.
func TestExplainSaysWhatNetRawGives(t *testing.T) {
	m := "apiVersion: klock/v1\nagent: {id: pinger}\nmode: strict\nbaseline: system-ro\nintents:\n  - CONSUMES NET:raw\n  - CONSUMES NET:192.0.2.1:443/tcp\ndeclared_tools: []\n" +
		"cost_envelope: {expected_tokens_in: 100, max_tokens_in: 200, expected_tokens_out: 10, max_tokens_out: 20, expected_latency_ms: 10, max_latency_ms: 20, context_efficiency: 0.7, expected_cost: \"0.01 USD\", max_cost: \"0.02 USD\"}\n"
	f := filepath.Join(t.TempDir(), "raw.yaml")
	if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "explain", f)
	if code != exitOK || !strings.Contains(out, "ping works") || !strings.Contains(out, "CAP_NET_RAW") {
		t.Fatalf("explain: %d\n%s", code, out)
	}
}
