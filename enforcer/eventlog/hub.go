package eventlog

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed: the reader or its hub was closed, and its ring is drained.
var ErrClosed = errors.New("eventlog: closed")

// Sink takes records. Publish never blocks on a reader; WantsObserved says
// whether any reader asked for KindObserved records, so a session builds
// one per observed triple only then.
type Sink interface {
	Publish(Record)
	WantsObserved() bool
}

// Defaults.
const (
	// DefaultBacklog is how many recent records (KindObserved excepted) a
	// hub keeps for a reader that asks for those since a time.
	DefaultBacklog = 4096
	// DefaultRing is a reader's ring: how many records it may fall behind
	// before it loses some.
	DefaultRing = 1024
)

// Hub fans records out to readers. The zero Hub is not usable: NewHub.
type Hub struct {
	source string
	now    func() time.Time

	mu      sync.Mutex
	seq     uint64
	backlog ring
	readers map[*Reader]struct{}
	closed  bool
	// observers counts the readers that want KindObserved records.
	observers atomic.Int32
}

// NewHub returns a hub that labels the records without a Source with
// source and keeps backlog records (DefaultBacklog when 0) for Since.
func NewHub(source string, backlog int) *Hub {
	if backlog <= 0 {
		backlog = DefaultBacklog
	}
	return &Hub{source: source, now: time.Now, backlog: newRing(backlog), readers: map[*Reader]struct{}{}}
}

// WantsObserved reports whether a reader wants KindObserved records.
func (h *Hub) WantsObserved() bool { return h != nil && h.observers.Load() > 0 }

// Publish numbers r, stamps its version, time and source, bounds it and
// hands it to every reader whose filter takes it. A reader whose ring is
// full loses it (and is told, KindLost). It never waits for a reader.
func (h *Hub) Publish(r Record) {
	if h == nil {
		return
	}
	r.V = SchemaVersion
	if r.Time.IsZero() {
		r.Time = h.now()
	}
	r.Time = r.Time.UTC()
	if r.Source == "" {
		r.Source = h.source
	}
	r.clip()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.seq++
	r.Seq = h.seq
	if r.Kind != KindObserved {
		h.backlog.push(r)
	}
	for rd := range h.readers {
		if rd.f.takes(&r) {
			rd.push(r)
		}
	}
}

// Close ends every reader once it has read what it holds.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for rd := range h.readers {
		rd.close()
	}
}

// Filter selects the records a reader gets. The zero Filter takes every
// record but KindObserved.
type Filter struct {
	Session string // "" any
	// Owner, when set, keeps the records of this owner only (a reader
	// that is not root: "uid:1000").
	Owner string
	// Since replays the backlog's records at or after it first (zero:
	// none: only what is published from now on).
	Since time.Time
	// All adds KindObserved records.
	All bool
}

func (f *Filter) takes(r *Record) bool {
	switch {
	case r.Kind == KindObserved && !f.All:
		return false
	case f.Session != "" && r.Session != f.Session:
		return false
	case f.Owner != "" && r.Owner != f.Owner:
		return false
	}
	return true
}

// Subscribe returns a reader of the records f takes: the backlog's since
// f.Since, then (follow) every record published from now on. Without
// follow the reader ends (ErrClosed) after the backlog. size is its ring
// (DefaultRing when 0).
func (h *Hub) Subscribe(f Filter, follow bool, size int) *Reader {
	if size <= 0 {
		size = DefaultRing
	}
	rd := &Reader{h: h, f: f, ring: newRing(size), wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !f.Since.IsZero() {
		h.backlog.each(func(r *Record) {
			if !r.Time.Before(f.Since) && f.takes(r) {
				rd.push(*r)
			}
		})
	}
	if !follow || h.closed {
		rd.close()
		return rd
	}
	h.readers[rd] = struct{}{}
	if f.All {
		h.observers.Add(1)
	}
	return rd
}

// Reader is one subscriber's ring.
type Reader struct {
	h    *Hub
	f    Filter
	wake chan struct{}
	// ring and done are guarded by h.mu: a publisher pushes under it.
	ring ring
	done bool
}

// push adds r to the ring, or counts it lost. Called with h.mu held.
func (rd *Reader) push(r Record) {
	rd.ring.pushOrLose(r)
	select {
	case rd.wake <- struct{}{}:
	default:
	}
}

func (rd *Reader) close() {
	rd.done = true
	select {
	case rd.wake <- struct{}{}:
	default:
	}
}

// Next returns the next record, waiting for one until ctx ends.
func (rd *Reader) Next(ctx context.Context) (Record, error) {
	for {
		rd.h.mu.Lock()
		r, ok := rd.ring.pop()
		done := rd.done
		rd.h.mu.Unlock()
		if ok {
			if r.Kind == KindLost && r.Time.IsZero() {
				r.V, r.Time, r.Source = SchemaVersion, rd.h.now().UTC(), rd.h.source
			}
			return r, nil
		}
		if done {
			return Record{}, ErrClosed
		}
		select {
		case <-rd.wake:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		}
	}
}

// Close stops the reader: the hub no longer fills it.
func (rd *Reader) Close() {
	h := rd.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.readers[rd]; ok {
		delete(h.readers, rd)
		if rd.f.All {
			h.observers.Add(-1)
		}
	}
	rd.close()
}

// ring is a bounded FIFO of records.
type ring struct {
	buf  []Record
	head int
	n    int
}

func newRing(size int) ring { return ring{buf: make([]Record, size)} }

// push adds r, dropping the oldest when full (the backlog).
func (q *ring) push(r Record) {
	if q.n == len(q.buf) {
		q.head = (q.head + 1) % len(q.buf)
		q.n--
	}
	q.buf[(q.head+q.n)%len(q.buf)] = r
	q.n++
}

// pushOrLose adds r; when full, the last slot becomes (or stays) a
// KindLost record counting the records missed there, the one it held
// included: the gap is told where it is, and the ring stays bounded.
func (q *ring) pushOrLose(r Record) {
	if q.n < len(q.buf) {
		q.push(r)
		return
	}
	last := &q.buf[(q.head+q.n-1)%len(q.buf)]
	if last.Kind == KindLost && last.Seq == 0 {
		last.Lost++
		return
	}
	*last = Record{Kind: KindLost, Lost: 2}
}

func (q *ring) pop() (Record, bool) {
	if q.n == 0 {
		return Record{}, false
	}
	r := q.buf[q.head]
	q.buf[q.head] = Record{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return r, true
}

func (q *ring) each(f func(*Record)) {
	for i := range q.n {
		f(&q.buf[(q.head+i)%len(q.buf)])
	}
}
