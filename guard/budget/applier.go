package budget

import (
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// The applier moves journaled batches into SQLite after they are durable
// and answered: every applyEvery (sooner when someone waits: Usage, the
// syncer short of ring space, Close), one transaction takes every batch
// waiting, and the WAL is then fsynced, after which the ring space those
// batches took may be reused. A transaction per batch cost about 300 us of
// CPU for ten decisions, on the path callers waited on; one per applyEvery
// holds hundreds and nobody waits on it.
//
// If SQLite cannot be written the store is broken (nothing more is
// decided); the batches stay in the journal, which Open replays.

// applyEvery: 20 ms rather than 5 (A/B, same binary otherwise, alternated
// on the shared 2-core VM, 6 runs each: 14.2-19.5k decisions/s at 89-105
// us of CPU each, against 8.5-16.8k at 99-145 us). A round then holds a
// few hundred decisions; at 20,000/s they take some 400 KiB of the ring,
// and Usage and a short ring hurry the applier anyway.
const applyEvery = 20 * time.Millisecond

type applier struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when applied moves or the applier fails
	queue   []*committed
	applied uint64 // last seq committed to SQLite and synced
	err     error  // SQLite could not be written
	kick    chan struct{}
	stop    chan struct{}
	durable chan uint64 // to the syncer: last seq durable in SQLite
	synced  uint64      // applier only: the last seq sent on durable
	// unchecked and rounds count the decisions applied and the rounds
	// since the last checkpoint (applier only).
	unchecked, rounds int
	wg                sync.WaitGroup
}

func newApplier(seq uint64) *applier {
	a := &applier{applied: seq, kick: make(chan struct{}, 1), stop: make(chan struct{}), durable: make(chan uint64, 1)}
	a.cond = sync.NewCond(&a.mu)
	return a
}

// push hands a durable, answered batch to the applier (syncer).
func (a *applier) push(c *committed) {
	a.mu.Lock()
	a.queue = append(a.queue, c)
	a.mu.Unlock()
}

// hurry makes the applier run now instead of at its next tick.
func (a *applier) hurry() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// waitApplied returns once every batch up to seq is durable in SQLite, or
// the applier has failed. The batches must already be on their way (committed).
func (s *Store) waitApplied(seq uint64) error {
	a := s.ap
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.applied < seq && a.err == nil {
		if err := s.broken(); err != nil {
			return err
		}
		a.hurry()
		a.cond.Wait()
	}
	return a.err
}

func (s *Store) applier() {
	a := s.ap
	defer a.wg.Done()
	t := time.NewTicker(applyEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-a.kick:
		case <-a.stop:
			s.applyRound()
			return
		}
		s.applyRound()
	}
}

// applyRound writes every waiting batch in one transaction, then makes it
// durable and tells the syncer.
func (s *Store) applyRound() {
	a := s.ap
	a.mu.Lock()
	batch := a.queue
	a.queue = nil
	failed := a.err
	a.mu.Unlock()
	if len(batch) == 0 || failed != nil {
		if failed == nil {
			// Wake waiters whose batches were answered with an error
			// and so never came here.
			a.mu.Lock()
			a.cond.Broadcast()
			a.mu.Unlock()
		}
		return
	}
	sets := make([]*applySet, len(batch))
	for i, c := range batch {
		sets[i] = c.set
	}
	last := batch[len(batch)-1]
	err := s.inTx(func(tx *sql.Tx) error {
		if err := s.writeSets(tx, sets); err != nil {
			return err
		}
		_, err := tx.Stmt(s.stmts.journalPos).Exec(i64(last.seq), last.end)
		return err
	})
	if err == nil {
		// Closed holds stayed in memory until now so that a read from
		// SQLite could not see them open; SQLite has them closed now.
		s.mu.Lock()
		for _, set := range sets {
			for _, h := range set.holds {
				if cur, ok := s.holds[h.id]; ok && !cur.open {
					delete(s.holds, h.id)
				}
			}
		}
		s.mu.Unlock()
		err = s.syncLedger(true)
	}
	if err == nil {
		a.mu.Lock()
		a.applied = last.seq
		a.cond.Broadcast()
		a.mu.Unlock()
	}
	if err != nil {
		s.applyFailed(err)
		return
	}
	a.tell(last.seq)
	for _, set := range sets {
		a.unchecked += len(set.events)
	}
	if a.rounds++; a.unchecked >= checkpointEvery || a.rounds >= checkpointRounds {
		if err := s.checkpoint(); err != nil {
			s.applyFailed(err)
			return
		}
		a.unchecked, a.rounds = 0, 0
	}
}

