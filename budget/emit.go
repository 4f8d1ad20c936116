package budget

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/klocklabs/klock/receipt"
)

// Committed events become signed receipts in two stages, so that the chain
// is not held back by work that does not depend on it: the preparer
// canonicalizes a batch's receipts in parallel (receipt.Prepare), and the
// signer links, signs and appends them one by one in ledger order, syncing
// the chain once per batch. Batch N+1 is prepared while batch N is signed.

type preparedBatch struct {
	evs []*event
	ps  []*receipt.Prepared
	err error
}

func (s *Store) emitter() {
	defer s.wgEmit.Done()
	signQ := make(chan preparedBatch, 64)
	var signer sync.WaitGroup
	signer.Add(1)
	go func() {
		defer signer.Done()
		for b := range signQ {
			s.signBatch(b)
		}
	}()
	defer func() {
		close(signQ)
		signer.Wait()
	}()
	for {
		select {
		case evs := <-s.emitQ:
			signQ <- s.prepare(evs)
		case <-s.stopEm:
			// The committer has stopped; drain what it committed.
			for {
				select {
				case evs := <-s.emitQ:
					signQ <- s.prepare(evs)
				default:
					return
				}
			}
		}
	}
}

func (s *Store) prepare(evs []*event) preparedBatch {
	b := preparedBatch{evs: evs, ps: make([]*receipt.Prepared, len(evs))}
	workers := min(runtime.GOMAXPROCS(0), (len(evs)+15)/16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(evs); i += max(workers, 1) {
				p, err := receipt.Prepare(evs[i].r, s.log.Key())
				if err != nil {
					mu.Lock()
					b.err = err
					mu.Unlock()
					return
				}
				b.ps[i] = p
			}
		}(w)
	}
	wg.Wait()
	return b
}

func (s *Store) signBatch(b preparedBatch) {
	if s.broken() != nil {
		return
	}
	err := b.err
	for i := 0; err == nil && i < len(b.ps); i++ {
		_, err = s.log.AppendPrepared(b.ps[i])
	}
	if err == nil && s.cfg.sync {
		err = s.log.Sync()
	}
	s.emitMu.Lock()
	if err != nil {
		s.emitErr = fmt.Errorf("%w: receipt log: %v; the ledger holds the decisions, restart klock to re-emit their receipts once the disk is writable", ErrLedger, err)
	} else {
		s.emitted = b.evs[len(b.evs)-1].id
	}
	s.emitCnd.Broadcast()
	s.emitMu.Unlock()
}

// broken returns the sticky receipt-log error: once receipts cannot be
// written, nothing more is decided.
func (s *Store) broken() error {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	return s.emitErr
}
