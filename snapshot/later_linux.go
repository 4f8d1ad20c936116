package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ChangedSince lists the paths in the recorded scopes, recorded or new,
// whose inode changed (ctime) after t, in walk order: after a session's
// end they are someone else's changes (its agent is gone), which a
// restore would undo. With Only roots, only the paths they cover.
// Directories count: adding or removing an entry changes theirs.
//
// A path that is still exactly what a finished restore of a snapshot
// under the same root put there (same inode, same ctime), bringing back
// its state from before t, is not listed: that write was klock's own, and
// changing it again loses nobody's work (rolling back sessions newest
// first). Any other change after t is listed, whoever restored what
// afterwards: a restore that only ran later does not make a user's edit
// klock's.
func (s *Snapshot) ChangedSince(t time.Time, opts ...RestoreOption) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var lim limit
	for _, o := range opts {
		o(&lim)
	}
	lim.leave = append(lim.leave, othersRegions(s.m)...)
	put, err := puts(s.root)
	if err != nil {
		return nil, err
	}
	cut := t.UnixNano()
	var out []string
	s.index()
	err = walkScopes(s.m.Scopes, s.m.Exclude, func(p string, st *unix.Stat_t) (bool, error) {
		if e := s.byPath[p]; e != nil && e.Fixed {
			return !e.Closed, nil // a rollback leaves it, whoever changed it
		}
		if !lim.covers(p) {
			return lim.above(p), nil
		}
		if _, isLeft := lim.left(p); isLeft {
			return true, nil // a restore with these options leaves it
		}
		if st.Ctim.Nano() > cut && !restoredBefore(put[p], keyOf(st), cut) {
			out = append(out, p)
		}
		return true, nil
	})
	if err != nil {
		return out, err
	}
	// Meta entries: the recorded inode's metadata is all Restore touches
	// there.
	for i := range s.m.Entries {
		e := &s.m.Entries[i]
		if _, isLeft := lim.left(e.Path); !e.Meta || !lim.covers(e.Path) || isLeft {
			continue
		}
		st, err := lstat(e.Path)
		if err != nil {
			return out, pathErr("stat", e.Path, err, e.Path)
		}
		if st != nil && st.Dev == e.Dev && st.Ino == e.Ino && st.Ctim.Nano() > cut && !restoredBefore(put[e.Path], keyOf(st), cut) {
			out = append(out, e.Path)
		}
	}
	return out, nil
}

// RestoreState says when a restore of session's snapshot under root last
// finished (zero: none did) and whether one was interrupted (running
// Restore again finishes it). It reads the restore journal alone, not the
// snapshot's manifest.
func RestoreState(root, session string) (finished time.Time, interrupted bool, err error) {
	if err := checkSession(session); err != nil {
		return time.Time{}, false, err
	}
	p := filepath.Join(root, session, journalFile)
	recs, _, err := readJournal(p)
	switch {
	case err != nil:
		return time.Time{}, false, err
	case len(recs) == 0:
		return time.Time{}, false, nil
	case recs[len(recs)-1].Op != "end":
		return time.Time{}, true, nil
	}
	st, err := os.Stat(p)
	if err != nil {
		return time.Time{}, false, err
	}
	return st.ModTime(), false, nil
}

// Existed says whether p (clean, absolute) existed when the snapshot was
// taken: known when a recorded scope covers it (and it is not excluded,
// nor below a directory the agent could not enter, where nothing was
// recorded), existed when it was recorded then. Safe for concurrent use.
func (s *Snapshot) Existed(p string) (known, existed bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sc := range s.m.Scopes {
		if p == sc.Path || sc.Tree && (sc.Path == "/" || strings.HasPrefix(p, sc.Path+"/")) {
			known = true
			break
		}
	}
	if !known || excluded(p, s.m.Exclude) {
		return false, false
	}
	s.index()
	if s.closed {
		for q := p; q != "/"; {
			q = parent(q)
			if e := s.byPath[q]; e != nil && e.Closed {
				return false, false
			}
		}
	}
	e := s.byPath[p]
	return true, e != nil && !e.Anchor
}

// OtherNames are the other recorded names of the inode p named at Take (a
// hard-link group of the backup), nil when p was recorded with one name
// or not at all. A write through p changes every one of them: a session
// judges it against each (a file is its inode, not its name). Names the
// backup's scopes do not cover are not known. Safe for concurrent use.
func (s *Snapshot) OtherNames(p string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.index()
	if len(s.links) == 0 {
		return nil
	}
	leader := p
	if e := s.byPath[p]; e != nil && e.Link != "" {
		leader = e.Link
	}
	var out []string
	for _, q := range s.links[leader] {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

// HiddenNames is how many names the regular file recorded at p had, when
// the backup was taken, beyond those the backup found (a hard link from a
// place outside its scopes): 0 for a file whose every name it knows, or
// that it did not record.
func (s *Snapshot) HiddenNames(p string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.index()
	e := s.byPath[p]
	if e == nil || e.Type != TypeFile || e.Nlink <= 1 {
		return 0
	}
	leader := p
	if e.Link != "" {
		leader = e.Link
	}
	known := max(len(s.links[leader]), 1)
	return max(int(e.Nlink)-known, 0)
}

// index makes byPath (and closed) on first use; the caller holds mu.
func (s *Snapshot) index() {
	s.byPathOnce.Do(func() {
		s.byPath = make(map[string]*Entry, len(s.m.Entries))
		for i := range s.m.Entries {
			e := &s.m.Entries[i]
			s.byPath[e.Path] = e
			s.closed = s.closed || e.Closed
			if e.Link != "" {
				if s.links == nil {
					s.links = map[string][]string{}
				}
				if len(s.links[e.Link]) == 0 {
					s.links[e.Link] = []string{e.Link}
				}
				s.links[e.Link] = append(s.links[e.Link], e.Path)
			}
		}
	})
}
