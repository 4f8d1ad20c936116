package check

import (
	"fmt"
	"time"

	"github.com/klocklabs/klock/guard/toolerr"
	"github.com/klocklabs/klock/policy"
)

// bucket is a token bucket: capacity tokens, refilled at capacity per
// period. A full bucket allows a burst of capacity calls, then one call per
// period/capacity.
type bucket struct {
	tokens float64
	last   time.Time
}

func (b *bucket) take(capacity int, period time.Duration, now time.Time) bool {
	if b.last.IsZero() {
		b.tokens, b.last = float64(capacity), now
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens += float64(capacity) * float64(el) / float64(period)
		if b.tokens > float64(capacity) {
			b.tokens = float64(capacity)
		}
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// window is one limit: per_minute, per_hour or per_day.
type window struct {
	name   string
	limit  int
	period time.Duration
}

func windows(l policy.RateLimits, categoryPerMinute int) []window {
	perMinute := l.PerMinute
	if perMinute == 0 {
		perMinute = categoryPerMinute
	}
	var out []window
	for _, w := range []window{{"per_minute", perMinute, time.Minute}, {"per_hour", l.PerHour, time.Hour}, {"per_day", l.PerDay, 24 * time.Hour}} {
		if w.limit > 0 {
			out = append(out, w)
		}
	}
	return out
}

// limiter holds one tool's buckets. Its caller holds the contract's lock.
type limiter struct {
	perRun  map[string]int     // run id -> calls so far
	buckets map[string]*bucket // window name [+ "/" arg=value] -> bucket
	took    []string           // the buckets the last allowed call took from (for State)
}

// take checks every limit before consuming any, so a refused call costs no
// token in the limits it did not hit.
func (l *limiter) take(c *contract, call *Call, now time.Time) *toolerr.Error {
	limits := c.limits()
	if limits.PerRun > 0 && l.perRun[call.RunID] >= limits.PerRun {
		return toolerr.New(toolerr.Restricted, "rate_per_run",
			"%s: per-run limit reached (%d calls per run)", c.tool.Name, limits.PerRun)
	}
	type pending struct {
		key  string
		b    *bucket
		w    window
		what string
	}
	var todo []pending
	add := func(key, what string, ws []window) {
		for _, w := range ws {
			k := w.name + "/" + key
			b := l.buckets[k]
			if b == nil {
				b = &bucket{}
				l.buckets[k] = b
			}
			todo = append(todo, pending{k, b, w, what})
		}
	}
	add("", "", windows(limits, c.categoryPerMinute))
	for arg, sub := range limits.PerArgument {
		if v, ok := call.Args[arg]; ok {
			add(arg+"="+fmt.Sprint(v), fmt.Sprintf(" for %s=%s", arg, short(v)), windows(sub, 0))
		}
	}
	// Probe on copies first: all or nothing.
	for _, p := range todo {
		probe := *p.b
		if !probe.take(p.w.limit, p.w.period, now) {
			return toolerr.New(toolerr.Restricted, "rate_"+p.w.name,
				"%s: rate limit %d calls %s%s reached; retry later", c.tool.Name, p.w.limit, p.w.name, p.what).WithRetry(true)
		}
	}
	l.took = l.took[:0]
	for _, p := range todo {
		p.b.take(p.w.limit, p.w.period, now)
		l.took = append(l.took, p.key)
	}
	l.perRun[call.RunID]++
	return nil
}
