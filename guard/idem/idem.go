package idem

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ErrStore wraps every I/O failure of the store.
var ErrStore = errors.New("idempotency store")

// Entry is one stored result.
type Entry struct {
	Key    string          `json:"key"`
	Tool   string          `json:"tool"`
	Time   time.Time       `json:"time"`
	Result json.RawMessage `json:"result"`
}

// Store maps keys to results. Safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	f     *os.File
	m     map[string]Entry
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// Open opens (creating) the store file at path and loads its entries.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	s := &Store{f: f, m: map[string]Entry{}, locks: map[string]*keyLock{}}
	br := bufio.NewReader(f)
	var good int64
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var e Entry
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				f.Close()
				return nil, fmt.Errorf("%w: %s: corrupt entry at byte %d: %v", ErrStore, path, good, jerr)
			}
			s.m[e.Key] = e
			good += int64(len(line))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: %v", ErrStore, err)
		}
	}
	// Drop a torn last line (a crash mid-append): its call never returned a
	// result to the agent, so it is not a stored result.
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %v", ErrStore, err)
	}
	return s, nil
}

// Lock serialises calls with key; call the returned func to unlock.
func (s *Store) Lock(key string) func() {
	s.mu.Lock()
	l := s.locks[key]
	if l == nil {
		l = &keyLock{}
		s.locks[key] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, key)
		}
		s.mu.Unlock()
	}
}

// Get returns the stored result of key.
func (s *Store) Get(key string) (Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	return e, ok
}

// Put stores result for key durably (fsync) before it returns.
func (s *Store) Put(key, tool string, result json.RawMessage) error {
	e := Entry{Key: key, Tool: tool, Time: time.Now().UTC(), Result: result}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("%w: %v", ErrStore, err)
	}
	s.m[key] = e
	return nil
}

// Len is the number of stored keys.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Close closes the file.
func (s *Store) Close() error { return s.f.Close() }
