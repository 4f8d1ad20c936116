package charge

import (
	"context"
	"strings"
	"testing"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/guard/receipt"
)

// A declared cost_per_invocation is charged on top of the reported cost
// and itemized; with nothing reported, or a cost it cannot be added to,
// the reservation (the fee) stands.
func TestCostPerInvocationIsChargedOnTop(t *testing.T) {
	e := open(t)
	for _, tc := range []struct {
		usage  *check.Usage
		units  uint64
		source string
	}{
		{&check.Usage{CostUnits: 2, Currency: "USD", Known: true}, 5, "harness-reported"},
		{&check.Usage{CostUnits: 2, Currency: "USD", Known: true, Breakdown: []byte(`{"compute":"0.02 USD"}`)}, 5, "harness-reported"},
		{nil, 3, "unavailable"},
		{&check.Usage{CostUnits: 2, Currency: "EUR", Known: true}, 3, "unavailable"},
	} {
		out, te := e.gw.Call(context.Background(), &check.Call{Tool: "priced", Args: map[string]any{}}, ok(tc.usage))
		if te != nil || out.Charged == nil || out.Charged.Units != tc.units || out.Charged.Source != tc.source {
			t.Errorf("%+v: charged %+v %v, want %d (%s)", tc.usage, out.Charged, te, tc.units, tc.source)
		}
	}
	var breakdowns, evidence []string
	for _, r := range e.receipts(t) {
		if r.Phase == receipt.PhaseReconcile {
			breakdowns = append(breakdowns, string(r.Metadata.Financial.CostBreakdown))
			for _, ev := range r.Evidence {
				if ev.GuardName == EvidenceFee {
					evidence = append(evidence, ev.Details)
				}
			}
		}
	}
	want := []string{`{"cost_per_invocation":"0.03 USD","metered":"0.02 USD"}`, `{"compute":"0.02 USD","cost_per_invocation":"0.03 USD"}`, "", ""}
	if strings.Join(breakdowns, "|") != strings.Join(want, "|") || len(evidence) != 4 || !strings.Contains(evidence[0], "on top of the reported 0.02 USD") || !strings.Contains(evidence[3], "within the reservation") {
		t.Fatalf("breakdowns %q, evidence %q", breakdowns, evidence)
	}
}
