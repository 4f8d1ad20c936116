package ratestate

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/guard/check"
	"github.com/klocklabs/klock/policy"

	_ "modernc.org/sqlite" // pure Go: klock builds with CGO_ENABLED=0
)

// ErrOpen: the state database could not be opened.
var ErrOpen = errors.New("rate-limit state")

const schema = `
CREATE TABLE IF NOT EXISTS governance (
  tool TEXT PRIMARY KEY, disabled TEXT NOT NULL, limits TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  tool TEXT NOT NULL, run TEXT NOT NULL, calls INTEGER NOT NULL, PRIMARY KEY (tool, run));
CREATE TABLE IF NOT EXISTS buckets (
  tool TEXT NOT NULL, key TEXT NOT NULL, tokens REAL NOT NULL, last_ns INTEGER NOT NULL, PRIMARY KEY (tool, key));
`

// Store is check.State in SQLite.
type Store struct {
	db   *sql.DB
	path string
	// A call's upserts, prepared once: preparing them at every call was
	// a tenth of a proxied tool call's CPU (a profile of the gateway's
	// benchmark), on the path before the dispatch.
	upsertRun, upsertBucket *sql.Stmt
	// wal is the database's write-ahead log, which Sync flushes (nil
	// until the first Sync finds it).
	walMu sync.Mutex
	wal   *os.File
}

// Open opens (creating) the database at path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOpen, path, err)
	}
	q := url.Values{}
	q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	q.Add("_pragma", "journal_mode(WAL)")
	// NORMAL: a commit is written to the log but not flushed (SQLite
	// flushes it at its checkpoints; Sync does at once). A counted call
	// is on disk before it is dispatched through its audit record, which
	// carries its counters and which a restarted gateway merges back
	// (check.State.SaveUse): one flush on a call's path, not two.
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "busy_timeout(100)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOpen, path, err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema + dispatchedSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %w (is another gateway of this agent running?)", ErrOpen, path, err)
	}
	s := &Store{db: db, path: path}
	if s.upsertRun, err = db.Prepare(`INSERT INTO runs (tool, run, calls) VALUES (?, ?, ?)
		ON CONFLICT (tool, run) DO UPDATE SET calls = excluded.calls`); err == nil {
		s.upsertBucket, err = db.Prepare(`INSERT INTO buckets (tool, key, tokens, last_ns) VALUES (?, ?, ?, ?)
			ON CONFLICT (tool, key) DO UPDATE SET tokens = excluded.tokens, last_ns = excluded.last_ns`)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrOpen, path, err)
	}
	return s, nil
}

// Close closes the database (SQLite checkpoints and flushes it).
func (s *Store) Close() error {
	s.walMu.Lock()
	if s.wal != nil {
		s.wal.Close()
		s.wal = nil
	}
	s.walMu.Unlock()
	s.upsertRun.Close()
	s.upsertBucket.Close()
	return s.db.Close()
}

// Sync makes every write so far durable: it flushes the write-ahead log,
// where a commit of this WAL-mode database is (the log SQLite recovers
// from after a crash); a log replaced since it was opened (a new
// connection's) is opened again. No log yet: nothing was written since
// the database file was flushed.
func (s *Store) Sync() error {
	s.walMu.Lock()
	defer s.walMu.Unlock()
	name := s.path + "-wal"
	var cur unix.Stat_t
	if err := unix.Stat(name, &cur); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("ratestate: %s: %w", name, err)
	}
	if s.wal != nil {
		var st unix.Stat_t
		if unix.Fstat(int(s.wal.Fd()), &st) != nil || st.Dev != cur.Dev || st.Ino != cur.Ino {
			s.wal.Close()
			s.wal = nil
		}
	}
	if s.wal == nil {
		f, err := os.OpenFile(name, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("ratestate: %w", err)
		}
		s.wal = f
	}
	// fdatasync, as SQLite syncs its log: the log's size is flushed with
	// its data when it grew, and a log restarted after a checkpoint is
	// written over, with nothing but times to leave out.
	for {
		err := unix.Fdatasync(int(s.wal.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("ratestate: flush %s: %w", name, err)
		}
		return nil
	}
}

// Load reads every tool's state.
func (s *Store) Load() (map[string]check.ToolState, error) {
	out := map[string]check.ToolState{}
	get := func(tool string) check.ToolState {
		t, ok := out[tool]
		if !ok {
			t = check.ToolState{Runs: map[string]int{}, Buckets: map[string]check.BucketState{}}
		}
		return t
	}
	rows, err := s.db.Query(`SELECT tool, disabled, limits FROM governance`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var tool, disabled, limits string
		if err := rows.Scan(&tool, &disabled, &limits); err != nil {
			rows.Close()
			return nil, err
		}
		t := get(tool)
		t.Governance.Disabled = disabled
		if limits != "" {
			var l policy.RateLimits
			if err := json.Unmarshal([]byte(limits), &l); err != nil {
				rows.Close()
				return nil, fmt.Errorf("%s: governance limits of %s: %w", s.path, tool, err)
			}
			t.Governance.Limits = &l
		}
		out[tool] = t
	}
	rows.Close()
	if rows, err = s.db.Query(`SELECT tool, run, calls FROM runs`); err != nil {
		return nil, err
	}
	for rows.Next() {
		var tool, run string
		var calls int
		if err := rows.Scan(&tool, &run, &calls); err != nil {
			rows.Close()
			return nil, err
		}
		t := get(tool)
		t.Runs[run] = calls
		out[tool] = t
	}
	rows.Close()
	if rows, err = s.db.Query(`SELECT tool, key, tokens, last_ns FROM buckets`); err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tool, key string
		var tokens float64
		var last int64
		if err := rows.Scan(&tool, &key, &tokens, &last); err != nil {
			return nil, err
		}
		t := get(tool)
		t.Buckets[key] = check.BucketState{Tokens: tokens, Last: time.Unix(0, last)}
		out[tool] = t
	}
	return out, rows.Err()
}

// SaveUse records one allowed call in one transaction.
func (s *Store) SaveUse(tool string, u check.Use) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Stmt(s.upsertRun).Exec(tool, u.RunID, u.Calls); err != nil {
		return err
	}
	if len(u.Buckets) > 0 {
		bucket := tx.Stmt(s.upsertBucket)
		for k, b := range u.Buckets {
			if _, err := bucket.Exec(tool, k, b.Tokens, b.Last.UnixNano()); err != nil {
				return err
			}
		}
	}
	return tx.Commit()
}

// SaveGovernance records a tool's governance.
func (s *Store) SaveGovernance(tool string, g check.Governance) error {
	limits := ""
	if g.Limits != nil {
		b, err := json.Marshal(g.Limits)
		if err != nil {
			return err
		}
		limits = string(b)
	}
	if _, err := s.db.Exec(`INSERT INTO governance (tool, disabled, limits) VALUES (?, ?, ?)
		ON CONFLICT (tool) DO UPDATE SET disabled = excluded.disabled, limits = excluded.limits`, tool, g.Disabled, limits); err != nil {
		return err
	}
	return s.Sync() // an operator's change is durable when it is answered
}
