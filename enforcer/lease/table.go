package lease

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/klocklabs/klock/policy"
)

const fileType = policy.ObjFile

// DefaultEndedHistory is how many ended leases of each kind (those that
// let their holder change files, and the others: endedHistory) a Table
// remembers for Filter.EndedSince: enough for a rollback to know what
// another session changed while it ran, and for a reconcile or a listing
// to say what became of a lease that ended recently, not an archive (the
// verification log is that).
const DefaultEndedHistory = 4096

// Table is the in-memory lease manager: klockd's store, and the engine of
// the host-wide store (each process keeps one, fed by the journal).
// Deciding a request costs what the request names, not what the table
// holds: FILE leases are indexed by path, NET leases by host, and expiry by
// deadline.
type Table struct {
	mu       sync.Mutex
	now      func() time.Time
	byGrant  map[uint64]*grant // by base
	byHolder map[Holder][]*grant
	held     int // leases
	files    ptrie
	nets     netIndex
	exp      expHeap
	ended    endedHistory
	waiters  []*waiter               // oldest first
	local    map[string]*localWaiter // the waiters blocked in this process
	subs     map[chan Event]struct{}
	rng      *rand.ChaCha8
	scratch  []*entry
	cursor   cursor // decideLocked's
	// places are where decideLocked found the claims of placesFor, for
	// grantLocked to put them there without walking the trie again.
	places    []place
	placesFor *Claim   // the request's claims, by their first
	unclean   []int    // claims decideLocked found on unclean paths
	grants    []*grant // grantLocked's
	ending    []*entry // releaseLocked's
	// freed is set when leases were freed: the waiters are served before
	// the operation ends.
	freed bool
	// sink, set by the host store while an operation runs, receives every
	// record applied, to journal them.
	sink     func(record)
	deferred []deferred
	// The expiry timer (armLocked): onDue runs an operation that does
	// nothing but expire what is due.
	timer   *time.Timer
	timerAt time.Time
	onDue   func()
	// free keeps ended grants for the next ones, spareHeld the list of
	// the holder that held the last of them.
	free      []*grant
	spareHeld []*grant
	// netObjects are NET objects once rendered: a session asks for the
	// same endpoints again and again.
	netObjects map[policy.NetPattern]string
}

// localWaiter is a waiter blocked in Await in this process.
type localWaiter struct {
	ch chan waitNote
	// pending is its note while the operation that made it is not yet
	// journaled (the waiter's own operation sees it there).
	pending *waitNote
	holder  Holder
	age     time.Time
	since   time.Time
}

// TableOption configures a Table.
type TableOption func(*Table)

// WithClock makes the table read time from now (tests).
func WithClock(now func() time.Time) TableOption { return func(t *Table) { t.now = now } }

// WithEndedHistory sets how many ended leases the table remembers (default
// DefaultEndedHistory; 0 remembers none).
func WithEndedHistory(n int) TableOption {
	return func(t *Table) { t.ended = newEndedHistory(max(n, 0)) }
}

// NewTable returns an empty table.
func NewTable(opts ...TableOption) *Table {
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	t := &Table{now: time.Now, byGrant: map[uint64]*grant{}, byHolder: map[Holder][]*grant{},
		local: map[string]*localWaiter{}, subs: map[chan Event]struct{}{}, rng: rand.NewChaCha8(seed),
		ended: newEndedHistory(DefaultEndedHistory)}
	for _, o := range opts {
		o(t)
	}
	t.onDue = func() { _ = t.op(context.Background(), func(*Table, time.Time) {}) }
	return t
}

var (
	_ Store   = (*Table)(nil)
	_ Awaiter = (*Table)(nil)
)

// newIDLocked returns prefix and 16 hex digits from the table's random
// stream (seeded from the system's): unique across processes sharing a
// host store without coordination.
func (t *Table) newIDLocked(prefix string) string {
	const hexd = "0123456789abcdef"
	var b [24]byte
	n := copy(b[:], prefix)
	v := t.rng.Uint64()
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], v)
	for _, x := range raw {
		b[n], b[n+1] = hexd[x>>4], hexd[x&15]
		n += 2
	}
	return string(b[:n])
}

func clampTTL(ttl, def, max time.Duration) time.Duration {
	if ttl <= 0 {
		return def
	}
	if max > 0 && ttl > max {
		return max
	}
	return ttl
}

