package mcp

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestConfidentialArgumentOnTheWire: through klock mcp --confidential, a
// real server's echo tool receives the argument its contract marks
// confidential as a handle (it echoes what it got), its text result is
// redacted by the contract's pattern, and the handle passed back is the
// same value; no file of the gateway's state holds the plaintext.
func TestConfidentialArgumentOnTheWire(t *testing.T) {
	everything := npmBin(t, "mcp-server-everything")
	const secret = "acct-7f3kq9zt2mv8w4xr-confidential"
	p := filepath.Join(t.TempDir(), "echo.yaml")
	writeFile(t, p, `apiVersion: klock/v1
agent: {id: echo-conf-01}
intents: []
declared_tools:
  - name: echo
    blast_radius: read
    side_effects: READ
    category: B
    input_schema:
      message: {type: string, confidential: true}
    audit_logging: {records: [message], redact: ['^Echo: ']}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`)
	state := t.TempDir()
	s := connect(t, "-m", p, "--state-dir", state, "--confidential", "--", "node", everything, "stdio")
	r := call(t, s, "echo", map[string]any{"message": secret})
	got := text(r)
	handle := regexp.MustCompile(`klock-handle:[a-z2-7]+`).FindString(got)
	if r.IsError || handle == "" || strings.Contains(got, secret) || !strings.HasPrefix(got, "[confidential section removed]") {
		t.Fatalf("the server echoed %q: want a handle, redacted", got)
	}
	if got := text(call(t, s, "echo", map[string]any{"message": handle})); !strings.Contains(got, handle) {
		t.Fatalf("the handle passed back echoed %q, want %s", got, handle)
	}
	s.Close()
	filepath.Walk(state, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			if data, _ := os.ReadFile(path); strings.Contains(string(data), "7f3kq9zt2mv8w4xr") {
				t.Errorf("%s holds the plaintext", path)
			}
		}
		return nil
	})
}
