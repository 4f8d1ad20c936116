package lease

import (
	"slices"
	"time"
)

// A Table changes only by applying records. The in-memory Table applies
// them as it decides; the host store also appends them to its journal, and
// every other process applies them in the same order to its own Table, so
// that all of them hold the same leases and queue the same waiters.
// Records carry absolute times (a grant's ExpiresAt, every record's At),
// so applying them gives the same state whoever applies them, and when.

const (
	opGrant  = "grant"  // Grants are granted (to Waiter, when set)
	opBeat   = "beat"   // Holder's leases expire at At + their TTL
	opEnd    = "end"    // IDs stop being held, in State, at At
	opWait   = "wait"   // Queued joins the waiters
	opUnwait = "unwait" // Waiter leaves the queue ungranted (Why)
	opEnded  = "ended"  // a snapshot's history: Leases ended before it
)

type record struct {
	Op     string       `json:"op"`
	At     time.Time    `json:"at"`
	Grants []*wireGrant `json:"grants,omitempty"` // grant
	Leases []Lease      `json:"leases,omitempty"` // ended
	Holder *Holder      `json:"holder,omitempty"`
	IDs    []string     `json:"ids,omitempty"`
	State  State        `json:"state,omitempty"`
	Queued *waiter      `json:"queued,omitempty"`
	Waiter string       `json:"waiter,omitempty"`
	Why    string       `json:"why,omitempty"` // unwait: "die", "timeout", "gone"
	// A journal's snapshot header: its generation, and the bytes and
	// lines of snapshot that follow it.
	Gen uint64 `json:"gen,omitempty"`
	// Format is the header's journal format (journalFormat).
	Format int   `json:"format,omitempty"`
	Size   int64 `json:"size,omitempty"`
	Lines  int   `json:"lines,omitempty"`
	// grants, in a grant this process made, are its grants already made
	// (a journaled grant is made again from Grants); the journal writes
	// them as Grants.
	grants []*grant
	// ending, in an end this process made, are the entries of IDs.
	ending []*entry
}

// waiter is a request queued until what it waits for is freed. The queue
// is ordered by age (oldest first), so that freed resources go to the
// oldest requester that can have them.
type waiter struct {
	ID     string        `json:"id"`
	Holder Holder        `json:"holder"`
	Claims []Claim       `json:"claims"`
	Age    time.Time     `json:"age"`
	TTL    time.Duration `json:"ttl,omitempty"`
	Grace  time.Duration `json:"grace,omitempty"`
	Since  time.Time     `json:"since"` // when it was queued
	Until  time.Time     `json:"until"` // when it gives up
}

func (w *waiter) request() Request {
	return Request{Holder: w.Holder, Claims: w.Claims, Age: w.Age, TTL: w.TTL, Grace: w.Grace}
}

