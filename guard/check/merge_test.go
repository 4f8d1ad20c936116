package check

import (
	"testing"
	"time"
)

// TestMergeIsOrderFree: a restart merges dispatch records in the audit
// log's order, which is not the order the calls were counted in (two
// calls append their records in either order): the larger count and the
// later bucket win whatever the order, a record merged twice changes
// nothing, and a non-idempotent call's key is known as reached.
func TestMergeIsOrderFree(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	older := Use{RunID: "r", Calls: 1, Buckets: map[string]BucketState{"per_minute": {Tokens: 4, Last: t0}}}
	newer := Use{RunID: "r", Calls: 2, Buckets: map[string]BucketState{"per_minute": {Tokens: 3, Last: t0.Add(time.Second)}}}
	state := func(order ...Use) (int, BucketState, string) {
		p, err := New(example(t, "refund-agent.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for i, u := range order {
			if err := p.Merge("get_account", u, "key-1", "call-"+string(rune('a'+i))); err != nil {
				t.Fatal(err)
			}
		}
		c := p.tools["get_account"]
		var bs BucketState
		if b := c.lim.buckets["per_minute"]; b != nil {
			bs = BucketState{Tokens: b.tokens, Last: b.last}
		}
		return c.lim.perRun["r"], bs, c.retryOf("r", "key-1")
	}
	n1, b1, k1 := state(older, newer)
	n2, b2, k2 := state(newer, older, newer)
	if n1 != 2 || n2 != 2 || b1 != b2 || b1.Tokens != 3 || !b1.Last.Equal(t0.Add(time.Second)) {
		t.Fatalf("merged in two orders: %d %+v and %d %+v; want 2 calls and the later bucket", n1, b1, n2, b2)
	}
	if k1 == "" || k2 == "" {
		t.Fatal("a merged non-idempotent call's key is not known as reached")
	}
	if n, _, _ := state(Use{RunID: "r", Calls: 0}); n != 0 {
		t.Fatalf("an empty record counted %d calls", n)
	}
	if err := func() error {
		p, _ := New(example(t, "refund-agent.yaml"))
		return p.Merge("no_such_tool", newer, "", "c")
	}(); err != nil {
		t.Fatalf("a tool no longer declared: %v", err)
	}
}
