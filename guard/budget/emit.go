package budget

import (
	"fmt"
	"runtime"
	"time"

	"github.com/klocklabs/klock/guard/receipt"
)

// Durable events become signed receipts in ledger order on one emitter
// goroutine. Their canonical bodies were made when they were decided
// (view.prepare); the emitter takes every durable batch waiting for it
// (lingering briefly for a fuller round: emitLinger), links and signs
// their receipts, and appends them, one write per emitChunk. When the
// emitter falls behind,
// its rounds grow, so its fixed costs shrink per receipt instead of piling
// up.
//
// The chain is not fsynced per round. The ledger is the durable record:
// every event row (and, until SQLite has it, every journal record) holds
// its receipt's canonical body, and Open replays the journal, then re-emits
// whatever the chain lacks, and since signing is deterministic (ed25519)
// and the link and seq follow from the chain itself, a receipt lost with
// the page cache comes back byte for byte. A kill -9 loses nothing (the
// lines are in the page cache). So the chain is synced when someone waits
// for it (Flush, Close) and at least every chainSyncEvery, which bounds the
// re-emission work after a power loss; per-round fsyncs of the chain only
// competed with the ledger's own fsync for the disk, on the path callers
// wait on.

// maxEmit bounds one emitter round (receipts), so a long backlog is still
// made durable, and Flush answered, in steps.
const maxEmit = 4096

// emitChunk is how many receipts the emitter links and appends as one
// signed batch (receipt.Log.AppendBatch: one ed25519 signature over the
// batch's Merkle root) before it lets other goroutines run. A signature
// per receipt cost 40-50 us on the 2-core VM, over a third of the CPU of a
// durable decision; hashing a receipt into the tree costs about 1 us, so a
// chunk of 256 runs well under Go's 10 ms preemption slice and the batcher
// and syncer, whose work callers wait on, are not queued behind it.
const emitChunk = 256

// chainSyncEvery bounds how long appended receipts stay unsynced.
const chainSyncEvery = 200 * time.Millisecond

func (s *Store) emitter() {
	defer s.wgEmit.Done()
	var evs []*event
	for {
		select {
		case b := <-s.emitQ:
			evs = append(evs[:0], b...)
		case <-s.stopEm:
			// The committer has stopped; drain what it committed.
			for {
				select {
				case b := <-s.emitQ:
					s.emit(b)
				default:
					return
				}
			}
		}
		evs = s.gather(evs)
		s.emit(evs)
	}
}

// emitLinger is how long the emitter waits for a round to fill to
// emitChunk receipts before it signs a smaller one. Woken per durable
// batch, it signed rounds of a few receipts each: with 16 callers some
// 2,000 signatures for 40,000 decisions, 3 us of CPU per decision taken
// from the batcher and syncer that callers wait on. Nobody waits on a
// receipt but Flush and Close, and they hurry the emitter.
const emitLinger = 2 * time.Millisecond

// gather adds every batch already queued to evs, then, while the round
// is short of emitChunk, waits up to emitLinger for more (less if Flush
// or Close hurries it).
func (s *Store) gather(evs []*event) []*event {
	evs = s.gatherQueued(evs)
	if len(evs) >= emitChunk {
		return evs
	}
	t := time.NewTimer(emitLinger)
	defer t.Stop()
	for len(evs) < emitChunk {
		select {
		case b := <-s.emitQ:
			evs = append(evs, b...)
		case <-s.hurryEm:
			return s.gatherQueued(evs)
		case <-s.stopEm:
			return s.gatherQueued(evs)
		case <-t.C:
			return evs
		}
	}
	return evs
}

// gatherQueued adds every batch already queued to evs, up to maxEmit.
func (s *Store) gatherQueued(evs []*event) []*event {
	for len(evs) < maxEmit {
		select {
		case b := <-s.emitQ:
			evs = append(evs, b...)
		default:
			return evs
		}
	}
	return evs
}

func (s *Store) emit(evs []*event) {
	if len(evs) == 0 || s.broken() != nil {
		return
	}
	ps := make([]*receipt.Prepared, len(evs))
	for i, e := range evs {
		ps[i] = e.p
	}
	var err error
	for i := 0; i < len(ps) && err == nil; i += emitChunk {
		if i > 0 {
			runtime.Gosched()
		}
		_, err = s.log.AppendBatch(ps[i:min(i+emitChunk, len(ps))])
	}
	if err == nil && s.cfg.sync && time.Since(s.synced) >= chainSyncEvery {
		err = s.log.Sync()
		s.synced = time.Now()
	}
	s.emitMu.Lock()
	if err != nil {
		s.setBroken(chainErr(err))
	} else {
		s.emitted = evs[len(evs)-1].id
	}
	s.emitCnd.Broadcast()
	s.emitMu.Unlock()
}

func chainErr(err error) error {
	return fmt.Errorf("%w: receipt log: %v; the ledger holds the decisions, restart klock to re-emit their receipts once the disk is writable", ErrLedger, err)
}

// setBroken records the first failure that stops the Store from deciding
// anything more. Caller holds s.emitMu.
func (s *Store) setBroken(err error) {
	if s.emitErr == nil {
		s.emitErr = err
	}
}

// syncChain makes every receipt appended so far durable.
func (s *Store) syncChain() error {
	if !s.cfg.sync {
		return nil
	}
	if err := s.log.Sync(); err != nil {
		s.emitMu.Lock()
		s.setBroken(chainErr(err))
		s.emitMu.Unlock()
		return s.broken()
	}
	return nil
}

// broken returns the sticky error: once receipts cannot be written, or the
// ledger could not be synced, nothing more is decided.
func (s *Store) broken() error {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	return s.emitErr
}
