package charge

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/receipt"
)

// A tool call's receipts carry policy_hash (the
// manifest's), content_hash (its arguments and result) and evidence (where
// the charged cost came from), and a reported breakdown is recorded.
func TestReceiptsCarryPolicyContentAndEvidence(t *testing.T) {
	ph, err := PolicyHash([]byte(manifest))
	if err != nil || !strings.HasPrefix(ph, "sha256:") {
		t.Fatalf("policy hash %q %v", ph, err)
	}
	e := openWith(t, WithPolicyHash(ph))
	u := &check.Usage{CostUnits: 3, Currency: "USD", Known: true, ReportedBy: "plugin quote 1.0.0 answer",
		Breakdown: []byte(`{"compute":2,"io":1}`)}
	if _, te := e.gw.Call(context.Background(), &check.Call{Tool: "quote", Args: map[string]any{"q": "x"}}, ok(u)); te != nil {
		t.Fatal(te)
	}
	var pre, rec *receipt.Receipt
	for _, r := range e.receipts(t) {
		switch r.Phase {
		case receipt.PhasePreCharge:
			pre = r
		case receipt.PhaseReconcile:
			rec = r
		}
	}
	if pre == nil || rec == nil || pre.PolicyHash != ph || rec.PolicyHash != ph {
		t.Fatalf("policy_hash: pre %+v rec %+v", pre, rec)
	}
	if !strings.HasPrefix(rec.ContentHash, "sha256:") || len(rec.ContentHash) != len("sha256:")+64 {
		t.Fatalf("content_hash %q", rec.ContentHash)
	}
	// Every guard that decided is in both receipts, the budget's in the
	// pre-charge, where the cost came from in the reconcile.
	if g := guards(pre); g != "declared,schema,rate,autonomy,budget" {
		t.Fatalf("pre-charge evidence: %s %+v", g, pre.Evidence)
	}
	last := rec.Evidence[len(rec.Evidence)-1]
	if g := guards(rec); g != "declared,schema,rate,autonomy,cost-source" || !last.Verdict || !strings.Contains(last.Details, "plugin quote") {
		t.Fatalf("reconcile evidence %s %+v", g, rec.Evidence)
	}
	if got := string(rec.Metadata.Financial.CostBreakdown); got != `{"compute":2,"io":1}` {
		t.Fatalf("cost_breakdown %s", got)
	}
	var b map[string]int
	if json.Unmarshal(rec.Metadata.Financial.CostBreakdown, &b) != nil || b["compute"] != 2 {
		t.Fatalf("breakdown %s", rec.Metadata.Financial.CostBreakdown)
	}
	_ = gateway.Outcome{}
}

// guards lists the guard names of r's evidence, in order.
func guards(r *receipt.Receipt) string {
	var out []string
	for _, e := range r.Evidence {
		out = append(out, e.GuardName)
	}
	return strings.Join(out, ",")
}
