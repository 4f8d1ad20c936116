package lease

import (
	"cmp"
	"slices"
	"time"
)

// What the host store needs of its mirror besides records: the whole
// state (to compare after a reload, to snapshot), a reset, and a timer
// that expires leases when they are due for whoever listens.

// heldLocked returns the leases held, by ID.
func (t *Table) heldLocked() map[string]Lease {
	out := make(map[string]Lease, t.held)
	for _, g := range t.byGrant {
		for i := range g.entries {
			if e := &g.entries[i]; e.live {
				out[e.id] = e.lease()
			}
		}
	}
	return out
}

// resetLocked forgets every lease and waiter (not the subscribers, nor
// the waiters blocked in this process: the journal says what became of
// them).
func (t *Table) resetLocked() {
	t.byGrant, t.byHolder, t.held = map[uint64]*grant{}, map[Holder][]*grant{}, 0
	t.files, t.nets, t.exp = ptrie{}, netIndex{}, nil
	t.ended = newEndedHistory(t.ended.changing.max)
	t.waiters, t.free, t.spareHeld, t.freed = nil, nil, nil, false
}

// reloadedLocked tells, after the state was read again from scratch,
// what changed since before (the leases then): subscribers get the grants
// and frees they missed, and a waiter of this process that the journal
// no longer queues learns whether it was granted meanwhile (its holder
// holds leases of its age granted since it queued) or must decide again.
func (t *Table) reloadedLocked(before map[string]Lease, now time.Time) {
	after := t.heldLocked()
	if len(t.subs) > 0 {
		ended := map[string]Lease{}
		t.ended.each(time.Unix(0, 0), func(l Lease) { ended[l.ID] = l })
		for id, l := range before {
			if _, ok := after[id]; ok {
				continue
			}
			if e, ok := ended[id]; ok {
				l = e
			} else {
				l.State, l.EndedAt = Expired, now
			}
			t.publishLocked(Event{Type: LeaseFreed, Lease: l, Time: l.EndedAt})
		}
		for id, l := range after {
			if _, ok := before[id]; !ok {
				t.publishLocked(Event{Type: LeaseGranted, Lease: l, Time: l.AcquiredAt})
			}
		}
	}
	for id, lw := range t.local {
		if t.queuedLocked(id) >= 0 {
			continue
		}
		var got []Lease
		for _, g := range t.byHolder[lw.holder] {
			if g.age.Equal(lw.age) && !g.acquiredAt.Before(lw.since) {
				for i := range g.entries {
					if e := &g.entries[i]; e.live {
						got = append(got, e.lease())
					}
				}
			}
		}
		if got != nil {
			d := &Decision{Outcome: Granted, Age: lw.age}
			d.SetLeases(got)
			t.noteLocked(id, waitNote{d: d})
		} else {
			t.noteLocked(id, waitNote{})
		}
	}
}

// snapshotLocked is the state as records: the history, the grants (their
// leases as renewed last), the waiters.
func (t *Table) snapshotLocked() []record {
	out := make([]record, 0, len(t.byGrant)+len(t.waiters)+2*DefaultEndedHistory/256+2)
	hist := t.ended.appendUnparsed(make([]Lease, 0, len(t.ended.changing.buf)+len(t.ended.other.buf)))
	for len(hist) > 0 {
		n := min(len(hist), 256)
		out = append(out, record{Op: opEnded, At: hist[n-1].EndedAt, Leases: hist[:n]})
		hist = hist[n:]
	}
	gs := make([]*grant, 0, len(t.byGrant))
	for _, g := range t.byGrant {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(a, b *grant) int { return cmp.Or(a.acquiredAt.Compare(b.acquiredAt), cmp.Compare(a.base, b.base)) })
	for i, g := range gs { // written from the grants (appendGrant)
		out = append(out, record{Op: opGrant, At: g.acquiredAt, grants: gs[i : i+1]})
	}
	for _, w := range t.waiters {
		out = append(out, record{Op: opWait, At: w.Since, Queued: w})
	}
	return out
}

// armLocked keeps a timer for the next deadline while someone listens,
// so that an expiry is heard when it happens, not at the next operation.
func (t *Table) armLocked() {
	if len(t.subs) == 0 || len(t.exp) == 0 || t.onDue == nil {
		if t.timer != nil && !t.timerAt.IsZero() {
			t.timer.Stop()
			t.timerAt = time.Time{}
		}
		return
	}
	d := t.exp[0].deadline
	if d.Equal(t.timerAt) {
		return
	}
	t.timerAt = d
	wait := time.Until(d) + time.Millisecond
	if t.timer == nil {
		t.timer = time.AfterFunc(wait, t.due)
	} else {
		t.timer.Reset(wait)
	}
}

func (t *Table) due() {
	t.mu.Lock()
	t.timerAt = time.Time{}
	f := t.onDue
	t.mu.Unlock()
	if f != nil {
		f()
	}
}
