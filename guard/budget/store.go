package budget

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/klocklabs/klock/guard/receipt"
	_ "modernc.org/sqlite" // pure-Go SQLite: klock builds with CGO_ENABLED=0
)

// Store is one ledger and its receipt chain. It is safe for concurrent use.
type Store struct {
	cfg   config
	db    *sql.DB
	log   *receipt.Log
	path  string
	stmts *statements

	mu     sync.Mutex // serializes transactions and guards the state below
	grants map[Key]*grantState
	holds  map[string]*holdState
	lastEv uint64 // id of the last committed ledger event

	queue   chan *op        // group commit
	syncQ   chan *committed // decided batches waiting for the journal
	jr      *journalFile    // group commit: the decision journal (journal.go)
	jepoch  uint64          // this Open's journal epoch
	jseq    uint64          // seq of the last decided batch (guarded by mu)
	ap      *applier        // group commit: journal to SQLite
	replays int             // journal records Open put into SQLite (tests)
	wal     *ledgerFile     // the WAL
	dbf     *ledgerFile     // the database file (synced after checkpoints: applier.go)
	// syncMode is the ledger's PRAGMA synchronous.
	syncMode string
	emitQ    chan []*event // committed events waiting for their signed receipt
	emitMu   sync.Mutex
	emitted  uint64    // last event whose receipt is in the chain (maybe not yet synced)
	synced   time.Time // emitter only: when it last synced the chain
	emitErr  error     // sticky: the chain could not be written
	emitCnd  *sync.Cond
	done     chan struct{} // closed by Close: no new decisions
	stopEm   chan struct{} // closed after the committer stopped: emitter drains and ends
	hurryEm  chan struct{} // Flush waits: the emitter stops lingering (emit.go)
	wgBatch  sync.WaitGroup
	wgSync   sync.WaitGroup
	wgEmit   sync.WaitGroup
}

type config struct {
	sync      bool
	group     int // max decisions per transaction; 0 = one transaction per call
	rates     *RateTable
	now       func() time.Time
	agentID   string
	logPrefix string
	policy    string
}

// Option configures Open.
type Option func(*config)

// WithGroupCommit lets up to max concurrent decisions share one
// transaction and one fsync.
func WithGroupCommit(max int) Option { return func(c *config) { c.group = max } }

// WithoutSync turns off fsync in the ledger (synchronous=OFF) and the
// receipt log. Atomicity is unchanged; a power loss may lose acknowledged
// decisions. For tests about atomicity and for throughput comparisons only.
func WithoutSync() Option { return func(c *config) { c.sync = false } }

// WithRates sets the conversion rates for charges in another currency than
// their grant's.
func WithRates(t *RateTable) Option { return func(c *config) { c.rates = t } }

// WithClock sets the time source (tests).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithPolicyHash names the manifest every receipt was decided under (its
// policy_hash) when the request does not: releases and refusals too.
func WithPolicyHash(h string) Option { return func(c *config) { c.policy = h } }

// WithAgent names the agent recorded in every receipt.
func WithAgent(id string) Option { return func(c *config) { c.agentID = id } }

const schema = `
CREATE TABLE IF NOT EXISTS grants (
  capability TEXT NOT NULL, grant_index INTEGER NOT NULL,
  currency TEXT NOT NULL, per_call INTEGER, total INTEGER, max_invocations INTEGER NOT NULL,
  parent_capability TEXT, parent_grant INTEGER, depth INTEGER NOT NULL, root_holder TEXT NOT NULL,
  tool TEXT NOT NULL, server TEXT NOT NULL,
  invocations INTEGER NOT NULL, charged INTEGER NOT NULL,
  PRIMARY KEY (capability, grant_index));
CREATE TABLE IF NOT EXISTS holds (
  id TEXT PRIMARY KEY, capability TEXT NOT NULL, grant_index INTEGER NOT NULL,
  reserved INTEGER NOT NULL, open INTEGER NOT NULL, tool TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, receipt BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS journal (id INTEGER PRIMARY KEY CHECK (id = 0),
  epoch INTEGER NOT NULL, seq INTEGER NOT NULL, off INTEGER NOT NULL);
INSERT OR IGNORE INTO journal VALUES (0, 0, 0, 0);
`

