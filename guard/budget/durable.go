package budget

import (
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/klocklabs/klock/internal/writeout"
)

// Durability is pipelined. With group commit, a batch is durable once
// its journal record is (journal.go): the batcher decides it against
// memory and encodes the record; the syncer writes the record into the
// ring at once and starts an fdatasync of the journal that covers it and
// every record written before; when one returns, the batches it covers
// are answered in order, their events go to the emitter and their changes
// to the applier (applier.go), which puts them into SQLite later. While an
// fsync runs, the batcher decides the next batch and the syncer writes it.
//
// Memory (grants, holds, lastEv) changes when the batch is decided, before
// the fsync, so that the next batch is decided against it; nobody is told
// of a decision before it is durable. If a write or an fsync of the
// journal fails, what reached the disk is unknown: every caller waiting is
// refused with ErrLedger, nothing more is decided, and the events are not
// emitted. (Open replays whatever the journal turns out to hold, so a
// refused decision may still be in the ledger, with its receipt: money
// held for a call that did not run, never a call run without its charge.)
//
// Several fsyncs may be in flight at once (maxSyncs, each on its own file
// descriptor). A batch is durable when any fsync that started after its
// record was written returns, so a slow fsync does not hold up the batches
// written after it started: the next one, started meanwhile, may return
// first. Measured on the 2-core VM's disk: one fsync stream completed
// 2,300 syncs/s at p50 275 us; four overlapping ones 6,300/s at p50 510 us.
//
// Each fsync has its own descriptor because Linux reports a writeback
// error once per open file description: with one shared descriptor, a
// concurrent fsync could return success after another consumed the error
// for pages both covered. With one each, every fsync that waited on the
// failed pages reports it.
const maxSyncs = 4

