package mcpproxy

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/budget"
	"github.com/klocklabs/klock/guard/charge"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/receipt"
	"github.com/klocklabs/klock/policy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const quoteManifest = `apiVersion: klock/v1
agent: {id: quote-agent}
intents: []
declared_tools:
  - name: quote
    blast_radius: read
    side_effects: READ
    input_schema:
      sku: {type: string, max_length: 8}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
grants:
  - {tool: quote, max_cost_per_invocation: "0.05 USD", max_invocations: 1}
`

type quoteIn struct {
	SKU string `json:"sku"`
}

// quoteServer answers a quote and reports what it cost and the tokens it
// used in the result's _meta.
func quoteServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "quotes", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "quote"}, func(ctx context.Context, r *mcp.CallToolRequest, in quoteIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Meta: mcp.Meta{"cost": "0.03 USD", "tokens_used": 41},
			Content: []mcp.Content{&mcp.TextContent{Text: "12.00"}}}, nil, nil
	})
	return s
}

// TestReceiptsCarryEvidenceOnTheWire: through a real MCP server, every
// receipt of a call carries each deciding guard's verdict: the pre-charge
// and reconcile of an allowed call (declared, schema, rate, autonomy,
// budget / cost-source), the deny of a schema refusal (its refusing
// stage last) and of a budget refusal; the chain verifies, a receipt whose
// evidence is edited does not, and the audit's result record has the
// tokens the server reported and the call's duration.
func TestReceiptsCarryEvidenceOnTheWire(t *testing.T) {
	m, err := policy.Parse("quote.yaml", []byte(quoteManifest))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	chain := filepath.Join(dir, "receipts.jsonl")
	store, err := budget.Open(filepath.Join(dir, "ledger.db"), chain, priv, budget.WithAgent(m.Agent.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ch, err := charge.New(context.Background(), m, store, m.Agent.ID)
	if err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.jsonl")
	gw, st, err := gateway.Open(m, gateway.Layout{Dir: dir, Agent: m.Agent.ID}, auditPath, nil, gateway.WithCharger(ch), gateway.WithReceipts(store.Record))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cs := serverSession(t, quoteServer(), New(gw))
	for i, sku := range []string{"A1", "far-too-long", "B2"} {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "quote", Arguments: map[string]any{"sku": sku}})
		if err != nil || r.IsError != (i > 0) {
			t.Fatalf("call %d (%s): %v %+v", i, sku, err, r)
		}
	}
	if err := store.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	if _, err := receipt.VerifyFile(chain, nil, func(r *receipt.Receipt) error {
		got = append(got, r.Phase+" "+r.Decision.Verdict+": "+evidenceGuards(r))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pre-charge allow: declared+ schema+ rate+ autonomy+ budget+",
		"reconcile allow: declared+ schema+ rate+ autonomy+ cost-source+",
		"guard deny: declared+ schema-",
		"pre-charge deny: declared+ schema+ rate+ autonomy+ budget-",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("receipts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	data, _ := os.ReadFile(auditPath)
	var res map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["event"] == "result" {
			res = rec
		}
	}
	if res == nil || res["tokens_used"] != 41.0 || res["duration_ms"] == nil {
		t.Fatalf("audit result record: %v", res)
	}
	// The evidence is signed with the rest: turning the budget's deny into
	// a pass breaks the chain.
	raw, _ := os.ReadFile(chain)
	forged := strings.Replace(string(raw), `"guard_name":"budget","verdict":false`, `"guard_name":"budget","verdict":true`, 1)
	if forged == string(raw) {
		t.Fatal("no budget deny evidence in the chain")
	}
	if _, err := receipt.Verify(strings.NewReader(forged), nil, nil); err == nil || !strings.Contains(err.Error(), "rcpt-4") {
		t.Fatalf("a receipt with edited evidence: %v", err)
	}
}

// evidenceGuards renders r's evidence as guard+ (passed) or guard-.
func evidenceGuards(r *receipt.Receipt) string {
	var out []string
	for _, e := range r.Evidence {
		mark := "-"
		if e.Verdict {
			mark = "+"
		}
		out = append(out, e.GuardName+mark)
	}
	return strings.Join(out, " ")
}
