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