// recBufs holds journal record buffers for reuse: a record is garbage
// once the syncer has copied it into its write, and a fresh one per batch
// was a tenth of what the Store allocated, so of its garbage collections,
// which on two cores take CPU from the decisions callers wait on.
var recBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxRecBuf: a larger record buffer (a huge batch's) is not kept.
const maxRecBuf = 1 << 20

func getRecBuf() []byte { return (*recBufs.Get().(*[]byte))[:0] }

func putRecBuf(b []byte) {
	if cap(b) <= maxRecBuf {
		recBufs.Put(&b)
	}
}

// committed is a decided batch on its way to durability.
type committed struct {
	ops    []*op
	events []*event
	set    *applySet // the batch's changes, for the applier
	rec    []byte    // its journal record
	seq    uint64    // its journal seq (decision order)
	end    int64     // offset after its record in the ring (set by the syncer)
}

type syncDone struct {
	upTo uint64 // every record up to this seq was written before the fsync began
	err  error
}

// span is a record in the ring whose changes SQLite does not yet hold
// durably: its space may not be reused.
type span struct {
	seq      uint64
	off, end int64
}

// syncer writes decided batches to the journal, makes them durable and
// answers them in order.
func (s *Store) syncer() {
	defer s.wgSync.Done()
	reqs := make(chan uint64)
	done := make(chan syncDone, maxSyncs)
	var workers sync.WaitGroup
	for i := 0; i < maxSyncs; i++ {
		workers.Add(1)
		go s.syncWorker(reqs, done, &workers)
	}
	r := &syncState{s: s, in: s.syncQ}
	for r.in != nil || r.inflight > 0 || (len(r.pending) > 0 && r.failed == nil) {
		select {
		case c, ok := <-r.in:
			r.receive(c, ok)
		case d := <-done:
			r.inflight--
			if d.err != nil {
				r.fail(d.err)
			}
			r.durable = max(r.durable, d.upTo)
		case seq := <-s.ap.durable:
			r.release(seq)
		}
		r.write()
		if r.failed == nil && r.inflight < maxSyncs && r.requested < r.written {
			r.requested = r.written
			r.inflight++
			reqs <- r.requested
		}
		r.answer()
	}
	close(reqs)
	workers.Wait()
}

// syncWorker fdatasyncs the journal for each request, on a descriptor of
// its own (see maxSyncs: Linux reports a writeback error once per open
// file description), and reports up to which seq it made durable.
func (s *Store) syncWorker(reqs <-chan uint64, done chan<- syncDone, workers *sync.WaitGroup) {
	defer workers.Done()
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for upTo := range reqs {
		var err error
		if s.cfg.sync {
			if f == nil {
				f, err = os.OpenFile(s.jr.path, os.O_RDWR, 0)
			}
			if err == nil {
				err = datasync(f)
			}
			if err != nil {
				err = fmt.Errorf("the decision journal: %w", err)
			}
		}
		done <- syncDone{upTo, err}
	}
}

// syncState is the syncer's own state: the batches decided and not yet
// answered, how far the journal is written, requested to sync and durable,
// and the ring's live records. Only the syncer goroutine touches it.
type syncState struct {
	s                           *Store
	pending                     []*committed // decided, not yet answered, in order
	nw                          int          // pending[:nw] are written
	written, requested, durable uint64
	inflight                    int
	failed                      error
	in                          <-chan *committed
	live                        []span // in ring order
	head                        int64  // where the next record goes
	buf                         []byte
}

// fail marks the Store broken on the first write or fsync failure: what
// reached the disk is unknown, so every caller waiting is refused.
func (r *syncState) fail(err error) {
	if r.failed == nil {
		// Whatever else happens, the records this covered may be
		// lost: nothing pending is durable.
		r.s.emitMu.Lock()
		r.s.setBroken(ledgerErr(r.s.jr.path, "write", err))
		r.s.emitMu.Unlock()
		r.failed = r.s.broken()
	}
}

// receive queues a decided batch, and every other one already waiting, so
// that they are written with one pwrite; ok false means the batcher has
// stopped.
func (r *syncState) receive(c *committed, ok bool) {
	if !ok {
		r.in = nil
		return
	}
	r.pending = append(r.pending, c)
	for {
		select {
		case c, ok := <-r.in:
			if !ok {
				r.in = nil
				return
			}
			r.pending = append(r.pending, c)
		default:
			return
		}
	}
}

// release frees the ring space of the records SQLite now holds durably
// (up to seq), as the applier reports.
func (r *syncState) release(seq uint64) {
	i := 0
	for i < len(r.live) && r.live[i].seq <= seq {
		i++
	}
	r.live = slices.Delete(r.live, 0, i)
}

// place returns where a record of n bytes goes, or false if that
// space still holds records SQLite lacks.
func (r *syncState) place(n int64) (int64, bool) {
	s := r.s
	if n > s.jr.size/4 {
		if len(r.live) > 0 {
			return 0, false
		}
		if err := s.jr.grow(4 * n); err != nil {
			r.fail(err)
			return 0, false
		}
		return 0, true
	}
	pos := r.head
	if r.head+n > s.jr.size {
		pos = 0
	}
	if len(r.live) == 0 {
		return pos, true
	}
	tail := r.live[0].off
	if tail < r.head { // live is [tail, head)
		return pos, pos == r.head || n <= tail
	}
	return pos, pos == r.head && r.head+n <= tail // live wraps: [tail, size) and [0, head)
}

// write puts the records decided so far into the ring, one pwrite per
// contiguous run.
func (r *syncState) write() {
	for r.nw < len(r.pending) && r.failed == nil {
		at := int64(-1)
		r.buf = r.buf[:0]
		for r.nw < len(r.pending) {
			c := r.pending[r.nw]
			pos, ok := r.place(int64(len(c.rec)))
			if !ok || (at >= 0 && pos != r.head) {
				break
			}
			if at < 0 {
				at = pos
			}
			r.buf = append(r.buf, c.rec...)
			r.head = pos + int64(len(c.rec))
			putRecBuf(c.rec)
			c.rec = nil
			c.end = r.head
			r.live = append(r.live, span{c.seq, pos, r.head})
			r.nw++
		}
		if at < 0 {
			if err := r.s.broken(); err != nil {
				// The applier failed: the space will not come back.
				r.fail(err)
			} else if r.failed == nil {
				r.s.ap.hurry() // out of ring space: let SQLite catch up
			}
			return
		}
		if _, err := r.s.jr.f.WriteAt(r.buf, at); err != nil {
			r.fail(err)
			return
		}
		r.written = r.pending[r.nw-1].seq
	}
}

// answer answers, in order, the batches now durable (or all of them once
// the Store has failed), handing the durable ones' events to the emitter
// and their changes to the applier first.
func (r *syncState) answer() {
	n := 0
	for ; n < len(r.pending) && (r.failed != nil || r.pending[n].seq <= r.durable); n++ {
		c := r.pending[n]
		if r.failed == nil {
			if len(c.events) > 0 {
				r.s.emitQ <- c.events
			}
			r.s.ap.push(c)
		}
		for _, o := range c.ops {
			if r.failed != nil {
				o.res = result{err: r.failed}
			}
			close(o.done)
		}
	}
	r.pending = slices.Delete(r.pending, 0, n)
	r.nw = max(0, r.nw-n)
}

// finish makes one batch durable and answers it, for a Store without group
// commit (the caller holds s.mu, so batches are already one at a time).
func (s *Store) finish(c *committed) {
	err := s.syncLedger(false)
	if err == nil && len(c.events) > 0 {
		s.emitQ <- c.events
	}
	for _, o := range c.ops {
		if err != nil {
			o.res = result{err: err}
		}
	}
}

// syncLedger fsyncs the ledger's WAL (unless WithoutSync); a failure is
// sticky. paced writes the WAL out a piece at a time first (ledgerFile.sync).
func (s *Store) syncLedger(paced bool) error {
	if !s.cfg.sync {
		return nil
	}
	if err := s.wal.sync(paced); err != nil {
		s.emitMu.Lock()
		s.setBroken(ledgerErr(s.path, "sync", err))
		s.emitMu.Unlock()
		return s.broken()
	}
	return nil
}

// ledgerFile is one of the ledger's files (its write-ahead log, or the
// database), opened by path. SQLite keeps the same files for as long as
// its connection is open (exclusive locking mode); the identity is checked
// at every sync anyway, so that a WAL that SQLite recreated (which it does
// only after checkpointing the old one into the synced database) is the
// one synced.
type ledgerFile struct {
	path string
	f    *os.File
	// grows: the file is written mostly at its end (the database: rows
	// are appended, a checkpoint rewrites a few pages elsewhere), so a
	// paced sync paces only what was added since the last one and leaves
	// the scattered pages to the fdatasync; the WAL, rewritten from its
	// start, is paced whole. end is the size at the last paced sync.
	grows bool
	end   int64
}

// sync fsyncs the file's data (fdatasync where there is one: the WAL is
// rewritten in place after each checkpoint, and a file's size is all the
// metadata reading it back needs).
//
// paced (the applier's rounds) first writes the WAL out a piece at a time
// (package writeout). A round leaves some hundreds of KiB of WAL frames in
// the page cache; one fdatasync hands them all to the disk at once, and
// the journal's fdatasyncs, issued meanwhile for the decisions callers
// wait on, then wait for the whole burst (measured on the 2-core VM:
// journal fdatasyncs slower than 2 ms overlapped the WAL's sync eight
// times as often as the others did).
func (w *ledgerFile) sync(paced bool) error {
	st, err := os.Stat(w.path)
	if err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	if w.f != nil {
		if cur, err := w.f.Stat(); err != nil || !os.SameFile(cur, st) {
			w.f.Close()
			w.f = nil
		}
	}
	if w.f == nil {
		if w.f, err = os.OpenFile(w.path, os.O_RDWR, 0); err != nil {
			return fmt.Errorf("%s: %w", w.path, err)
		}
		w.end = 0
	}
	if paced {
		from := int64(0)
		if w.grows {
			// The last page before the old end was likely still
			// being filled.
			from = max(0, min(w.end, st.Size())-writeout.Chunk)
		}
		if err := writeout.Range(w.f, from, st.Size()); err != nil {
			return fmt.Errorf("%s: %w", w.path, err)
		}
		w.end = st.Size()
	}
	return datasync(w.f)
}

func (w *ledgerFile) close() {
	if w.f != nil {
		w.f.Close()
	}
}
