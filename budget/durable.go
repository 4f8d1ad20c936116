package budget

import (
	"fmt"
	"os"
	"slices"
	"sync"
)

// Durability is pipelined. The ledger runs with synchronous=NORMAL: a
// commit writes its WAL frames and returns without an fsync, and the
// syncer goroutine fsyncs the WAL file before it answers the batch's
// callers and hands its events to the emitter. While that fsync runs, the
// batcher decides and commits the next batch, and the next fsync covers
// every batch committed meanwhile. With synchronous=FULL each commit
// fsynced the WAL itself, so deciding, writing and syncing ran one after
// the other and a batch's CPU work and its fsync could not overlap.
//
// This is the same guarantee as FULL, reached later: FULL differs from
// NORMAL in WAL mode only by that fsync of the WAL at each commit (SQLite
// still syncs the WAL header when it restarts the WAL, and the WAL and the
// database around checkpoints, under NORMAL). An fsync covers every write
// made to the file before it, through any descriptor, so once it returns
// the commit's frames are on stable storage and a caller is answered. If
// it fails, what reached the disk is unknown: every caller waiting on it
// is refused with ErrLedger, nothing more is decided, and the events are
// not emitted (Open re-emits whatever the ledger turns out to hold).
//
// Memory (grants, holds, lastEv) changes at commit, before the fsync, so
// that the next batch is decided against it, exactly as SQLite's own view
// does; nobody is told of a decision before it is durable.

// Several fsyncs may be in flight at once (maxSyncs, each on its own file
// descriptor). A batch is durable when any fsync that started after its
// commit returns, so a slow fsync does not hold up the batches committed
// after it started: the next one, started meanwhile, may return first.
// Measured on the 2-core VM's disk: one fsync stream completed 2,300
// syncs/s at p50 275 us; four overlapping ones 6,300/s at p50 510 us, so a
// batch waits for its own fsync instead of the end of an earlier one plus
// its own.
//
// Each fsync has its own descriptor because Linux reports a writeback
// error once per open file description: with one shared descriptor, a
// concurrent fsync could return success after another consumed the error
// for pages both covered. With one each, every fsync that waited on the
// failed pages reports it.
const maxSyncs = 4

// committed is a batch whose transaction has committed and whose callers
// wait for the fsync.
type committed struct {
	ops    []*op
	events []*event
	seq    uint64 // commit order, numbered by the syncer
}

type syncDone struct {
	upTo uint64 // every batch up to this seq was committed before the fsync began
	err  error
}

// syncer makes committed batches durable and answers them in commit order.
func (s *Store) syncer() {
	defer s.wgSync.Done()
	reqs := make(chan uint64)
	done := make(chan syncDone, maxSyncs)
	var workers sync.WaitGroup
	for i := 0; i < maxSyncs; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			w := &walFile{path: s.wal.path}
			defer w.close()
			for upTo := range reqs {
				var err error
				if s.cfg.sync {
					err = w.sync()
				}
				done <- syncDone{upTo, err}
			}
		}()
	}
	var (
		pending                        []committed // committed, not yet known durable, in order
		committedN, requested, durable uint64
		inflight                       int
		failed                         error
		in                             = s.syncQ
	)
	answer := func() {
		n := 0
		for ; n < len(pending) && (failed != nil || pending[n].seq <= durable); n++ {
			c := pending[n]
			if failed == nil && len(c.events) > 0 {
				s.emitQ <- c.events
			}
			for _, o := range c.ops {
				if failed != nil {
					o.res = result{err: failed}
				}
				close(o.done)
			}
		}
		pending = slices.Delete(pending, 0, n)
	}
	for in != nil || inflight > 0 {
		select {
		case c, ok := <-in:
			if !ok {
				in = nil
				break
			}
			committedN++
			c.seq = committedN
			pending = append(pending, c)
		case d := <-done:
			inflight--
			if d.err != nil && failed == nil {
				// Whatever the other fsyncs say, the pages this one
				// waited on may be lost: nothing pending is durable.
				s.emitMu.Lock()
				s.setBroken(ledgerErr(s.path, "sync", d.err))
				s.emitMu.Unlock()
				failed = s.broken()
			}
			durable = max(durable, d.upTo)
		}
		if failed == nil && inflight < maxSyncs && requested < committedN {
			requested = committedN
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
func (s *Store) finish(c committed) {
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