func checkRequest(req *Request) error {
	if req.Holder.Session == "" || req.Holder.Agent == "" {
		return fmt.Errorf("%w: a request needs a holder (agent and session)", ErrInvalid)
	}
	for i, c := range req.Claims {
		switch c.Resource.Type {
		case policy.ObjFile:
			// That its path is clean and absolute is checked as it is
			// decided (see decideLocked): the index knows most of it.
		case policy.ObjNet:
		default:
			return fmt.Errorf("%w: claim %d (%s) is on nothing a lease covers", ErrInvalid, i, c.Intent)
		}
	}
	return nil
}

// cleanAbs reports whether p is what path.Clean makes of an absolute
// path (without allocating: a manifest may have thousands).
func cleanAbs(p string) bool {
	n := len(p)
	switch {
	case n == 1:
		return p == "/"
	case n == 0 || p[0] != '/' || p[n-1] == '/':
		return false
	}
	// One pass: after a slash, another slash, or a "." or ".." component.
	for i := 1; i < n; i++ {
		if p[i-1] != '/' {
			continue
		}
		switch p[i] {
		case '/':
			return false
		case '.':
			if i+1 == n || p[i+1] == '/' || p[i+1] == '.' && (i+2 == n || p[i+2] == '/') {
				return false
			}
		}
	}
	return true
}

// op runs f with the table locked, expired at now and its waiters served,
// and serves them again if f freed leases. Every operation goes through
// here (Host has its own, which also journals).
func (t *Table) op(_ context.Context, f func(t *Table, now time.Time)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.runLocked(t.now(), f)
	t.armLocked()
	return nil
}

func (t *Table) runLocked(now time.Time, f func(t *Table, now time.Time)) {
	t.expireLocked(now)
	t.serveLocked(now)
	f(t, now)
	t.serveLocked(now)
}

// expireLocked ends the leases no longer held at now: the grants past
// their deadline, from the top of the heap, so that it costs what expires.
func (t *Table) expireLocked(now time.Time) {
	var es []*entry
	for len(t.exp) > 0 && now.After(t.exp[0].deadline) {
		es = liveEntries(t.exp.remove(0), es)
	}
	if es != nil {
		t.endLocked(es, Expired, now)
	}
}

func liveEntries(g *grant, out []*entry) []*entry {
	for i := range g.entries {
		if e := &g.entries[i]; e.live {
			out = append(out, e)
		}
	}
	return out
}

// endLocked ends the leases es (distinct, live) in state s.
func (t *Table) endLocked(es []*entry, s State, now time.Time) {
	var ids []string
	if t.sink != nil { // the journal names them
		ids = make([]string, len(es))
		for i, e := range es {
			ids[i] = e.id
		}
	}
	t.applyLocked(record{Op: opEnd, At: now, IDs: ids, State: s, ending: es})
}

// serveLocked, when leases were freed, hands them to the waiters oldest
// first, one grant after the other: each waiter is decided against what
// the ones before it were granted, and only the ones granted (or that now
// must die, or gave up) are woken.
func (t *Table) serveLocked(now time.Time) {
	if !t.freed {
		return
	}
	t.freed = false
	for i := 0; i < len(t.waiters); {
		w := t.waiters[i]
		if now.After(w.Until) {
			t.applyLocked(record{Op: opUnwait, At: now, Waiter: w.ID, Why: "timeout"})
			continue
		}
		req := w.request()
		switch d := t.decideLocked(&req, now); d.Outcome {
		case Granted:
			t.grantLocked(&req, now, &d, w.ID)
		case Die:
			t.applyLocked(record{Op: opUnwait, At: now, Waiter: w.ID, Why: "die"})
		default:
			i++
		}
	}
	t.freed = false
}