func olderWaiter(a, b *waiter) int {
	if c := a.Age.Compare(b.Age); c != 0 {
		return c
	}
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	switch {
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

const maxFree = 256

// waitNote tells a waiter of this process what became of it: granted (d
// set) or taken off the queue ungranted (d nil: decide again).
type waitNote struct{ d *Decision }

// applyLocked changes the table by r, tells subscribers and local waiters,
// and hands r to the journal when one is recording.
func (t *Table) applyLocked(r record) {
	switch r.Op {
	case opGrant:
		gs := r.grants
		if gs == nil {
			for _, wg := range r.Grants {
				if g := t.fromWireLocked(wg); g != nil {
					gs = append(gs, g)
				}
			}
		}
		for _, g := range gs {
			t.addGrantLocked(g)
		}
		// The leases as values only for those who hear of them.
		if len(t.subs) > 0 {
			for _, g := range gs {
				for i := range g.entries {
					if e := &g.entries[i]; e.live {
						t.publishLocked(Event{Type: LeaseGranted, Lease: e.lease(), Time: r.At})
					}
				}
			}
		}
		if r.Waiter != "" {
			if w := t.dequeueLocked(r.Waiter); w != nil {
				d := Decision{Outcome: Granted, Age: w.Age}
				var ls []Lease
				for _, g := range gs {
					ls = liveLeases(g, ls)
				}
				d.SetLeases(ls)
				t.noteLocked(r.Waiter, waitNote{d: &d})
			}
		}
	case opBeat:
		if r.Holder == nil {
			break
		}
		for _, g := range t.byHolder[*r.Holder] {
			g.expiresAt = r.At.Add(g.ttl)
			g.deadline = g.expiresAt.Add(g.grace)
			t.exp.fix(g.heapAt)
		}
	case opEnd:
		n := len(r.IDs)
		if r.ending != nil {
			n = len(r.ending)
		}
		for i := range n {
			var e *entry
			if r.ending != nil {
				e = r.ending[i]
			} else if e = t.entryLocked(r.IDs[i]); e == nil {
				continue
			}
			t.ended.pushEntry(e, r.State, r.At)
			if len(t.subs) > 0 {
				l := e.lease()
				l.State, l.EndedAt = r.State, r.At
				t.publishLocked(Event{Type: LeaseFreed, Lease: l, Time: r.At})
			}
			t.removeLocked(e)
			t.freed = true
		}
	case opWait:
		if r.Queued == nil || t.queuedLocked(r.Queued.ID) >= 0 {
			break
		}
		w := r.Queued
		i, _ := slices.BinarySearchFunc(t.waiters, w, olderWaiter)
		t.waiters = slices.Insert(t.waiters, i, w)
	case opUnwait:
		if t.dequeueLocked(r.Waiter) != nil {
			t.noteLocked(r.Waiter, waitNote{})
		}
	case opEnded:
		for _, l := range r.Leases {
			t.ended.push(&l)
		}
	}
	if t.sink != nil {
		t.sink(r)
	}
}

// wireGrant is a grant as the journal has it: what its leases share once,
// then their claims (lease i has ID First+i; Gone lists the ones that
// ended, in a snapshot).
type wireGrant struct {
	First     string        `json:"first"`
	Holder    Holder        `json:"holder"`
	Age       time.Time     `json:"age"`
	Acquired  time.Time     `json:"acquired_at"`
	ExpiresAt time.Time     `json:"expires_at"`
	TTL       time.Duration `json:"ttl"`
	Grace     time.Duration `json:"grace"`
	Claims    []Claim       `json:"claims"`
	Gone      []int         `json:"gone,omitempty"`
}

func (g *grant) wire() *wireGrant {
	w := &wireGrant{First: leaseIDs(g.base, 1), Holder: g.holder, Age: g.age, Acquired: g.acquiredAt, ExpiresAt: g.expiresAt,
		TTL: g.ttl, Grace: g.grace, Claims: make([]Claim, len(g.entries))}
	for i := range g.entries {
		e := &g.entries[i]
		w.Claims[i] = Claim{Predicate: e.predicate, Resource: e.res, Intent: e.intent}
		if !e.live {
			w.Gone = append(w.Gone, i)
		}
	}
	return w
}

// fromWireLocked makes the grant a journal line names (nil when it is
// held already: a journal read again).
func (t *Table) fromWireLocked(w *wireGrant) *grant {
	base, _, _ := parseID(w.First)
	if t.byGrant[base] != nil {
		return nil
	}
	g := t.newGrantLocked(len(w.Claims))
	g.base, g.holder, g.age, g.acquiredAt, g.expiresAt, g.ttl, g.grace =
		base, w.Holder, w.Age, w.Acquired, w.ExpiresAt, w.TTL, w.Grace
	ids := leaseIDs(base, len(w.Claims))
	for i := range w.Claims {
		c := &w.Claims[i]
		e := &g.entries[i]
		*e = entry{g: g, id: ids[i*idLen : (i+1)*idLen], predicate: c.Predicate, bucket: bucket(c.Predicate), live: true,
			res: c.Resource, intent: c.Intent}
		if e.res.Type == fileType {
			e.node = t.files.node(e.res.Path.Path)
			e.object = e.node.object(e.res)
		} else {
			e.object = t.netObjectLocked(e.res)
		}
	}
	for _, i := range w.Gone {
		g.entries[i].live = false
	}
	for i := range g.entries {
		if g.entries[i].live {
			g.live++
		}
	}
	if g.live == 0 {
		return nil
	}
	return g
}

func liveLeases(g *grant, out []Lease) []Lease {
	for i := range g.entries {
		if e := &g.entries[i]; e.live {
			out = append(out, e.lease())
		}
	}
	return out
}

// newGrantLocked returns a grant with n (zero) entries, reusing an ended
// one when it can: the collector's work grows with what the table holds,
// so a table that grants and releases all day should not allocate for it.
func (t *Table) newGrantLocked(n int) *grant {
	for i := len(t.free) - 1; i >= 0 && i >= len(t.free)-4; i-- {
		if g := t.free[i]; cap(g.entries) >= n {
			t.free = slices.Delete(t.free, i, i+1)
			g.entries = g.entries[:n]
			return g
		}
	}
	return &grant{entries: make([]entry, n)}
}

func (t *Table) addGrantLocked(g *grant) {
	g.deadline = g.expiresAt.Add(g.grace)
	t.byGrant[g.base] = g
	hl, ok := t.byHolder[g.holder]
	if !ok && t.spareHeld != nil {
		hl, t.spareHeld = t.spareHeld, nil
	}
	g.holdAt = len(hl)
	t.byHolder[g.holder] = append(hl, g)
	t.exp.push(g)
	for i := range g.entries {
		e := &g.entries[i]
		if !e.live {
			continue
		}
		t.held++
		if e.res.Type == fileType {
			t.files.insert(e, e.node)
		} else {
			t.nets.insert(e)
		}
	}
}

// removeLocked ends entry e, and its grant with its last lease.
func (t *Table) removeLocked(e *entry) {
	if e.res.Type == fileType {
		t.files.remove(e, t.held)
	} else {
		t.nets.remove(e)
	}
	e.live = false
	t.held--
	g := e.g
	if g.live--; g.live > 0 {
		return
	}
	delete(t.byGrant, g.base)
	hl := t.byHolder[g.holder]
	last := len(hl) - 1
	hl[g.holdAt] = hl[last]
	hl[g.holdAt].holdAt = g.holdAt
	hl[last] = nil
	if last == 0 {
		delete(t.byHolder, g.holder)
		t.spareHeld = hl[:0] // for the next holder: most hold one grant
	} else {
		t.byHolder[g.holder] = hl[:last]
	}
	if g.heapAt >= 0 {
		t.exp.remove(g.heapAt)
	}
	if len(t.free) < maxFree {
		clear(g.entries)
		*g = grant{entries: g.entries[:0]}
		t.free = append(t.free, g)
	}
}

func (t *Table) queuedLocked(id string) int {
	for i, w := range t.waiters {
		if w.ID == id {
			return i
		}
	}
	return -1
}

func (t *Table) dequeueLocked(id string) *waiter {
	i := t.queuedLocked(id)
	if i < 0 {
		return nil
	}
	w := t.waiters[i]
	t.waiters = slices.Delete(t.waiters, i, i+1)
	return w
}

func (t *Table) noteLocked(id string, n waitNote) {
	lw, ok := t.local[id]
	if !ok {
		return
	}
	if t.sink != nil { // told once the journal has it
		lw.pending = &n
		t.deferred = append(t.deferred, deferred{note: id, n: n})
		return
	}
	delete(t.local, id)
	lw.ch <- n // buffered: one note per waiter
}

// deferred is an event or a note held back until the operation that made
// it is journaled: nobody hears of a grant the journal does not have.
type deferred struct {
	e    *Event
	note string
	n    waitNote
}

// flushLocked tells what the operation held back (ok), or forgets it (the
// operation was not journaled: the waiters stay registered, the mirror is
// reloaded).
func (t *Table) flushLocked(ok bool) {
	ds := t.deferred
	t.deferred = nil
	if !ok {
		for _, d := range ds {
			if lw := t.local[d.note]; d.e == nil && lw != nil {
				lw.pending = nil
			}
		}
		return
	}
	for _, d := range ds {
		if d.e != nil {
			t.publishLocked(*d.e)
		} else {
			t.noteLocked(d.note, d.n)
		}
	}
}
