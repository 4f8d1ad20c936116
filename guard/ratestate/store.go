package ratestate

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

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
}

var _ check.State = (*Store)(nil)

// Open opens (creating) the database at path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOpen, path, err)
	}
	q := url.Values{}
	q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	q.Add("_pragma", "journal_mode(WAL)")
	// FULL: a counted call is on disk before it is dispatched.
	q.Add("_pragma", "synchronous(FULL)")
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
	return &Store{db: db, path: path}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

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
	if _, err := tx.Exec(`INSERT INTO runs (tool, run, calls) VALUES (?, ?, ?)
		ON CONFLICT (tool, run) DO UPDATE SET calls = excluded.calls`, tool, u.RunID, u.Calls); err != nil {
		return err
	}
	for k, b := range u.Buckets {
		if _, err := tx.Exec(`INSERT INTO buckets (tool, key, tokens, last_ns) VALUES (?, ?, ?, ?)
			ON CONFLICT (tool, key) DO UPDATE SET tokens = excluded.tokens, last_ns = excluded.last_ns`, tool, k, b.Tokens, b.Last.UnixNano()); err != nil {
			return err
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
	_, err := s.db.Exec(`INSERT INTO governance (tool, disabled, limits) VALUES (?, ?, ?)
		ON CONFLICT (tool) DO UPDATE SET disabled = excluded.disabled, limits = excluded.limits`, tool, g.Disabled, limits)
	return err
}
