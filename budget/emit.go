package budget

import "fmt"

// emitter signs committed events into the receipt chain in ledger order.
// It runs apart from the committer so signing one batch overlaps with
// committing the next; the chain is synced once per batch.
func (s *Store) emitter() {
	defer s.wgEmit.Done()
	for {
		select {
		case evs := <-s.emitQ:
			s.emitBatch(evs)
		case <-s.stopEm:
			// The committer has stopped; drain what it committed.
			for {
				select {
				case evs := <-s.emitQ:
					s.emitBatch(evs)
				default:
					return
				}
			}
		}
	}
}

func (s *Store) emitBatch(evs []*event) {
	if s.broken() != nil {
		return
	}
	var err error
	for _, e := range evs {
		// The chain gets its own copy: the caller may still read the
		// receipt it was handed.
		c := *e.r
		if _, err = s.log.Append(&c); err != nil {
			break
		}
	}
	if err == nil && s.cfg.sync {
		err = s.log.Sync()
	}
	s.emitMu.Lock()
	if err != nil {
		s.emitErr = fmt.Errorf("%w: receipt log: %v; the ledger holds the decisions, restart klock to re-emit their receipts once the disk is writable", ErrLedger, err)
	} else {
		s.emitted = evs[len(evs)-1].id
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
