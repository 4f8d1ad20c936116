//go:build linux

package snapshot

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// restoredFile is <root>/<session>/restored: what the restores of the
// session's snapshot left, one putRec per JSON line, appended by every
// restore (a second restore of the same snapshot adds to it; the journal
// is rewritten each time and could not hold it).
//
// It is what lets a later rollback tell klock's own writes from someone
// else's: a path that changed after a session ended is news (a user's
// work, which a rollback must not undo) unless it is still exactly what a
// restore put there. A time cannot tell them apart: a restore that ran
// after the user's edit would hide the edit (a lost edit:
// TestRollbackAfterAnotherSessionsRestoreKeepsLaterWork in cmd/klock).
const restoredFile = "restored"

// fileKey identifies one state of a path: the same inode with the same
// ctime has not been touched since (ctime cannot be set from user space).
type fileKey struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Ctime int64  `json:"ctime"`
}

func keyOf(st *unix.Stat_t) fileKey {
	return fileKey{Dev: st.Dev, Ino: st.Ino, Ctime: tsNano(st.Ctim)}
}

func entryKey(e *Entry) fileKey { return fileKey{Dev: e.Dev, Ino: e.Ino, Ctime: e.Ctime} }

// putRec says that a restore left Path as Now, bringing back the recorded
// state From (the path when the session started, as its entry records it).
type putRec struct {
	Path string  `json:"path"`
	Now  fileKey `json:"now"`
	From fileKey `json:"from"`
}

// recordPuts appends what this restore left: every recorded path it
// restored or recreated, and every recorded directory whose entries it
// changed (a temp renamed in or a path removed changes the directory's
// ctime). It is durable before the journal's "end".
func (r *restorer) recordPuts() error {
	touched := map[string]bool{}
	for _, p := range r.order {
		a := r.act[p]
		if a.Error != "" {
			continue
		}
		switch a.Action {
		case Restored, Recreated, MovedBack:
			touched[p] = true
			if i, ok := r.byIdx[p]; ok && r.m.Entries[i].Meta {
				break // its metadata, in place: its directory is as it was
			}
			touched[filepath.Dir(p)] = true
		case Removed:
			touched[filepath.Dir(p)] = true
		}
	}
	var buf []byte
	for p := range touched {
		i, ok := r.byIdx[p]
		if !ok {
			continue
		}
		st, err := lstat(p)
		if err != nil || st == nil {
			continue
		}
		b, _ := json.Marshal(putRec{Path: p, Now: keyOf(st), From: entryKey(&r.m.Entries[i])})
		buf = append(append(buf, b...), '\n')
	}
	if len(buf) == 0 {
		return nil
	}
	p := filepath.Join(filepath.Join(r.s.root, r.m.Session), restoredFile)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return pathErr("write", p, err, r.s.root)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return pathErr("write", p, err, r.s.root)
	}
	return nil
}

// puts reads what every restore of every snapshot under root left, by path.
// A torn last line (a restore killed while appending) is not a record.
func puts(root string) (map[string][]putRec, error) {
	ents, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, pathErr("list", root, err, root)
	}
	out := map[string][]putRec{}
	for _, d := range ents {
		if !d.IsDir() || checkSession(d.Name()) != nil {
			continue
		}
		f, err := os.Open(filepath.Join(root, d.Name(), restoredFile))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec putRec
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				out[rec.Path] = append(out[rec.Path], rec)
			}
		}
		f.Close()
	}
	return out, nil
}

// restoredBefore says whether the path p, now in state now, is exactly
// what a restore left, bringing back a state from before cut (ns): then
// it is klock's own doing, and no one's work is lost by changing it. A
// restore that brought back a state itself left by an earlier restore is
// followed (rolling back sessions newest first, then a session that ran
// in between and was killed).
func restoredBefore(recs []putRec, now fileKey, cut int64) bool {
	k := now
	for range len(recs) + 1 {
		found := false
		for _, r := range recs {
			if r.Now == k {
				k, found = r.From, true
				break
			}
		}
		if !found {
			return false
		}
		if k.Ctime <= cut {
			return true
		}
	}
	return false
}