// decideLocked is Wait-Die for the whole request against the leases held,
// changing nothing.
func (t *Table) decideLocked(req *Request, now time.Time) Decision {
	d := Decision{Outcome: Granted, Age: req.Age}
	cur := &t.cursor
	cur.node = nil
	t.places, t.placesFor, t.unclean = t.places[:0], unsafe.SliceData(req.Claims), t.unclean[:0]
	for i := range req.Claims {
		c := &req.Claims[i]
		mask := conflictMask[bucket(c.Predicate)]
		cand := t.scratch[:0]
		if c.Resource.Type == fileType {
			p := c.Resource.Path.Path
			if p == "" || p[0] != '/' {
				t.unclean = append(t.unclean, i)
				t.places = append(t.places, place{})
				continue
			}
			cand = t.files.each(c.Resource.Path, mask, cand, cur)
			t.places = append(t.places, place{leaf: cur.leaf, dir: cur.leafDir})
			// A path whose directory is in the trie is clean but for its
			// last component.
			if leaf := p[strings.LastIndexByte(p, '/')+1:]; !(p == "/" || cur.dirClean && leaf != "" && leaf != "." && leaf != "..") &&
				!cleanAbs(p) {
				t.unclean = append(t.unclean, i)
			}
		} else {
			t.places = append(t.places, place{})
			cand = t.nets.each(c.Resource.Net, mask, cand)
		}
		for _, e := range cand {
			g := e.g
			if g.holder.SameParty(req.Holder) {
				continue
			}
			o := Die
			if req.Age.Before(g.age) {
				o = Wait
			}
			d.Conflicts = append(d.Conflicts, Conflict{Claim: *c, Held: e.lease(), Outcome: o})
			if o > d.Outcome {
				d.Outcome = o
			}
			if w := g.deadline.Sub(now); d.WaitTime == 0 || w < d.WaitTime {
				d.WaitTime = w
			}
		}
		clear(cand)
		t.scratch = cand[:0]
	}
	cur.node, cur.dir = nil, ""
	return d
}

// grantLocked grants req, decided Granted as d, and records it (for
// waiter, when the grant serves a queued request).
func (t *Table) grantLocked(req *Request, now time.Time, d *Decision, waiter string) {
	ttl := clampTTL(req.TTL, DefaultTTL, MaxTTL)
	grace := clampTTL(req.Grace, DefaultGrace, MaxTTL)
	n := len(req.Claims)
	gs := t.grants[:0]
	places := t.places
	if t.placesFor != unsafe.SliceData(req.Claims) || len(places) != n {
		places = nil
	}
	var all string // every lease's ID, for d
	for start := 0; start < n; start += maxGrant {
		end := min(n, start+maxGrant)
		g := t.newGrantLocked(end - start)
		g.base, g.holder, g.age, g.acquiredAt, g.expiresAt, g.ttl, g.grace =
			t.newBaseLocked(), req.Holder, req.Age, now, now.Add(ttl), ttl, grace
		ids := leaseIDs(g.base, end-start)
		all += ids // one string but for requests of more than maxGrant claims
		for i := start; i < end; i++ {
			c := &req.Claims[i]
			e := &g.entries[i-start]
			k := i - start
			*e = entry{g: g, id: ids[k*idLen : (k+1)*idLen], predicate: c.Predicate, bucket: bucket(c.Predicate), live: true,
				res: c.Resource, intent: c.Intent}
			if c.Resource.Type == fileType {
				e.node = t.nodeLocked(c.Resource.Path.Path, places, i)
				e.object = e.node.object(c.Resource)
			} else {
				e.object = t.netObjectLocked(c.Resource)
			}
		}
		g.live = end - start
		gs = append(gs, g)
		// A later chunk's base must not collide with this one's.
		t.byGrant[g.base] = g
	}
	d.granted = granted{ids: all, claims: req.Claims, holder: req.Holder, age: req.Age, acquired: now,
		expires: now.Add(ttl), ttl: ttl, grace: grace}
	t.applyLocked(record{Op: opGrant, At: now, Waiter: waiter, grants: gs})
	clear(gs)
	t.grants = gs[:0]
}

// nodeLocked is the trie node of path p, claim i of the request just
// decided: found then, or made under the directory found then, or made
// from the root.
func (t *Table) nodeLocked(p string, places []place, i int) *pnode {
	if places != nil {
		switch pl := places[i]; {
		case pl.leaf != nil:
			return pl.leaf
		case pl.dir != nil:
			return t.files.child(pl.dir, p[strings.LastIndexByte(p, '/')+1:])
		}
	}
	return t.files.node(p)
}

// place is where decideLocked found a FILE claim in the trie: its own
// node, or its directory's when it has none.
type place struct{ dir, leaf *pnode }

