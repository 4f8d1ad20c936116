package gateway

import (
	"time"

	"github.com/klocklabs/klock/guard/audit"
	"github.com/klocklabs/klock/guard/check"
)

// The rate-limit counters' write-ahead log is the audit log: a dispatch
// record carries what its call left in them, and the audit flushes it
// before the call is dispatched. The counters' SQLite store commits
// without a flush of its own (one flush on a call's path, not two side
// by side: about 130 µs of a proxied call on ext4), and a gateway that
// opens its audit log merges every such record of its agent back into
// the counters (check.Pipeline.Merge), whatever its store lost in a
// crash.

// countersOf is the dispatch record's Counters for a call decided with u
// (nil for a call the pipeline did not count).
func countersOf(u *check.Use, retryKey string) *audit.Counters {
	if u == nil {
		return nil
	}
	c := &audit.Counters{Calls: u.Calls, RetryKey: retryKey}
	if len(u.Buckets) > 0 {
		c.Buckets = make(map[string]audit.Bucket, len(u.Buckets))
		for k, b := range u.Buckets {
			c.Buckets[k] = audit.Bucket{Tokens: b.Tokens, LastNS: b.Last.UnixNano()}
		}
	}
	return c
}

// mergeCounters is audit.WithReplay's function for pipeline p: each
// dispatch record's counters merged back.
func mergeCounters(p *check.Pipeline) func(*audit.Record) error {
	return func(r *audit.Record) error {
		u := check.Use{RunID: r.RunID, Calls: r.Counters.Calls, Buckets: make(map[string]check.BucketState, len(r.Counters.Buckets))}
		for k, b := range r.Counters.Buckets {
			u.Buckets[k] = check.BucketState{Tokens: b.Tokens, Last: time.Unix(0, b.LastNS)}
		}
		return p.Merge(r.Tool, u, r.Counters.RetryKey, r.CallID)
	}
}
