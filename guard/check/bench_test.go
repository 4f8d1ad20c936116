package check

import (
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

// BenchmarkDecide is the check path alone on the refund agent's richest
// contract (issue_refund: schema with a context binding, min/max, enum,
// per-minute bucket, idempotency key over canonical JSON, CEL autonomy).
// Run with -cpu 1: decisions/s/core = 1e9 / ns/op.
func BenchmarkDecide(b *testing.B) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	p, err := New(example(b, "refund-agent.yaml"), WithClock(c.now))
	if err != nil {
		b.Fatal(err)
	}
	// Keep the limits from refusing: this measures the checks, not a wall.
	if err := p.Limit("issue_refund", policy.RateLimits{PerMinute: 20}); err != nil {
		b.Fatal(err)
	}
	call := &Call{Tool: "issue_refund", Args: refund(20), Context: refundCtx}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.t = c.t.Add(24 * time.Hour) // every bucket refills: no limit refuses
		if d := p.Decide(call); d.Verdict != Allow {
			b.Fatalf("verdict %v: %v", d.Verdict, d.Err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkDecideDeny is the cheapest refusal: an undeclared tool.
func BenchmarkDecideDeny(b *testing.B) {
	p, _ := New(example(b, "refund-agent.yaml"))
	call := &Call{Tool: "wire_money"}
	for i := 0; i < b.N; i++ {
		p.Decide(call)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
