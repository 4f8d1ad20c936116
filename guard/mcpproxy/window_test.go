package mcpproxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/policy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const refundManifest = `apiVersion: klock/v1
agent: {id: refund-window}
intents: []
declared_tools:
  - name: issue_refund
    blast_radius: local
    side_effects: REVERSIBLE-WRITE
    autonomy: {unsupervised: always}
    rollback: {mechanism: "void_refund(refund_id)", window: "24h from issue"}
    input_schema:
      amount_usd: {type: number}
  - name: void_refund
    blast_radius: local
    side_effects: IRREVERSIBLE-WRITE
    input_schema:
      refund_id: {type: string}
cost_envelope: {expected_tokens_in: 1, max_tokens_in: 2, expected_tokens_out: 1, max_tokens_out: 2, expected_latency_ms: 1, max_latency_ms: 2, context_efficiency: 0.7, expected_cost: "0.01 USD", max_cost: "0.02 USD"}
hitl: {default_mode: HOTL}
`

type refundIn struct {
	AmountUSD float64 `json:"amount_usd"`
}

type refundOut struct {
	RefundID string `json:"refund_id"`
}

type voidIn struct {
	RefundID string `json:"refund_id"`
}

// refundServer issues refunds rf_1, rf_2, ... and records the ones voided.
func refundServer(voided *[]string) *mcp.Server {
	var mu sync.Mutex
	n := 0
	s := mcp.NewServer(&mcp.Implementation{Name: "refunds", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "issue_refund"}, func(ctx context.Context, r *mcp.CallToolRequest, in refundIn) (*mcp.CallToolResult, refundOut, error) {
		mu.Lock()
		defer mu.Unlock()
		n++
		return nil, refundOut{RefundID: "rf_" + string(rune('0'+n))}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "void_refund"}, func(ctx context.Context, r *mcp.CallToolRequest, in voidIn) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		defer mu.Unlock()
		*voided = append(*voided, in.RefundID)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "voided"}}}, nil, nil
	})
	return s
}

// TestRollbackWindowOnTheWire: a real MCP server's REVERSIBLE-WRITE is
// compensated only within its declared window ("24h from issue"), on a
// clock the test moves. Past it the call's compensation is marked expired
// (journaled, audited), never run, reported Expired by Rollback, and the
// tool's later calls in the run wait for a human as an IRREVERSIBLE-WRITE's,
// also after a gateway restart.
func TestRollbackWindowOnTheWire(t *testing.T) {
	m, err := policy.Parse("refund.yaml", []byte(refundManifest))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	dir := t.TempDir()
	l := gateway.Layout{Dir: dir, Agent: m.Agent.ID}
	auditPath := filepath.Join(dir, "audit.jsonl")
	gw, st, err := gateway.Open(m, l, auditPath, nil, gateway.WithClock(clock), gateway.WithApprovalWait(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var voided []string
	cs := serverSession(t, refundServer(&voided), New(gw, WithRunID("r1")))
	ctx := context.Background()
	// Each refund is for another amount: the same arguments twice in a
	// run would wait for approval as a retry of a non-idempotent tool.
	amount := 4
	refund := func() *mcp.CallToolResult {
		t.Helper()
		amount++
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "issue_refund", Arguments: map[string]any{"amount_usd": amount}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := refund(); r.IsError {
		t.Fatalf("first refund: %+v", r.Content[0])
	}
	advance(23 * time.Hour)
	if p := gw.Pending("r1"); len(p) != 1 || p[0].Expired || !p[0].OK {
		t.Fatalf("within the window: %+v", p)
	}
	if r := refund(); r.IsError {
		t.Fatalf("second refund, within the first's window: %+v", r.Content[0])
	}
	advance(2 * time.Hour) // the first refund is 25h old, the second 2h
	r := refund()
	if !r.IsError || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, "approval_pending") ||
		!strings.Contains(r.Content[0].(*mcp.TextContent).Text, "past its rollback window") {
		t.Fatalf("after the window the tool is decided as irreversible: %+v", r.Content[0])
	}
	// The expiry is journaled: a restarted gateway still decides the run's
	// refunds as irreversible.
	st.Close()
	gw, st, err = gateway.Open(m, l, auditPath, nil, gateway.WithClock(clock), gateway.WithApprovalWait(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cs = serverSession(t, refundServer(&voided), New(gw, WithRunID("r1")))
	if r := refund(); !r.IsError || !strings.Contains(r.Content[0].(*mcp.TextContent).Text, "past its rollback window") {
		t.Fatalf("after a restart: %+v", r.Content[0])
	}
	res, err := gw.Rollback(ctx, "r1", "session s1 killed")
	if !errors.Is(err, gateway.ErrRollback) || !errors.Is(err, gateway.ErrRollbackExpired) || len(res) != 2 {
		t.Fatalf("rollback: %v %+v", err, res)
	}
	if !res[0].OK || res[1].OK || !res[1].Expired || !strings.Contains(res[1].Message, "24h from issue") {
		t.Fatalf("outcomes (newest first): %+v", res)
	}
	if strings.Join(voided, ",") != "rf_2" {
		t.Fatalf("compensations run: %v, want only rf_2's", voided)
	}
	data, _ := os.ReadFile(auditPath)
	if n := strings.Count(string(data), `"result":"expired"`); n != 2 || !strings.Contains(string(data), `"reason":"window_passed"`) {
		t.Fatalf("the expiry and the expired rollback are not audited once each (%d):\n%s", n, data)
	}
}
