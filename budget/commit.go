package budget

import (
	"context"
	"fmt"
	"runtime"
	"slices"

	"github.com/klocklabs/klock/receipt"
)

// submit runs one decision: through the group-commit queue, or in a
// transaction of its own. It returns once the decision is durable (or
// refused because it could not be made durable).
func (s *Store) submit(ctx context.Context, o *op) result {
	if err := s.broken(); err != nil {
		return result{err: err}
	}
	if s.queue == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-s.done:
			return result{err: fmt.Errorf("%w: the store is closed", ErrLedger)}
		default:
		}
		// Alone: commit, fsync, answer; the same steps as a group.
		if evs, ok := s.runBatch([]*op{o}); ok {
			s.finish(committed{ops: []*op{o}, events: evs})
		}
		return o.res
	}
	o.done = make(chan struct{})
	select {
	case s.queue <- o:
	case <-s.done:
		return result{err: fmt.Errorf("%w: the store is closed", ErrLedger)}
	case <-ctx.Done():
		return result{err: ctx.Err()}
	}
	// Once queued, the decision is made whatever ctx says: waiting for it
	// is the only way to tell the caller what was decided.
	<-o.done
	return o.res
}

// batcher collects queued decisions into transactions: whatever is queued
// when the previous transaction ends goes into the next, up to cfg.group.
// No timer: a lone caller is not made to wait for company.
//
// When the first decision arrives, the batcher yields once before taking
// the rest. The callers just answered are runnable but, on a machine with
// few cores, not yet running: draining at once took the one or two that
// had resubmitted and left the others for a whole further transaction, so
// callers split into cohorts that each paid for their own fsync (measured:
// 6 decisions per transaction with 16 callers, 9.5 with the yield). The
// yield costs a lone caller microseconds, never a timer's wait.
func (s *Store) batcher() {
	defer s.wgBatch.Done()
	batch := make([]*op, 0, s.cfg.group)
	for {
		select {
		case o := <-s.queue:
			batch = append(batch[:0], o)
			runtime.Gosched() // let the callers already runnable queue first
		drain:
			for len(batch) < s.cfg.group {
				select {
				case o := <-s.queue:
					batch = append(batch, o)
				default:
					break drain
				}
			}
			s.mu.Lock()
			evs, ok := s.runBatch(batch)
			s.mu.Unlock()
			if !ok { // nothing was committed: answer now
				for _, o := range batch {
					close(o.done)
				}
				continue
			}
			// The syncer makes the batch durable and answers it while
			// the next batch is decided and committed.
			s.syncQ <- committed{ops: slices.Clone(batch), events: evs}
		case <-s.done:
			for {
				select {
				case o := <-s.queue:
					o.res.err = fmt.Errorf("%w: the store is closed", ErrLedger)
					close(o.done)
				default:
					return
				}
			}
		}
	}
}

// runBatch applies ops in one BEGIN IMMEDIATE transaction and commits it
// (not yet durably: see durable.go), returning its events. Each op sees the
// effects of the ones before it. If the transaction cannot commit, every op
// in it is refused with ErrLedger, memory is left as it was and ok is
// false. Caller holds s.mu.
func (s *Store) runBatch(ops []*op) (events []*event, ok bool) {
	fail := func(what string, err error) {
		e := ledgerErr(s.path, what, err)
		for _, o := range ops {
			o.res = result{err: e}
		}
	}
	if err := s.broken(); err != nil {
		// An earlier fsync failed: what reached the disk is unknown, so
		// nothing more is decided.
		for _, o := range ops {
			o.res = result{err: err}
		}
		return nil, false
	}
	tx, err := s.db.Begin() // _txlock=immediate: BEGIN IMMEDIATE
	if err != nil {
		fail("begin transaction", err)
		return nil, false
	}
	v := &view{s: s, tx: tx, grants: map[Key]*grantState{}, holds: map[string]*holdState{}, nextEv: s.lastEv}
	for _, o := range ops {
		if err := v.apply(o); err != nil {
			tx.Rollback()
			fail("read", err)
			return nil, false
		}
	}
	if err := v.write(); err != nil {
		tx.Rollback()
		fail("write", err)
		return nil, false
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback()
		fail("commit", err)
		return nil, false
	}
	for k, g := range v.grants {
		s.grants[k] = g
	}
	for id, h := range v.holds {
		if h.open {
			s.holds[id] = h
		} else {
			delete(s.holds, id) // closed holds live in the database only
		}
	}
	s.lastEv = v.nextEv
	return v.events, true
}

func (v *view) write() error {
	for _, g := range v.grants {
		if err := saveGrant(v.tx, v.s.stmts, g); err != nil {
			return err
		}
	}
	if len(v.holds) > 0 {
		args := make([]any, 0, len(v.holds)*v.s.stmts.holds.cols)
		for _, h := range v.holds {
			args = holdRow(args, h)
		}
		if err := v.s.stmts.holds.exec(v.tx, args); err != nil {
			return err
		}
	}
	if len(v.events) == 0 {
		return nil
	}
	// Each receipt is canonicalized once, here: its canonical body is the
	// event row and, after commit, what the emitter links and signs. Done
	// before the transaction commits, so the receipt's content is fixed
	// before any caller sees its decision (and can touch the *Receipt).
	args := make([]any, 0, 2*len(v.events))
	for _, e := range v.events {
		p, err := receipt.Prepare(e.r, v.s.log.Key())
		if err != nil {
			return err
		}
		e.p = p
		args = append(args, int64(e.id), p.Body())
	}
	return v.s.stmts.events.exec(v.tx, args)
}
