package leaseapi

import (
	"slices"
	"sync"

	"github.com/klocklabs/klock/enforcer/lease"
)

// ring keeps the most recent ContentionDetected events. A request retried
// while it waits meets the same contention again and again: consecutive
// repeats (same requester, outcome and held leases) are one entry with a
// count.
type ring struct {
	mu   sync.Mutex
	buf  []ringEntry
	next int
	full bool
}

type ringEntry struct {
	ev    lease.Event
	count int
}

func newRing(n int) *ring { return &ring{buf: make([]ringEntry, n)} }

func (r *ring) add(e lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last := r.lastLocked(); last != nil && sameContention(&last.ev, &e) {
		last.ev, last.count = e, last.count+1
		return
	}
	r.buf[r.next] = ringEntry{ev: e, count: 1}
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

func (r *ring) lastLocked() *ringEntry {
	if r.next == 0 && !r.full {
		return nil
	}
	return &r.buf[(r.next-1+len(r.buf))%len(r.buf)]
}

// newest returns the entries, newest first.
func (r *ring) newest() []ringEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ringEntry
	if r.full {
		out = append(out, r.buf[r.next:]...)
	}
	out = append(out, r.buf[:r.next]...)
	slices.Reverse(out)
	return out
}

// sameContention compares two contentions' requester, outcome and the
// pairs (held lease, own intent) in any order (a store need not order
// conflicts).
func sameContention(a, b *lease.Event) bool {
	if a.Holder != b.Holder || a.Decision == nil || b.Decision == nil || a.Decision.Outcome != b.Decision.Outcome ||
		len(a.Decision.Conflicts) != len(b.Decision.Conflicts) {
		return false
	}
	return slices.Equal(conflictKeys(a.Decision), conflictKeys(b.Decision))
}

func conflictKeys(d *lease.Decision) []string {
	k := make([]string, len(d.Conflicts))
	for i, c := range d.Conflicts {
		k[i] = c.Held.ID + "\x00" + c.Claim.Intent
	}
	slices.Sort(k)
	return k
}
