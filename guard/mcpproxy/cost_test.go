package mcpproxy

import (
	"encoding/json"
	"testing"
)

// An MCP server may itemize its reported cost (seed 003's
// ToolInvocationCost breakdown); the call is charged the sum, and a
// breakdown that does not add up leaves the cost unknown.
func TestMetaCostBreakdown(t *testing.T) {
	u := usageOf(json.RawMessage(`{"content":[],"_meta":{"cost":{"units":150,"currency":"USD","breakdown":{"compute":120,"io":30}}}}`))
	if !u.Known || u.CostUnits != 150 || string(u.Breakdown) != `{"compute":120,"io":30}` || u.ReportedBy == "" {
		t.Fatalf("usage %+v", u)
	}
	u = usageOf(json.RawMessage(`{"_meta":{"cost":{"units":100,"currency":"USD","breakdown":{"compute":120,"io":30}}}}`))
	if u.Known || u.Reason == "" {
		t.Fatalf("a breakdown that does not add up was accepted: %+v", u)
	}
}