// applyFailed stops the Store: SQLite could not be written or synced.
func (s *Store) applyFailed(err error) {
	a := s.ap
	s.emitMu.Lock()
	s.setBroken(ledgerErr(s.path, "apply the journal to", err))
	s.emitMu.Unlock()
	a.mu.Lock()
	a.err = s.broken()
	a.cond.Broadcast()
	a.mu.Unlock()
	a.tell(a.synced) // a syncer waiting for ring space must see the failure
}

// With group commit the applier checkpoints the WAL into the database
// itself (Open turns SQLite's automatic checkpoints off), every
// checkpointEvery decisions, right after the WAL sync that made them
// durable. SQLite's own checkpoint (synchronous=NORMAL) ends with an
// fsync of the database that hands the disk some MiB at once, and the
// journal's fdatasyncs, issued meanwhile for decisions callers wait on,
// waited behind it. So the checkpoint runs with synchronous=OFF and the
// applier then writes the database out a piece at a time and fdatasyncs
// it (package writeout), before anything else is written to SQLite.
//
// That is as safe as SQLite's own: the checkpoint copies frames of a WAL
// already synced (applyRound), and SQLite reuses the WAL from its start,
// overwriting those frames, only at the next write transaction, which
// only the applier makes and only after the database is synced; until
// then a crash leaves the frames in the WAL, and SQLite's recovery copies
// them again. If the sync fails the Store is broken and nothing more is
// written.
//
// checkpointEvery decisions are some 500 KiB of WAL: small pieces for the
// disk, and a WAL that stays small enough to be rewritten in place
// instead of growing. When decisions come slowly each round still
// rewrites a few pages (the grant, the tables' last leaves), so a
// checkpoint also comes every checkpointRounds rounds, so that slow
// decisions do not grow the WAL further than fast ones.
const (
	checkpointEvery  = 512
	checkpointRounds = 64
)

// checkpoint copies the WAL into the database and makes it durable.
func (s *Store) checkpoint() error {
	if _, err := s.db.Exec(`PRAGMA synchronous=OFF`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var busy, frames, copied int
	err := s.db.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	if _, e := s.db.Exec(`PRAGMA synchronous=` + s.syncMode); err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if !s.cfg.sync {
		return nil
	}
	return s.dbf.sync(true)
}

// tell sends the syncer the last seq durable in SQLite, replacing a value
// it has not read yet.
func (a *applier) tell(seq uint64) {
	a.synced = seq
	select {
	case <-a.durable:
	default:
	}
	a.durable <- seq
}

// inTx runs f in one BEGIN IMMEDIATE transaction and commits it.
func (s *Store) inTx(f func(*sql.Tx) error) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback()
		return err
	}
	return nil
}

// writeSets writes batches' changes in order: a grant or hold changed by
// several is written once, as the last left it (a multi-row upsert may not
// touch a row twice).
func (s *Store) writeSets(tx *sql.Tx, sets []*applySet) error {
	grants := map[Key]*grantState{}
	var gorder []Key
	holds := map[string]*holdState{}
	var horder []string
	nev := 0
	for _, set := range sets {
		for _, g := range set.grants {
			if _, ok := grants[g.key]; !ok {
				gorder = append(gorder, g.key)
			}
			grants[g.key] = g
		}
		for _, h := range set.holds {
			if _, ok := holds[h.id]; !ok {
				horder = append(horder, h.id)
			}
			holds[h.id] = h
		}
		nev += len(set.events)
	}
	for _, k := range gorder {
		if err := saveGrant(tx, s.stmts, grants[k]); err != nil {
			return err
		}
	}
	if len(horder) > 0 {
		args := make([]any, 0, len(horder)*s.stmts.holds.cols)
		for _, id := range horder {
			args = holdRow(args, holds[id])
		}
		if err := s.stmts.holds.exec(tx, args); err != nil {
			return err
		}
	}
	if nev == 0 {
		return nil
	}
	args := make([]any, 0, 2*nev)
	for _, set := range sets {
		for _, e := range set.events {
			args = append(args, int64(e.id), e.body)
		}
	}
	return s.stmts.events.exec(tx, args)
}
