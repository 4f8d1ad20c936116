package metrics

import (
	"testing"

	"github.com/klocklabs/klock/enforcer/eventlog"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGuardRecordsCounted: the records a gateway publishes move the guard
// metrics once per call, at its end, and the pending gauge follows the
// approvals from asked to decided.
func TestGuardRecordsCounted(t *testing.T) {
	m := New()
	var sink eventlog.Sink = m
	tool := func(k eventlog.Kind, x eventlog.Tool) { sink.Publish(eventlog.Record{Kind: k, Tool: &x}) }
	tool(eventlog.KindApprovalAsked, eventlog.Tool{Name: "deploy", Approval: "a1"})
	tool(eventlog.KindApprovalAsked, eventlog.Tool{Name: "deploy", Approval: "a2"})
	tool(eventlog.KindApprovalAsked, eventlog.Tool{Name: "deploy", Approval: "a2"}) // the same request, asked again
	if got := testutil.ToFloat64(m.guard.pending); got != 2 {
		t.Fatalf("pending %v, want 2", got)
	}
	tool(eventlog.KindApprovalGiven, eventlog.Tool{Name: "deploy", Approval: "a1"})
	tool(eventlog.KindToolCall, eventlog.Tool{Name: "deploy", Approval: "a1", Charged: &eventlog.Money{Units: 250, Currency: "USD"}, Tokens: 40})
	tool(eventlog.KindToolDenied, eventlog.Tool{Name: "deploy", Approval: "a2", Reason: "approval approval_denied"})
	tool(eventlog.KindToolCall, eventlog.Tool{Name: "search", Charged: &eventlog.Money{Units: 3, Currency: "USD"}})
	tool(eventlog.KindToolCall, eventlog.Tool{Name: "search"})
	tool(eventlog.KindToolDenied, eventlog.Tool{Name: "rm"})
	tool(eventlog.KindBudgetRefused, eventlog.Tool{Name: "search"})
	// Not a gateway's kind: a peer cannot move the guard metrics with it.
	sink.Publish(eventlog.Record{Kind: eventlog.KindViolation, Tool: &eventlog.Tool{Name: "x"}})

	if got := testutil.ToFloat64(m.guard.pending); got != 0 {
		t.Errorf("pending %v after both were decided, want 0", got)
	}
	for outcome, want := range map[string]float64{GuardAllow: 2, GuardApproved: 1, GuardEscalate: 1, GuardDeny: 2, GuardReplay: 0} {
		if got := testutil.ToFloat64(m.guard.decisions.WithLabelValues(outcome)); got != want {
			t.Errorf("decisions{outcome=%s} %v, want %v", outcome, got, want)
		}
	}
	for grant, want := range map[string]float64{"deploy": 250, "search": 3} {
		if got := testutil.ToFloat64(m.guard.spent.WithLabelValues(grant, "USD")); got != want {
			t.Errorf("spent{grant=%s} %v, want %v", grant, got, want)
		}
	}
	if got := testutil.ToFloat64(m.guard.tokens.WithLabelValues(TokensTool)); got != 40 {
		t.Errorf("tool tokens %v, want 40", got)
	}
}
