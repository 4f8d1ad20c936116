package budget

import (
	"fmt"
	"os"
	"slices"
	"sync"
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
		go func() {
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
		}()
	}
	var (
		pending                     []*committed // decided, not yet answered, in order
		nw                          int          // pending[:nw] are written
		written, requested, durable uint64
		inflight                    int
		failed                      error
		in                          = s.syncQ
		live                        []span // in ring order
		head                        int64  // where the next record goes
		buf                         []byte
	)
	fail := func(err error) {
		if failed == nil {
			// Whatever else happens, the records this covered may be
			// lost: nothing pending is durable.
			s.emitMu.Lock()
			s.setBroken(ledgerErr(s.jr.path, "write", err))
			s.emitMu.Unlock()
			failed = s.broken()
		}
	}
	// place returns where a record of n bytes goes, or false if that
	// space still holds records SQLite lacks.
	place := func(n int64) (int64, bool) {
		if n > s.jr.size/4 {
			if len(live) > 0 {
				return 0, false
			}
			if err := s.jr.grow(4 * n); err != nil {
				fail(err)
				return 0, false
			}
			return 0, true
		}
		pos := head
		if head+n > s.jr.size {
			pos = 0
		}
		if len(live) == 0 {
			return pos, true
		}
		tail := live[0].off
		if tail < head { // live is [tail, head)
			return pos, pos == head || n <= tail
		}
		return pos, pos == head && head+n <= tail // live wraps: [tail, size) and [0, head)
	}
	// write puts the records decided so far into the ring, one pwrite per
	// contiguous run.
	write := func() {
		for nw < len(pending) && failed == nil {
			at := int64(-1)
			buf = buf[:0]
			for nw < len(pending) {
				c := pending[nw]
				pos, ok := place(int64(len(c.rec)))
				if !ok || (at >= 0 && pos != head) {
					break
				}
				if at < 0 {
					at = pos
				}
				buf = append(buf, c.rec...)
				head = pos + int64(len(c.rec))
				c.end = head
				live = append(live, span{c.seq, pos, head})
				nw++
			}
			if at < 0 {
				if err := s.broken(); err != nil {
					// The applier failed: the space will not come back.
					fail(err)
				} else if failed == nil {
					s.ap.hurry() // out of ring space: let SQLite catch up
				}
				return
			}
			if _, err := s.jr.f.WriteAt(buf, at); err != nil {
				fail(err)
				return
			}
			written = pending[nw-1].seq
		}
	}
	answer := func() {
		n := 0
		for ; n < len(pending) && (failed != nil || pending[n].seq <= durable); n++ {
			c := pending[n]
			if failed == nil {
				if len(c.events) > 0 {
					s.emitQ <- c.events
				}
				s.ap.push(c)
			}
			for _, o := range c.ops {
				if failed != nil {
					o.res = result{err: failed}
				}
				close(o.done)
			}
		}
		pending = slices.Delete(pending, 0, n)
		nw = max(0, nw-n)
	}
	for in != nil || inflight > 0 || (len(pending) > 0 && failed == nil) {
		select {
		case c, ok := <-in:
			if !ok {
				in = nil
				break
			}
			pending = append(pending, c)
		drain:
			for {
				select {
				case c, ok := <-in:
					if !ok {
						in = nil
						break drain
					}
					pending = append(pending, c)
				default:
					break drain
				}
			}
		case d := <-done:
			inflight--
			if d.err != nil {
				fail(d.err)
			}
			durable = max(durable, d.upTo)
		case seq := <-s.ap.durable:
			i := 0
			for i < len(live) && live[i].seq <= seq {
				i++
			}
			live = slices.Delete(live, 0, i)
		}
		write()
		if failed == nil && inflight < maxSyncs && requested < written {
			requested = written
			inflight++
			reqs <- requested
		}
		answer()
	}
	close(reqs)
	workers.Wait()
}

// finish makes one batch durable and answers it, for a Store without group
// commit (the caller holds s.mu, so batches are already one at a time).
func (s *Store) finish(c *committed) {
	err := s.syncLedger()
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
// sticky.
func (s *Store) syncLedger() error {
	if !s.cfg.sync {
		return nil
	}
	if err := s.wal.sync(); err != nil {
		s.emitMu.Lock()
		s.setBroken(ledgerErr(s.path, "sync", err))
		s.emitMu.Unlock()
		return s.broken()
	}
	return nil
}

// walFile is the ledger's write-ahead log, opened by path. SQLite keeps
// the same file for as long as its connection is open (exclusive locking
// mode); the identity is checked at every sync anyway, so that a WAL that
// SQLite recreated (which it does only after checkpointing the old one
// into the synced database) is the one synced.
type walFile struct {
	path string
	f    *os.File
}

// sync fsyncs the WAL's data (fdatasync where there is one: the WAL is
// rewritten in place after each checkpoint, and its size is all the
// metadata reading it back needs).
func (w *walFile) sync() error {
	st, err := os.Stat(w.path)
	if err != nil {
		return fmt.Errorf("the write-ahead log: %w", err)
	}
	if w.f != nil {
		if cur, err := w.f.Stat(); err != nil || !os.SameFile(cur, st) {
			w.f.Close()
			w.f = nil
		}
	}
	if w.f == nil {
		if w.f, err = os.OpenFile(w.path, os.O_RDWR, 0); err != nil {
			return fmt.Errorf("the write-ahead log: %w", err)
		}
	}
	return datasync(w.f)
}

func (w *walFile) close() {
	if w.f != nil {
		w.f.Close()
	}
}
