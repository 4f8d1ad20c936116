package budget

import (
	"fmt"

	"github.com/klocklabs/klock/receipt"
)

// Committed events become signed receipts in ledger order on one emitter
// goroutine. Their canonical bodies were made at commit (view.write); the
// emitter takes every committed batch waiting for it, links and signs their
// receipts, and appends them with one write and one fsync. When the
// emitter falls behind, its rounds grow, so its fixed costs shrink per
// receipt instead of piling up.

// maxEmit bounds one emitter round (receipts), so a long backlog is still
// made durable, and Flush answered, in steps.
const maxEmit = 4096

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
	more:
		for len(evs) < maxEmit {
			select {
			case b := <-s.emitQ:
				evs = append(evs, b...)
			default:
				break more
			}
		}
		s.emit(evs)
	}
}

func (s *Store) emit(evs []*event) {
	if len(evs) == 0 || s.broken() != nil {
		return
	}
	ps := make([]*receipt.Prepared, len(evs))
	for i, e := range evs {
		ps[i] = e.p
	}
	_, err := s.log.AppendBatch(ps)
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
