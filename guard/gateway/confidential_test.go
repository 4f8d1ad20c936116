package gateway

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/policy"
)

const confManifest = `apiVersion: klock/v1
agent: {id: conf}
intents: []
declared_tools:
  - {name: pay, blast_radius: read, side_effects: READ, audit_logging: {confidential: true, redact: ['\d{4}-\d{4}']},
     input_schema: {card: {type: string, confidential: true, pattern: '^[a-z0-9-]+$'}, note: {type: string, required: false}}}
  - {name: open, blast_radius: read, side_effects: READ, input_schema: {card: {type: string, confidential: true}}}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`

// The handle rule: a confidential tool gets a handle (the same one for the
// same plaintext in a run), a tool that is not confidential gets the
// plaintext behind a handle, another run's handle is refused, results are
// redacted, and a message cut short of a long plaintext keeps none of it.
func TestConfidentialHandles(t *testing.T) {
	m, err := policy.Parse("conf.yaml", []byte(confManifest))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	g, st, err := Open(m, Layout{Dir: dir, Agent: m.Agent.ID}, filepath.Join(dir, "audit.jsonl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var seen map[string]any
	echo := func(c *check.Call) Dispatch {
		return func(ctx context.Context) (Outcome, error) {
			seen = ToolArgs(ctx, c)
			return Outcome{Result: json.RawMessage(`{"content":[{"type":"text","text":"card 1234-5678 ok"}]}`)}, nil
		}
	}
	call := func(tool, run, card string) (Outcome, string) {
		c := &check.Call{Tool: tool, RunID: run, Args: map[string]any{"card": card}}
		out, te := g.Call(context.Background(), c, echo(c))
		if te != nil {
			return out, string(te.Class) + " " + te.Reason + ": " + te.Message
		}
		return out, ""
	}
	out, e := call("pay", "r1", "secret-1")
	h, _ := seen["card"].(string)
	if e != "" || !strings.HasPrefix(h, HandlePrefix) || !strings.Contains(string(out.Result), "card "+RedactedText+" ok") || !strings.Contains(string(out.Result), `"type":"text"`) {
		t.Fatalf("pay: %s %s, tool saw %v", out.Result, e, seen)
	}
	if call("pay", "r1", "secret-1"); seen["card"] != h {
		t.Fatalf("the same plaintext in the run got another handle: %v, want %s", seen["card"], h)
	}
	if call("open", "r1", h); seen["card"] != "secret-1" {
		t.Fatalf("a tool that is not confidential got %v, want the plaintext", seen["card"])
	}
	if _, e := call("open", "r2", h); !strings.Contains(e, "unknown_handle") {
		t.Fatalf("another run's handle: %q", e)
	}
	long := strings.Repeat("p", 90) + "Q"
	_, e = call("pay", "r1", long)
	t.Logf("refused: %s", e)
	if !strings.Contains(e, "constraint") || strings.Contains(e, "pppppppp") {
		t.Fatalf("a refusal quoting the plaintext: %q", e)
	}
	if !regexp.MustCompile(`^klock-handle:[a-z2-7]{26}$`).MatchString(h) {
		t.Fatalf("handle %q", h)
	}
}
