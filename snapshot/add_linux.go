//go:build linux

package snapshot

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/klocklabs/klock/internal/dirsync"
)

// Add records more scopes into the snapshot while its session runs, as
// they are now: a permissive session's amendment (KLIS-6 §3.3) lets the
// agent change a path the pre-flight backup did not cover, and the path
// is added before the amendment is granted, so that a rollback (the
// session's own, or klock rollback later) restores it. Scopes the
// snapshot already covers are skipped; it returns the scopes it added.
//
// The paths are recorded as Take records them (the snapshot's agent uid
// and groups decide what is Fixed), into a snapshot of their own under
// the same root that is then merged into this one: the session's
// manifest.json is replaced atomically (temp, fsync, rename, fsync of the
// directory) and the part removed. A crash between the two leaves the
// part as a session of its own (<session>.add-<n>: listed, and collected
// by GC, like any other); the session's backup is intact either way. Add refuses a snapshot a
// Restore has begun on (its journal exists): what that Restore planned
// would no longer match.
//
// Safe for concurrent use with the snapshot's other methods; Existed and
// ChangedSince see the added scopes once it returns.
func (s *Snapshot) Add(ctx context.Context, scopes ...Scope) ([]Scope, error) {
	m := s.manifest()
	var add []Scope
	for _, sc := range normalize(scopes) {
		if !filepath.IsAbs(sc.Path) || excluded(sc.Path, m.Exclude) || coveredBy(sc, m.Scopes) {
			continue
		}
		add = append(add, sc)
	}
	if len(add) == 0 {
		return nil, nil
	}
	if err := checkScopes(add); err != nil {
		return nil, err
	}
	if ok, err := exists(filepath.Join(s.root, m.Session, journalFile)); err != nil || ok {
		if err == nil {
			err = &Error{Op: "add to", Path: s.Dir(), Kind: ErrInvalid, Hint: "a restore of this snapshot has begun; finish it (klock rollback) before the session records more"}
		}
		return nil, err
	}
	name := m.Session + ".add-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	part, err := Take(ctx, nil, Options{Dir: s.root, Session: name, Scopes: add, Exclude: m.Exclude, Others: m.Others,
		AgentUID: m.AgentUID, AgentGIDs: m.AgentGIDs, Workers: 1})
	if err != nil {
		return nil, err
	}
	partDir := filepath.Join(s.root, name)
	unlock, err := lockDir(s.root)
	if err != nil {
		return nil, pathErr("lock", s.root, err, s.root)
	}
	defer unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	merged := merge(s.m, part.m)
	data, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.root, merged.Session)
	if err := replaceFile(filepath.Join(dir, manifestFile), data); err != nil {
		os.RemoveAll(partDir)
		return nil, pathErr("write manifest", filepath.Join(dir, manifestFile), err, s.root)
	}
	old, _ := readInfo(s.root, merged.Session)
	added, _ := readInfo(s.root, name)
	idata, _ := json.Marshal(infoOf(merged, old.NewBytes+added.NewBytes))
	_ = replaceFile(filepath.Join(dir, infoFile), idata) // List falls back to the manifest
	// The part's objects are the session's now; its directory goes.
	if err := os.RemoveAll(partDir); err == nil {
		_ = dirsync.Sync(s.root)
	}
	s.m = merged
	s.byPath, s.closed, s.links, s.byPathOnce = nil, false, nil, sync.Once{}
	return add, nil
}

// coveredBy reports whether every path of sc is in one of scopes.
func coveredBy(sc Scope, scopes []Scope) bool {
	for _, o := range scopes {
		if o.covers(sc.Path) && (!sc.Tree || o.Tree) {
			return true
		}
	}
	return false
}

// merge is m with part's scopes and entries: m's own entries (anchors and
// scopes, in walk order), then part's (a path m records already is not
// recorded twice), then m's Meta entries (a Meta entry a new scope now
// covers is dropped: the scope records that path whole).
func merge(m, part *Manifest) *Manifest {
	out := *m
	out.Scopes = normalize(append(append([]Scope(nil), m.Scopes...), part.Scopes...))
	recorded := map[string]bool{}
	out.Entries = make([]Entry, 0, len(m.Entries)+len(part.Entries))
	var meta []Entry
	for _, e := range m.Entries {
		if e.Meta {
			meta = append(meta, e)
			continue
		}
		recorded[e.Path] = true
		out.Entries = append(out.Entries, e)
	}
	for _, e := range part.Entries {
		if !recorded[e.Path] && !e.Meta {
			out.Entries = append(out.Entries, e)
		}
	}
	for _, e := range meta {
		if !inScopes(e.Path, part.Scopes) {
			out.Entries = append(out.Entries, e)
		}
	}
	return &out
}

func inScopes(p string, scopes []Scope) bool {
	for _, sc := range scopes {
		if sc.covers(p) {
			return true
		}
	}
	return false
}

// replaceFile writes data to p atomically and durably: a temp beside it,
// fsynced, renamed over p, and the directory fsynced.
func replaceFile(p string, data []byte) error {
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return dirsync.Sync(filepath.Dir(p))
}