// Open opens (creating) the ledger at dbPath and the receipt chain at
// receiptsPath, signing receipts with priv, and appends to the chain any
// receipt a crash kept from it.
func Open(dbPath, receiptsPath string, priv ed25519.PrivateKey, opts ...Option) (*Store, error) {
	cfg := config{sync: true, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	// NORMAL, not FULL: the Store fsyncs the WAL itself before answering
	// (durable.go), which is what FULL adds to NORMAL, but pipelined.
	syncMode := "NORMAL"
	if !cfg.sync {
		syncMode = "OFF"
	}
	// Exclusive locking before WAL: one owner process, and WAL without a
	// shared-memory file. Pragmas apply to every connection the pool opens.
	q := url.Values{}
	q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+syncMode+")")
	if cfg.group > 0 {
		// The applier checkpoints, paced (applier.go).
		q.Add("_pragma", "wal_autocheckpoint(0)")
	}
	q.Add("_pragma", "busy_timeout(100)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+dbPath+"?"+q.Encode())
	if err != nil {
		return nil, ledgerErr(dbPath, "open", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, ledgerErr(dbPath, "create schema (is another klock process using this ledger?)", err)
	}
	stmts, err := prepareStatements(db)
	if err != nil {
		db.Close()
		return nil, ledgerErr(dbPath, "prepare statements", err)
	}
	// The emitter syncs the chain once per batch (when cfg.sync).
	lg, err := receipt.OpenLog(receiptsPath, priv, receipt.WithoutSync())
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %v; move the damaged chain aside (klock receipts verify says where it breaks) and restart", ErrLedger, err)
	}
	s := &Store{cfg: cfg, db: db, log: lg, path: dbPath, stmts: stmts, wal: &ledgerFile{path: dbPath + "-wal"}, dbf: &ledgerFile{path: dbPath, grows: true}, syncMode: syncMode, grants: map[Key]*grantState{}, holds: map[string]*holdState{},
		emitQ: make(chan []*event, 4096), done: make(chan struct{}), stopEm: make(chan struct{}), hurryEm: make(chan struct{}, 1)}
	s.emitCnd = sync.NewCond(&s.emitMu)
	err = s.replay(dbPath + ".decisions")
	if err == nil {
		err = s.recover()
	}
	if err != nil {
		s.db.Close()
		s.log.Close()
		if s.jr != nil {
			s.jr.f.Close()
		}
		return nil, err
	}
	s.wgEmit.Add(1)
	go s.emitter()
	if cfg.group > 0 {
		s.queue = make(chan *op, cfg.group*4)
		s.syncQ = make(chan *committed, 1024)
		s.ap = newApplier(s.jseq)
		s.wgBatch.Add(1)
		go s.batcher()
		s.wgSync.Add(1)
		go s.syncer()
		s.ap.wg.Add(1)
		go s.applier()
	}
	return s, nil
}

// replay puts into SQLite the journal records it lacks (journal.go) and
// starts a new journal epoch; with group commit it then opens the journal
// for writing. Both are durable before Open returns: a record written in
// the new epoch may overwrite the ones just replayed.
func (s *Store) replay(path string) error {
	data, err := readJournal(path)
	if err != nil {
		return ledgerErr(path, "read", err)
	}
	var epoch, seq uint64
	var off int64
	if err := s.db.QueryRow(`SELECT epoch, seq, off FROM journal`).Scan(&epoch, &seq, &off); err != nil {
		return ledgerErr(s.path, "read the journal position", err)
	}
	recs, err := scanJournal(data, epoch, seq, off)
	if err != nil {
		return fmt.Errorf("%w: the decision journal %s: %v; a record whose checksum holds does not decode: keep the file for inspection and restore the ledger from a backup", ErrLedger, path, err)
	}
	if data == nil && s.cfg.group == 0 {
		return nil // never journaled, and will not be
	}
	sets := make([]*applySet, len(recs))
	for i, r := range recs {
		sets[i], seq = r.set, r.seq
	}
	err = s.inTx(func(tx *sql.Tx) error {
		if err := s.writeSets(tx, sets); err != nil {
			return err
		}
		_, err := tx.Exec(`UPDATE journal SET epoch = ?, seq = ?, off = 0`, i64(epoch+1), i64(seq))
		return err
	})
	if err == nil {
		err = s.syncLedger(false)
	}
	if err != nil {
		return ledgerErr(s.path, "replay the decision journal into", err)
	}
	s.jepoch, s.jseq, s.replays = epoch+1, seq, len(recs)
	if s.cfg.group > 0 {
		if s.jr, err = openJournal(path); err != nil {
			return ledgerErr(path, "open", err)
		}
	}
	return nil
}

// recover loads the last event id and re-emits receipts the chain lacks.
func (s *Store) recover() error {
	if err := s.db.QueryRow(`SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&s.lastEv); err != nil {
		return ledgerErr(s.path, "read events", err)
	}
	var from uint64
	if last := s.log.Last(); last != nil {
		from = last.LedgerEvent
	}
	if from > s.lastEv {
		return fmt.Errorf("%w: the receipt chain records ledger event %d but the ledger %s ends at %d: they are not a pair; restore the matching ledger or move the chain aside",
			ErrLedger, from, s.path, s.lastEv)
	}
	if err := s.reemit(from); err != nil {
		return err
	}
	if err := s.log.Sync(); err != nil {
		return fmt.Errorf("%w: sync receipt log: %v", ErrLedger, err)
	}
	s.emitted = s.lastEv
	return nil
}

// reemit appends the receipts of the events after from, signed in batches
// as the emitter signs them (so their links are the lost ones').
func (s *Store) reemit(from uint64) error {
	rows, err := s.db.Query(`SELECT id, receipt FROM events WHERE id > ? ORDER BY id`, from)
	if err != nil {
		return ledgerErr(s.path, "read events", err)
	}
	defer rows.Close()
	var ps []*receipt.Prepared
	var id uint64
	flush := func() error {
		if len(ps) == 0 {
			return nil
		}
		if _, err := s.log.AppendBatch(ps); err != nil {
			return fmt.Errorf("%w: re-emit receipts up to event %d: %v", ErrLedger, id, err)
		}
		ps = ps[:0]
		return nil
	}
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return ledgerErr(s.path, "read events", err)
		}
		var r receipt.Receipt
		if err := json.Unmarshal(body, &r); err != nil {
			return ledgerErr(s.path, fmt.Sprintf("decode event %d", id), err)
		}
		p, err := s.log.Prepare(&r)
		if err != nil {
			return fmt.Errorf("%w: re-emit receipt for event %d: %v", ErrLedger, id, err)
		}
		if ps = append(ps, p); len(ps) == emitChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return ledgerErr(s.path, "read events", err)
	}
	return flush()
}

// Close waits for queued decisions and receipts, then closes the ledger.
func (s *Store) Close() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	close(s.done)
	s.wgBatch.Wait()
	if s.syncQ != nil {
		close(s.syncQ) // the batcher has stopped: the syncer drains and ends
		s.wgSync.Wait()
		close(s.ap.stop) // the applier applies what is left and ends
		s.ap.wg.Wait()
	}
	s.mu.Lock() // no per-call transaction is still running
	close(s.stopEm)
	s.mu.Unlock()
	s.wgEmit.Wait()
	err1 := s.syncChain()
	if err := s.log.Close(); err1 == nil {
		err1 = err
	}
	err2 := s.db.Close()
	s.wal.close()
	s.dbf.close()
	if s.jr != nil {
		if err := s.jr.f.Close(); err2 == nil {
			err2 = err
		}
	}
	if err1 != nil {
		return err1
	}
	return err2
}

// Flush waits until every committed decision's receipt is in the chain
// and on stable storage.
func (s *Store) Flush(ctx context.Context) error {
	s.mu.Lock()
	target := s.lastEv
	s.mu.Unlock()
	s.emitMu.Lock()
	for s.emitted < target && s.emitErr == nil {
		select {
		case s.hurryEm <- struct{}{}:
		default:
		}
		if ctx.Err() != nil {
			s.emitMu.Unlock()
			return ctx.Err()
		}
		s.emitCnd.Wait()
	}
	err := s.emitErr
	s.emitMu.Unlock()
	if err != nil {
		return err
	}
	return s.syncChain()
}

func ledgerErr(path, what string, err error) error {
	return fmt.Errorf("%w: %s %s: %v (check the disk has space and the file is writable; only one process may own a ledger)", ErrLedger, what, path, err)
}
