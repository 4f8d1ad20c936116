//go:build linux

package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Open loads the snapshot of session under the backups root, for a
// rollback after the session (killed or ended normally).
func Open(root, session string) (*Snapshot, error) {
	if err := checkSession(session); err != nil {
		return nil, err
	}
	root = filepath.Clean(root)
	p := filepath.Join(root, session, manifestFile)
	data, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, missing(root, session, err)
		}
		return nil, pathErr("read", p, err, root)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, &Error{Op: "read", Path: p, Kind: ErrCorrupt, Err: err}
	}
	if m.Version != manifestVersion && m.Version != v2ManifestVersion && m.Version != oldManifestVersion || m.Session != session {
		return nil, &Error{Op: "read", Path: p, Kind: ErrCorrupt, Hint: fmt.Sprintf("manifest version %d for session %q", m.Version, m.Session)}
	}
	if err := checkScopes(m.Scopes); err != nil {
		return nil, &Error{Op: "read", Path: p, Kind: ErrCorrupt, Err: err}
	}
	return &Snapshot{root: root, m: &m}, nil
}

// List returns every complete session snapshot under root, oldest first.
// A missing root is an empty list.
func List(root string) ([]Info, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, pathErr("list", root, err, root)
	}
	var out []Info
	for _, d := range ents {
		name := d.Name()
		if !d.IsDir() || checkSession(name) != nil {
			continue
		}
		in, err := readInfo(root, name)
		if err != nil {
			continue // not a committed session
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].Session < out[j].Session
	})
	return out, nil
}

func readInfo(root, session string) (Info, error) {
	var in Info
	data, err := os.ReadFile(filepath.Join(root, session, infoFile))
	if err == nil {
		err = json.Unmarshal(data, &in)
	}
	if err != nil {
		s, oerr := Open(root, session)
		if oerr != nil {
			return in, oerr
		}
		return s.Info(), nil
	}
	return in, nil
}

// GCReport says what GC did.
type GCReport struct {
	Kept           []string      `json:"kept"`
	Removed        []string      `json:"removed"`
	ObjectsRemoved int           `json:"objects_removed"`
	BytesFreed     int64         `json:"bytes_freed"`
	Duration       time.Duration `json:"duration_ns"`
	// Keep is how many of the newest sessions GC was asked to keep.
	Keep int `json:"keep"`
	// Unrecorded, when set, says why the removed sessions could not be
	// recorded as collected (their rollback then reports them missing).
	Unrecorded string `json:"unrecorded,omitempty"`
}

// Summary is the report for a human: what was removed and kept, and what
// it freed.
func (r GCReport) Summary() string {
	var b strings.Builder
	for _, s := range r.Removed {
		fmt.Fprintf(&b, "removed  %s\n", s)
	}
	if len(r.Removed) == 0 {
		fmt.Fprintf(&b, "nothing to remove: %d session backup(s), --keep %d\n", len(r.Kept), r.Keep)
	} else {
		fmt.Fprintf(&b, "removed %d session backup(s), kept the newest %d", len(r.Removed), len(r.Kept))
		switch n := len(r.Kept); {
		case n == 1:
			fmt.Fprintf(&b, " (%s)", r.Kept[0])
		case n > 1:
			fmt.Fprintf(&b, " (%s … %s)", r.Kept[0], r.Kept[n-1])
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "freed %s in %d unreferenced object(s)\n", human(r.BytesFreed), r.ObjectsRemoved)
	if r.Unrecorded != "" {
		fmt.Fprintf(&b, "warning: the removed sessions are not recorded as collected (%s): their rollback will say only that the backup is missing\n", r.Unrecorded)
	}
	return b.String()
}

// GC keeps the newest keep session snapshots, removes the others, then
// removes every object no remaining session references, the leftovers of
// crashed Takes, and index entries whose object is gone.
func GC(root string, keep int) (GCReport, error) {
	start := time.Now()
	var rep GCReport
	if keep < 0 {
		return rep, fmt.Errorf("%w: keep %d < 0", ErrInvalid, keep)
	}
	root = filepath.Clean(root)
	if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	unlock, err := lockDir(root)
	if err != nil {
		return rep, pathErr("lock", root, err, root)
	}
	defer unlock()
	infos, err := List(root)
	if err != nil {
		return rep, err
	}
	cut := max(0, len(infos)-keep)
	rep.Keep = keep
	var doomed []string
	for _, in := range infos[:cut] {
		doomed = append(doomed, in.Session)
	}
	// Recorded first, so a rollback of a removed session can say why it is
	// gone. Best effort: gc is what frees a full disk, and a record that
	// cannot be written there must not keep it from doing so.
	if err := recordCollected(root, doomed, keep, start); err != nil {
		rep.Unrecorded = err.Error()
	}
	for _, in := range infos[:cut] {
		// Rename first so a crash never leaves a half-removed session that
		// looks whole.
		dir := filepath.Join(root, in.Session)
		trash := filepath.Join(root, ".gc-"+in.Session)
		if err := os.Rename(dir, trash); err != nil {
			return rep, pathErr("remove", dir, err, root)
		}
		if err := os.RemoveAll(trash); err != nil {
			return rep, pathErr("remove", trash, err, root)
		}
		rep.Removed = append(rep.Removed, in.Session)
	}
	live := map[string]bool{}
	for _, in := range infos[cut:] {
		s, err := Open(root, in.Session)
		if err != nil {
			return rep, err
		}
		for _, e := range s.m.Entries {
			if e.Hash != "" {
				live[e.Hash] = true
			}
		}
		rep.Kept = append(rep.Kept, in.Session)
	}
	// Leftovers of crashed Takes and GCs (we hold the lock: none is live).
	ents, _ := os.ReadDir(root)
	for _, d := range ents {
		if n := d.Name(); strings.HasPrefix(n, ".tmp-") || strings.HasPrefix(n, ".gc-") || strings.HasPrefix(n, ".index-") {
			os.RemoveAll(filepath.Join(root, n))
		}
	}
	objs := filepath.Join(root, objectsDir)
	fans, _ := os.ReadDir(objs)
	for _, f := range fans {
		dir := filepath.Join(objs, f.Name())
		files, _ := os.ReadDir(dir)
		left := len(files)
		for _, o := range files {
			if live[f.Name()+o.Name()] {
				continue
			}
			if info, err := o.Info(); err == nil {
				rep.BytesFreed += info.Size()
			}
			if err := os.Remove(filepath.Join(dir, o.Name())); err != nil {
				return rep, pathErr("remove object", filepath.Join(dir, o.Name()), err, root)
			}
			rep.ObjectsRemoved++
			left--
		}
		if left == 0 {
			os.Remove(dir)
		}
	}
	ix := loadIndex(root)
	for p, c := range ix {
		if !live[c.Hash] {
			delete(ix, p)
		}
	}
	if tmp, err := writeIndexTmp(root, ix); err == nil {
		if err := os.Rename(tmp, filepath.Join(root, indexFile)); err != nil {
			os.Remove(tmp)
		}
	}
	if err := syncPath(root); err != nil {
		return rep, pathErr("sync", root, err, root)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}
