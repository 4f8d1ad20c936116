package lease

import (
	"context"
	"math/rand/v2"
	"time"
)

// WaitOptions bound AcquireWait.
type WaitOptions struct {
	// For is how long to keep trying (klock run --wait). Zero: one attempt.
	For time.Duration
	// Base and Cap shape the backoff after a DIE: min(Cap, Base*2^n) plus
	// up to as much jitter again. Zero: 50 ms and 2 s.
	Base, Cap time.Duration
	// OnRetry, when set, is told each non-granted decision before the wait.
	OnRetry func(d Decision, next time.Duration)
}

// AcquireWait acquires req, retrying with the same age until it is granted
// or o.For has passed: after a DIE it backs off exponentially with jitter
// (KLIS-4); after a WAIT it waits in the store when the store is an
// Awaiter (woken when granted, oldest first), else polls again soon. It
// returns the last decision.
func AcquireWait(ctx context.Context, s Store, req Request, o WaitOptions) (Decision, error) {
	if o.Base <= 0 {
		o.Base = 50 * time.Millisecond
	}
	if o.Cap <= 0 {
		o.Cap = 2 * time.Second
	}
	deadline := time.Now().Add(o.For)
	if req.Age.IsZero() {
		req.Age = time.Now()
	}
	aw, _ := s.(Awaiter)
	for n := 0; ; n++ {
		var d Decision
		var err error
		if aw != nil {
			// A WAIT blocks in the store until granted (oldest first) or
			// the time left is over; only a DIE comes back to back off.
			d, err = aw.Await(ctx, req, time.Until(deadline))
		} else {
			d, err = s.Acquire(ctx, req)
		}
		if err != nil || d.Outcome == Granted {
			return d, err
		}
		req.Age = d.Age
		left := time.Until(deadline)
		if left <= 0 {
			return d, nil
		}
		next := o.Base << min(n, 20)
		if next > o.Cap || next <= 0 {
			next = o.Cap
		}
		next += time.Duration(rand.Int64N(int64(next)))
		if d.Outcome == Wait {
			next = o.Base
		}
		next = min(next, left)
		if o.OnRetry != nil {
			o.OnRetry(d, next)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(next):
		}
	}
}