// acquireLocked decides req and grants it when it can be.
func (t *Table) acquireLocked(req *Request, now time.Time) (Decision, error) {
	if req.Age.IsZero() {
		req.Age = now
	}
	d := t.decideLocked(req, now)
	if err := t.uncleanLocked(req); err != nil {
		return Decision{}, err
	}
	if d.Outcome == Granted {
		t.grantLocked(req, now, &d, "")
	} else if len(t.subs) > 0 {
		c := d // the event's own: d stays off the heap
		t.publishLocked(Event{Type: ContentionDetected, Decision: &c, Holder: req.Holder, Time: now})
	}
	return d, nil
}

// uncleanLocked refuses req when decideLocked found a FILE claim of it on
// a path that is not clean and absolute (the path index walks only those).
func (t *Table) uncleanLocked(req *Request) error {
	if len(t.unclean) == 0 {
		return nil
	}
	i := t.unclean[0]
	return fmt.Errorf("%w: claim %d (%s) is not on a clean absolute path", ErrInvalid, i, req.Claims[i].Intent)
}

// Acquire implements Store.
func (t *Table) Acquire(_ context.Context, req Request) (Decision, error) {
	if err := checkRequest(&req); err != nil {
		return Decision{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.expireLocked(now)
	t.serveLocked(now)
	d, err := t.acquireLocked(&req, now)
	t.serveLocked(now)
	t.armLocked()
	return d, err
}

func acquire(ctx context.Context, e engine, req Request) (d Decision, err error) {
	if err := checkRequest(&req); err != nil {
		return Decision{}, err
	}
	var aerr error
	err = e.op(ctx, func(t *Table, now time.Time) { d, aerr = t.acquireLocked(&req, now) })
	if err != nil {
		return Decision{}, err
	}
	return d, aerr
}

func (t *Table) heartbeatLocked(h Holder, now time.Time) (time.Time, error) {
	gs := t.byHolder[h]
	if len(gs) == 0 {
		return time.Time{}, fmt.Errorf("%w: session %s holds none", ErrGone, h.Session)
	}
	t.applyLocked(record{Op: opBeat, At: now, Holder: &h})
	until := gs[0].expiresAt
	for _, g := range gs[1:] {
		if g.expiresAt.Before(until) {
			until = g.expiresAt
		}
	}
	return until, nil
}

// Heartbeat implements Store.
func (t *Table) Heartbeat(ctx context.Context, h Holder) (time.Time, error) {
	return heartbeat(ctx, t, h)
}

func heartbeat(ctx context.Context, e engine, h Holder) (until time.Time, err error) {
	var herr error
	if err := e.op(ctx, func(t *Table, now time.Time) { until, herr = t.heartbeatLocked(h, now) }); err != nil {
		return time.Time{}, err
	}
	return until, herr
}

func (t *Table) releaseLocked(h Holder, ids []string, now time.Time) int {
	var end []*entry
	if len(ids) == 0 {
		gs := t.byHolder[h]
		n := 0
		for _, g := range gs {
			n += g.live
		}
		end = slices.Grow(t.ending[:0], n)
		for _, g := range gs {
			end = liveEntries(g, end)
		}
		defer func() { clear(end); t.ending = end[:0] }()
	} else {
		for _, id := range ids {
			if e := t.entryLocked(id); e != nil && e.g.holder == h && !slices.Contains(end, e) {
				end = append(end, e)
			}
		}
	}
	if len(end) > 0 {
		t.endLocked(end, Released, now)
	}
	return len(end)
}

// Release implements Store.
func (t *Table) Release(_ context.Context, h Holder, ids ...string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.expireLocked(now)
	t.serveLocked(now)
	n := t.releaseLocked(h, ids, now)
	t.serveLocked(now)
	t.armLocked()
	return n, nil
}

func release(ctx context.Context, e engine, h Holder, ids []string) (n int, err error) {
	err = e.op(ctx, func(t *Table, now time.Time) { n = t.releaseLocked(h, ids, now) })
	return n, err
}

func (t *Table) revokeLocked(idOrSession string, now time.Time) int {
	var end []*entry
	if e := t.entryLocked(idOrSession); e != nil {
		end = append(end, e)
	}
	for h, gs := range t.byHolder {
		if h.Session == idOrSession {
			for _, g := range gs {
				for i := range g.entries {
					if e := &g.entries[i]; e.live && !slices.Contains(end[:min(len(end), 1)], e) {
						end = append(end, e)
					}
				}
			}
		}
	}
	if len(end) > 0 {
		t.endLocked(end, Revoked, now)
	}
	return len(end)
}

// Revoke implements Store.
func (t *Table) Revoke(ctx context.Context, idOrSession string) (int, error) {
	return revoke(ctx, t, idOrSession)
}

func revoke(ctx context.Context, e engine, idOrSession string) (n int, err error) {
	err = e.op(ctx, func(t *Table, now time.Time) { n = t.revokeLocked(idOrSession, now) })
	return n, err
}

func (t *Table) listLocked(f Filter) []Lease {
	keep := func(l *Lease) bool {
		return (f.Tenant == "" || l.Holder.Tenant == f.Tenant) && (f.Session == "" || l.Holder.Session == f.Session) &&
			(f.Overlapping == nil || Overlap(*f.Overlapping, l.Resource))
	}
	var out []Lease
	switch {
	case f.Overlapping != nil:
		var cand []*entry
		if f.Overlapping.Type == fileType {
			cand = t.files.each(f.Overlapping.Path, allBuckets, nil, &cursor{})
		} else if f.Overlapping.Type == policy.ObjNet {
			cand = t.nets.each(f.Overlapping.Net, allBuckets, nil)
		}
		for _, e := range cand {
			if l := e.lease(); keep(&l) {
				out = append(out, l)
			}
		}
	default:
		for h, gs := range t.byHolder {
			if (f.Tenant != "" && h.Tenant != f.Tenant) || (f.Session != "" && h.Session != f.Session) {
				continue
			}
			for _, g := range gs {
				for i := range g.entries {
					if e := &g.entries[i]; e.live {
						out = append(out, e.lease())
					}
				}
			}
		}
	}
	if !f.EndedSince.IsZero() {
		t.ended.each(f.EndedSince, func(l Lease) {
			if keep(&l) {
				out = append(out, l)
			}
		})
	}
	slices.SortStableFunc(out, func(a, b Lease) int {
		return cmp.Or(a.AcquiredAt.Compare(b.AcquiredAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// List implements Store. Leases come oldest grant first.
func (t *Table) List(ctx context.Context, f Filter) ([]Lease, error) { return list(ctx, t, f) }

func list(ctx context.Context, e engine, f Filter) (out []Lease, err error) {
	err = e.op(ctx, func(t *Table, _ time.Time) { out = t.listLocked(f) })
	return out, err
}

// Close implements Store.
func (t *Table) Close() error { return nil }

const maxNetObjects = 1024

// netObjectLocked renders NET resource r as its object.
func (t *Table) netObjectLocked(r Resource) string {
	if s, ok := t.netObjects[r.Net]; ok {
		return s
	}
	if t.netObjects == nil || len(t.netObjects) >= maxNetObjects {
		t.netObjects = map[policy.NetPattern]string{}
	}
	s := r.String()
	t.netObjects[r.Net] = s
	return s
}

// endedHistory is what a Table remembers of ended leases, in two rings
// of the same size: the leases that let their holders change files
// (MUTATES, DELETES, RENAMES, PROVIDES on FILE), which a strict rollback
// reads to leave what another session changed while it ran, and the
// others. A session that reads thousands of files then never pushes a
// neighbour's writes out of what a rollback is told.
//
// A host store's snapshot carries the history as its first lines; a new
// process reads them only when the history is first asked for (unread,
// read): a klock run that starts, takes its leases and releases them
// never does, and decoding some 8,000 ended leases was most of its
// start on a busy host.
type endedHistory struct {
	changing, other endedRing
	// unread are a snapshot's history lines not decoded yet, oldest
	// first: older than everything in the rings.
	unread []endedLine
	// bad is the first unread line that did not decode (the journal is
	// corrupt there); its leases are not in the history.
	bad *endedLine
}

// endedLine is one journal line of a snapshot's history, where it was.
type endedLine struct {
	line   []byte
	off    int64 // of its first byte
	n      int   // 1-based
	leases int   // how many it holds
	// latest is when the last of its leases ended (Unix nanoseconds),
	// read without decoding the line; math.MaxInt64 when one's end
	// could not be read so.
	latest int64
	err    error // why it did not decode (bad)
}

// endedAt precedes each lease's end in a history line (appendLease).
var endedAt = []byte(`"ended_at":"`)

// latestEnd is when the last lease of a history line ended, read from
// its "ended_at" fields alone (math.MaxInt64 when one does not parse):
// a question about what ended since a time after it need not decode the
// line. Leases of one line mostly ended together: a time equal to the
// one before is not parsed again.
func latestEnd(line []byte) int64 {
	var latest int64
	var prev []byte
	for rest := line; ; {
		i := bytes.Index(rest, endedAt)
		if i < 0 {
			return latest
		}
		rest = rest[i+len(endedAt):]
		j := bytes.IndexByte(rest, '"')
		if j < 0 {
			return math.MaxInt64
		}
		v := rest[:j]
		rest = rest[j:]
		if bytes.Equal(v, prev) {
			continue
		}
		prev = v
		at, err := time.Parse(time.RFC3339Nano, string(v))
		if err != nil {
			return math.MaxInt64
		}
		latest = max(latest, at.UnixNano())
	}
}

// leaseStart begins every lease a history line holds (appendLease); in a
// JSON string a quote is escaped, so it begins nothing else.
var leaseStart = []byte(`{"id":`)

// deferLine keeps a snapshot's history line to decode when the history
// is first read, and says whether it did: only while the rings are empty
// (a snapshot's history comes first), so that the order holds.
func (h *endedHistory) deferLine(line []byte, off int64, n int) bool {
	if h.changing.max == 0 || len(h.changing.buf) > 0 || len(h.other.buf) > 0 {
		return false
	}
	h.unread = append(h.unread, endedLine{line: bytes.Clone(line), off: off, n: n, leases: bytes.Count(line, leaseStart), latest: latestEnd(line)})
	return true
}

// keepUnread says whether a compaction may write the unread lines again
// as they are, before the rings, rather than decode them: while they and
// the rings hold at most twice the history's size (both kinds), so that
// a store whose processes never read the history compacts without
// decoding it, and one that reads it trims it to its size.
func (h *endedHistory) keepUnread() bool {
	n := len(h.changing.buf) + len(h.other.buf)
	for i := range h.unread {
		n += h.unread[i].leases
	}
	return n <= 4*h.changing.max
}

// read decodes the unread lines into the rings, before what was pushed
// since (the rings keep the newest). A line that does not decode is left
// out and kept in bad.
func (h *endedHistory) read() {
	if len(h.unread) == 0 {
		return
	}
	lines := h.unread
	h.unread = nil
	older := newEndedHistory(h.changing.max)
	for i := range lines {
		var r record
		err := decodeLine(lines[i].line, &r)
		if err == nil {
			err = r.check(false)
		}
		if err == nil && r.Op != opEnded {
			err = fmt.Errorf("a %q record among a snapshot's ended leases", r.Op)
		}
		if err != nil {
			if h.bad == nil {
				h.bad = &endedLine{off: lines[i].off, n: lines[i].n, err: err}
			}
			continue
		}
		for j := range r.Leases {
			older.push(&r.Leases[j])
		}
	}
	for _, r := range [...][2]*endedRing{{&older.changing, &h.changing}, {&older.other, &h.other}} {
		dst, src := r[0], r[1]
		for i := range src.buf {
			dst.add(src.buf[(src.head+i)%len(src.buf)])
		}
	}
	h.changing, h.other = older.changing, older.other
}

func newEndedHistory(n int) endedHistory {
	return endedHistory{changing: endedRing{max: n}, other: endedRing{max: n}}
}

func (h *endedHistory) ring(p policy.Predicate, t policy.ObjectType) *endedRing {
	if t == fileType && policy.Changing.Has(p) {
		return &h.changing
	}
	return &h.other
}

func (h *endedHistory) push(l *Lease) { h.ring(l.Predicate, l.Resource.Type).push(l) }

func (h *endedHistory) pushEntry(e *entry, s State, at time.Time) {
	h.ring(e.predicate, e.res.Type).pushEntry(e, s, at)
}

// each calls f with the ended leases that ended at or after since: the
// changing ones, then the others, each ring oldest first.
func (h *endedHistory) each(since time.Time, f func(Lease)) {
	s := since.UnixNano()
	for i := range h.unread {
		if h.unread[i].latest >= s {
			h.read() // it holds a lease that ended since
			break
		}
	}
	h.changing.each(since, f)
	h.other.each(since, f)
}

// endedRing keeps the last max ended leases, oldest first, compactly
// (what List renders again when asked; the resource is parsed back from
// the object then): a table that grants and releases all day copies them
// here all day.
type endedRing struct {
	buf       []endedLease
	head, max int
}

type endedLease struct {
	id, object, intent            string
	holder                        Holder
	predicate                     policy.Predicate
	state                         State
	age, acquired, expires, ended int64 // Unix nanoseconds
	ttl, grace                    time.Duration
}

func (r *endedRing) push(l *Lease) {
	if r.max == 0 {
		return
	}
	r.add(endedLease{id: l.ID, object: l.Object, intent: l.Intent, holder: l.Holder, predicate: l.Predicate, state: l.State,
		age: l.Age.UnixNano(), acquired: l.AcquiredAt.UnixNano(), expires: l.ExpiresAt.UnixNano(), ended: l.EndedAt.UnixNano(),
		ttl: l.TTL, grace: l.Grace})
}

func (r *endedRing) add(x endedLease) {
	if len(r.buf) < r.max {
		r.buf = append(r.buf, x)
		return
	}
	r.buf[r.head] = x
	r.head = (r.head + 1) % len(r.buf)
}

func (r *endedRing) pushEntry(e *entry, s State, at time.Time) {
	if r.max == 0 {
		return
	}
	g := e.g
	r.add(endedLease{id: e.id, object: e.object, intent: e.intent, holder: g.holder, predicate: e.predicate, state: s,
		age: g.age.UnixNano(), acquired: g.acquiredAt.UnixNano(), expires: g.expiresAt.UnixNano(), ended: at.UnixNano(),
		ttl: g.ttl, grace: g.grace})
}

func (x *endedLease) lease() Lease {
	l := x.unparsed()
	l.Resource, _ = ParseResource(x.object)
	return l
}

// unparsed is the lease without its Resource (what the journal writes
// of it: its object).
func (x *endedLease) unparsed() Lease {
	return Lease{ID: x.id, Holder: x.holder, Predicate: x.predicate, Object: x.object, Intent: x.intent,
		Age: time.Unix(0, x.age), AcquiredAt: time.Unix(0, x.acquired), ExpiresAt: time.Unix(0, x.expires), TTL: x.ttl,
		Grace: x.grace, State: x.state, EndedAt: time.Unix(0, x.ended)}
}

// appendUnparsed appends every ended lease in the rings, oldest first,
// without its Resource: a compaction writes them all (after the unread
// lines it keeps), and parsing each object back was most of its cost.
func (h *endedHistory) appendUnparsed(out []Lease) []Lease {
	for _, r := range [...]*endedRing{&h.changing, &h.other} {
		for i := range r.buf {
			out = append(out, r.buf[(r.head+i)%len(r.buf)].unparsed())
		}
	}
	return out
}

// each calls f with the ended leases that ended at or after since.
func (r *endedRing) each(since time.Time, f func(Lease)) {
	s := since.UnixNano()
	for i := range r.buf {
		if x := &r.buf[(r.head+i)%len(r.buf)]; x.ended >= s {
			f(x.lease())
		}
	}
}

// Check answers what Acquire would answer for req now, changing nothing
// (no lease is granted, no event published): a dry run.
func (t *Table) Check(ctx context.Context, req Request) (Decision, error) { return check(ctx, t, req) }

// check is Check of a Table or a Host: decide req on the engine's table,
// up to date, granting nothing.
func check(ctx context.Context, e engine, req Request) (d Decision, err error) {
	if err := checkRequest(&req); err != nil {
		return Decision{}, err
	}
	var cerr error
	err = e.op(ctx, func(t *Table, now time.Time) {
		if req.Age.IsZero() {
			req.Age = now
		}
		d = t.decideLocked(&req, now)
		if cerr = t.uncleanLocked(&req); cerr != nil {
			d = Decision{}
		}
	})
	if err == nil {
		err = cerr
	}
	return d, err
}
