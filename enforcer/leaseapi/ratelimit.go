package leaseapi

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter is a token bucket per tenant for acquires. Tenants are few (the
// klock group's uids, the tokens file's names), so the map is not pruned.
type limiter struct {
	r     rate.Limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

func newLimiter(perSecond float64, burst int) *limiter {
	r := rate.Limit(perSecond)
	if perSecond < 0 {
		r = rate.Inf
	}
	return &limiter{r: r, burst: burst, m: map[string]*rate.Limiter{}}
}

// take spends one acquire of tenant's bucket at now, or returns how long
// until one is available (and spends nothing).
func (l *limiter) take(tenant string, now time.Time) time.Duration {
	if l.r == rate.Inf {
		return 0
	}
	l.mu.Lock()
	lim := l.m[tenant]
	if lim == nil {
		lim = rate.NewLimiter(l.r, l.burst)
		l.m[tenant] = lim
	}
	l.mu.Unlock()
	res := lim.ReserveN(now, 1)
	if !res.OK() {
		return time.Second
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// Per-tenant bounds on what stays open: each event stream holds a store
// subscription, each waiting acquire a connection and a queue entry.
const (
	maxStreams = 32
	maxWaiters = 1024
)

// quota counts what a tenant holds open.
type quota struct {
	mu sync.Mutex
	n  map[string]int
}

// take reserves one of max for tenant; release gives it back.
func (q *quota) take(tenant string, max int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == nil {
		q.n = map[string]int{}
	}
	if q.n[tenant] >= max {
		return false
	}
	q.n[tenant]++
	return true
}

func (q *quota) release(tenant string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n[tenant]--; q.n[tenant] <= 0 {
		delete(q.n, tenant)
	}
}
