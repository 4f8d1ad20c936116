package leaseapi

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
)

// Polling bounds of waiting requests. A waiter is retried when a lease is
// freed (the store's LeaseFreed) and otherwise when its first conflicting
// lease may have run out (Decision.WaitTime); expiry is noticed only when
// someone looks, and another process's store changes may not reach this
// one's events, so a waiter is retried at least every maxPoll.
const (
	minPoll = 5 * time.Millisecond
	maxPoll = 500 * time.Millisecond
)

// dispatcher retries waiting acquires, oldest first and one at a time:
// when a lease is freed, the oldest waiter it lets through is granted
// before any younger one is tried (KLIS-4: no thundering herd of retries).
type dispatcher struct {
	store   lease.Store
	wake    chan struct{} // a pass over every waiter
	resched chan struct{} // only recompute the next poll
	// freed counts kicks: a request that saw WAIT compares it with the
	// count it read before its first attempt, so a lease freed in
	// between is not missed.
	freed atomic.Uint64

	mu      sync.Mutex
	seq     uint64
	waiters []*waiter // by age, then arrival
}

// waiter is one blocked POST /v1/manifest.
type waiter struct {
	req      lease.Request
	seq      uint64
	since    time.Time
	deadline time.Time
	last     lease.Decision // the latest WAIT
	lastAt   time.Time
	done     chan result // receives once, when the dispatcher decided it
}

type result struct {
	d   lease.Decision
	err error
}

func newDispatcher(s lease.Store) *dispatcher {
	return &dispatcher{store: s, wake: make(chan struct{}, 1), resched: make(chan struct{}, 1)}
}

// kick asks for a pass over the waiters (a lease was freed).
func (d *dispatcher) kick() {
	d.freed.Add(1)
	signal(d.wake)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// wait blocks req, whose first decision was first (a WAIT), until the
// dispatcher decides it otherwise or until deadline or ctx ends; it then
// returns the last decision (a WAIT when it timed out). freed is the
// dispatcher's freed count read before the first attempt.
func (d *dispatcher) wait(ctx context.Context, req lease.Request, first lease.Decision, deadline time.Time, freed uint64) (lease.Decision, error) {
	req.Age = first.Age
	now := time.Now()
	w := &waiter{req: req, since: now, deadline: deadline, last: first, lastAt: now, done: make(chan result, 1)}
	d.mu.Lock()
	d.seq++
	w.seq = d.seq
	i := len(d.waiters)
	for i > 0 && older(w, d.waiters[i-1]) {
		i--
	}
	d.waiters = append(d.waiters, nil)
	copy(d.waiters[i+1:], d.waiters[i:])
	d.waiters[i] = w
	d.mu.Unlock()
	if d.freed.Load() != freed {
		signal(d.wake) // a lease was freed since the first attempt
	} else {
		signal(d.resched) // the next poll may be this waiter's
	}

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case r := <-w.done:
		return r.d, r.err
	case <-timer.C:
	case <-ctx.Done():
	}
	// Gone: unless the dispatcher decided it meanwhile (it holds mu while
	// it does), leave the queue with the last WAIT.
	d.mu.Lock()
	removed := d.removeLocked(w)
	d.mu.Unlock()
	if !removed {
		r := <-w.done
		return r.d, r.err
	}
	return w.last, ctx.Err()
}

func older(a, b *waiter) bool {
	if !a.req.Age.Equal(b.req.Age) {
		return a.req.Age.Before(b.req.Age)
	}
	return a.seq < b.seq
}

func (d *dispatcher) removeLocked(w *waiter) bool {
	for i, x := range d.waiters {
		if x == w {
			d.waiters = append(d.waiters[:i], d.waiters[i+1:]...)
			return true
		}
	}
	return false
}

// run passes over the waiters whenever kicked or when the soonest hint
// falls due, until ctx ends.
func (d *dispatcher) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due := d.nextPoll()
		timer.Reset(due)
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
			d.pass(ctx, false)
		case <-d.resched:
		case <-timer.C:
			d.pass(ctx, true)
		}
	}
}

// nextPoll is how long until the soonest waiter's hint falls due.
func (d *dispatcher) nextPoll() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.waiters) == 0 {
		return time.Hour
	}
	next := maxPoll
	now := time.Now()
	for _, w := range d.waiters {
		next = min(next, w.lastAt.Add(clampPoll(w.last.WaitTime)).Sub(now))
	}
	return max(next, minPoll)
}

func clampPoll(d time.Duration) time.Duration { return min(max(d+time.Millisecond, minPoll), maxPoll) }

// pass retries the waiters oldest first; on a timer, only those whose
// hint fell due. A waiter decided otherwise than WAIT leaves the queue
// with its answer.
func (d *dispatcher) pass(ctx context.Context, dueOnly bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	kept := d.waiters[:0]
	for _, w := range d.waiters {
		if dueOnly && now.Before(w.lastAt.Add(clampPoll(w.last.WaitTime))) {
			kept = append(kept, w)
			continue
		}
		dec, err := d.store.Acquire(ctx, w.req)
		if err == nil && dec.Outcome == lease.Wait {
			w.last, w.lastAt = dec, time.Now()
			kept = append(kept, w)
			continue
		}
		w.done <- result{dec, err}
	}
	clear(d.waiters[len(kept):])
	d.waiters = kept
}

// snapshot copies the waiters for GET /v1/contention.
func (d *dispatcher) snapshot() []waiter {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]waiter, len(d.waiters))
	for i, w := range d.waiters {
		out[i] = *w
	}
	return out
}
