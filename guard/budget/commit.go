package budget

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"slices"
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
		// Alone: commit, fsync, answer.
		if evs, ok := s.runBatch([]*op{o}); ok {
			s.finish(&committed{ops: []*op{o}, events: evs})
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
			c := s.decideBatch(batch)
			s.mu.Unlock()
			if c == nil { // nothing was decided: answer now
				for _, o := range batch {
					close(o.done)
				}
				continue
			}
			// The syncer makes the batch durable and answers it while
			// the next batch is decided.
			s.syncQ <- c
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

// decideBatch decides ops against memory, each seeing the effects of the
// ones before it, and returns the batch with its journal record, memory
// already changed. If a grant or hold must be read from SQLite and cannot
// be, every op is refused with ErrLedger, memory is left as it was and
// the result is nil. Caller holds s.mu.
func (s *Store) decideBatch(ops []*op) *committed {
	v, ok := s.decide(ops, s.db)
	if !ok {
		return nil
	}
	set, err := v.prepare()
	if err != nil {
		s.refuse(ops, "write", err)
		return nil
	}
	s.jseq++
	c := &committed{ops: slices.Clone(ops), events: v.events, set: set, seq: s.jseq}
	c.rec = appendRecord(getRecBuf(), s.jepoch, c.seq, set)
	// Closed holds stay in memory until the applier has them in SQLite
	// (applier.go): until then SQLite still has them open.
	s.commitView(v, true)
	return c
}

// runBatch applies ops in one BEGIN IMMEDIATE transaction and commits it
// (not yet durably: see finish), returning its events. Each op sees the
// effects of the ones before it. If the transaction cannot commit, every
// op in it is refused with ErrLedger, memory is left as it was and ok is
// false. Caller holds s.mu.
func (s *Store) runBatch(ops []*op) (events []*event, ok bool) {
	tx, err := s.db.Begin() // _txlock=immediate: BEGIN IMMEDIATE
	if err != nil {
		s.refuse(ops, "begin transaction", err)
		return nil, false
	}
	v, ok := s.decide(ops, tx)
	if !ok {
		tx.Rollback()
		return nil, false
	}
	if err := v.write(); err != nil {
		tx.Rollback()
		s.refuse(ops, "write", err)
		return nil, false
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback()
		s.refuse(ops, "commit", err)
		return nil, false
	}
	s.commitView(v, false)
	return v.events, true
}

// refuse answers every op with ErrLedger.
func (s *Store) refuse(ops []*op, what string, err error) {
	e := ledgerErr(s.path, what, err)
	for _, o := range ops {
		o.res = result{err: e}
	}
}

// decide applies ops to a new view reading from q. Caller holds s.mu.
func (s *Store) decide(ops []*op, q querier) (*view, bool) {
	if err := s.broken(); err != nil {
		// An earlier fsync failed: what reached the disk is unknown, so
		// nothing more is decided.
		for _, o := range ops {
			o.res = result{err: err}
		}
		return nil, false
	}
	v := &view{s: s, q: q, grants: map[Key]*grantState{}, holds: map[string]*holdState{}, nextEv: s.lastEv}
	for _, o := range ops {
		if err := v.apply(o); err != nil {
			s.refuse(ops, "read", err)
			return nil, false
		}
	}
	return v, true
}

// commitView makes v's changes the Store's memory. Caller holds s.mu.
func (s *Store) commitView(v *view, keepClosed bool) {
	for k, g := range v.grants {
		s.grants[k] = g
	}
	for id, h := range v.holds {
		if h.open || keepClosed {
			s.holds[id] = h
		} else {
			delete(s.holds, id) // closed holds live in the database only
		}
	}
	s.lastEv = v.nextEv
}

// prepare canonicalizes the view's receipts and returns its changes.
//
// Each receipt is canonicalized once, here: its canonical body is the
// event row and, once durable, what the emitter links and signs. Done
// before the batch is durable, so the receipt's content is fixed before
// any caller sees its decision (and can touch the *Receipt).
func (v *view) prepare() (*applySet, error) {
	set := &applySet{grants: make([]*grantState, 0, len(v.grants)), holds: make([]*holdState, 0, len(v.holds)), events: make([]evRow, 0, len(v.events))}
	for _, g := range v.grants {
		set.grants = append(set.grants, g)
	}
	for _, h := range v.holds {
		set.holds = append(set.holds, h)
	}
	for _, e := range v.events {
		p, err := v.s.log.Prepare(e.r)
		if err != nil {
			return nil, err
		}
		e.p = p
		set.events = append(set.events, evRow{id: e.id, body: p.Body()})
	}
	return set, nil
}

func (v *view) write() error {
	set, err := v.prepare()
	if err != nil {
		return err
	}
	tx := v.q.(*sql.Tx)
	return v.s.writeSets(tx, []*applySet{set})
}
