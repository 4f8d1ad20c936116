package lease

import (
	"context"
	"time"
)

// Awaiter is a Store that can hold a WAIT until it is granted: the waiting
// requests are queued by age and, when leases are freed, the store grants
// them oldest first, one after the other, waking only the ones it granted
// (no thundering herd of retries). Table and Host are Awaiters; AcquireWait
// uses Await when the store is one.
type Awaiter interface {
	Store
	// Await decides req like Acquire. A GRANTED or a DIE returns at once
	// (a DIE's retry and backoff are the caller's: see AcquireWait). A
	// WAIT queues req and blocks until it is granted, until it must die
	// after all (an older requester took what it waits for), or until max
	// has passed or ctx is done; it then returns the last decision (and
	// ctx's error). A grant that races with the end of max or ctx is
	// returned as a grant: the caller holds those leases.
	Await(ctx context.Context, req Request, max time.Duration) (Decision, error)
}

// engine is what the waiting loop and the Store methods need of a store:
// run an operation on its Table, locked and up to date, and make it
// durable (the host store journals it).
type engine interface {
	op(ctx context.Context, f func(t *Table, now time.Time)) error
	// recheck is how long a waiter sleeps at most before it looks again
	// without being told to (zero: only when told or at its deadline).
	recheck() time.Duration
}

func (t *Table) recheck() time.Duration { return 0 }

// Await implements Awaiter.
func (t *Table) Await(ctx context.Context, req Request, max time.Duration) (Decision, error) {
	return await(ctx, t, req, max)
}

// enqueueLocked queues req until until, for a waiter of this process.
func (t *Table) enqueueLocked(req *Request, now, until time.Time) (string, chan waitNote) {
	w := &waiter{ID: t.newIDLocked("w-"), Holder: req.Holder, Claims: req.Claims, Age: req.Age, TTL: req.TTL,
		Grace: req.Grace, Since: now, Until: until}
	ch := make(chan waitNote, 1)
	t.local[w.ID] = &localWaiter{ch: ch, holder: w.Holder, age: w.Age, since: now}
	t.applyLocked(record{Op: opWait, At: now, Queued: w})
	return w.ID, ch
}

// unqueueLocked takes a waiter of this process off the queue, unless it
// was granted meanwhile: then it returns the grant.
func (t *Table) unqueueLocked(id string, ch chan waitNote, now time.Time, why string) *Decision {
	if n, ok := t.noteFor(id, ch); ok && n.d != nil {
		delete(t.local, id)
		return n.d
	}
	delete(t.local, id)
	if t.queuedLocked(id) >= 0 {
		t.applyLocked(record{Op: opUnwait, At: now, Waiter: id, Why: why})
	}
	return nil
}

func await(ctx context.Context, e engine, req Request, patience time.Duration) (Decision, error) {
	if err := checkRequest(&req); err != nil {
		return Decision{}, err
	}
	var (
		d        Decision
		deadline time.Time
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var (
			id string
			ch chan waitNote
		)
		var aerr error
		err := e.op(ctx, func(t *Table, now time.Time) {
			if deadline.IsZero() {
				deadline = now.Add(patience)
			}
			if d, aerr = t.acquireLocked(&req, now); aerr == nil && d.Outcome == Wait && now.Before(deadline) {
				id, ch = t.enqueueLocked(&req, now, deadline)
			}
		})
		if err == nil {
			err = aerr
		}
		if err != nil || id == "" {
			return d, err
		}
		st := waiting
		for st == waiting {
			// Sleep until told, until the deadline, or until the first
			// conflicting lease would run out (nobody else may be there
			// to expire it).
			sleep := time.Until(deadline)
			if d.WaitTime > 0 && d.WaitTime+time.Millisecond < sleep {
				sleep = d.WaitTime + time.Millisecond
			}
			if r := e.recheck(); r > 0 && r < sleep {
				sleep = r
			}
			timer.Reset(max(sleep, time.Millisecond))
			var granted *Decision
			select {
			case n := <-ch:
				if n.d != nil {
					return *n.d, nil
				}
				st = decideAgain
				continue
			case <-ctx.Done():
				err := e.op(context.WithoutCancel(ctx), func(t *Table, now time.Time) {
					granted = t.unqueueLocked(id, ch, now, "gone")
				})
				if granted != nil {
					return *granted, nil
				}
				if err != nil {
					return d, err
				}
				return d, ctx.Err()
			case <-timer.C:
			}
			err := e.op(ctx, func(t *Table, now time.Time) {
				granted, st = t.recheckLocked(id, ch, &req, &d, now, deadline)
			})
			switch {
			case err != nil:
				// Nothing of that op happened (the host store did not
				// journal it): leave the queue if we can, and say why.
				granted = nil
				_ = e.op(context.WithoutCancel(ctx), func(t *Table, now time.Time) {
					granted = t.unqueueLocked(id, ch, now, "gone")
				})
				if granted != nil {
					return *granted, nil
				}
				return d, err
			case granted != nil:
				return *granted, nil
			case st == settled:
				return d, nil
			}
		}
	}
}

type waitState uint8

const (
	waiting     waitState = iota
	decideAgain           // taken off the queue ungranted: decide afresh
	settled               // d is the answer (a DIE, or a WAIT at the deadline)
)

// recheckLocked is a waiter looking at the queue on its own (its timer
// fired: a conflicting lease may have run out with nobody to expire it,
// which the op did before calling here, or the deadline passed).
func (t *Table) recheckLocked(id string, ch chan waitNote, req *Request, d *Decision, now, deadline time.Time) (*Decision, waitState) {
	if n, ok := t.noteFor(id, ch); ok {
		delete(t.local, id)
		if n.d != nil {
			return n.d, settled
		}
		return nil, decideAgain
	}
	if t.queuedLocked(id) < 0 {
		delete(t.local, id)
		return nil, decideAgain
	}
	*d = t.decideLocked(req, now)
	switch {
	case d.Outcome == Granted:
		var g Decision
		t.grantLocked(req, now, &g, id)
		return &g, settled
	case d.Outcome == Die:
		return t.unqueueLocked(id, ch, now, "die"), settled
	case !now.Before(deadline):
		return t.unqueueLocked(id, ch, now, "timeout"), settled
	}
	return nil, waiting
}

// noteFor returns what the waiter id was told: on its channel, or in the
// operation running now (not yet journaled, so not yet sent).
func (t *Table) noteFor(id string, ch chan waitNote) (waitNote, bool) {
	select {
	case n := <-ch:
		return n, true
	default:
	}
	if lw := t.local[id]; lw != nil && lw.pending != nil {
		return *lw.pending, true
	}
	return waitNote{}, false
}
