//go:build linux

package snapshot

import (
	"errors"
	"fmt"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/policy"
)

// DefaultMetaLimit bounds the walk of Options.MetaScopes (paths looked at,
// not recorded): BenchmarkMetaWalk measured 4-16 µs a path (a stat, an
// ACL probe; for the agent's own files xattrs and an open for the inode
// flags), so at most about a second before the agent starts. Past it the
// walk stops, the regions it did not finish are listed in
// Manifest.MetaCut, and a change there is reported as unrecorded by a
// Restore with ReportUnrecorded, never silently kept.
const DefaultMetaLimit = 100_000

// errMetaLimit stops the meta walk at Options.MetaLimit.
var errMetaLimit = errors.New("meta walk limit reached")

// MetaScopes are the places outside the kernel wall where an agent running
// as uid is likely to own files: chmod, chown, utimes, xattrs and inode
// flags are not Landlock rights, so the agent can change the metadata of
// every file it owns that it can reach by name, and the tracepoints see it
// only after the effect. A rollback can put such a change back only if
// the file's metadata was recorded before the agent started.
//
// A uid without capabilities can own files only where it could once
// create them or where root gave them to it: the world-writable temporary
// directories (/tmp, /var/tmp, /dev/shm, /run/lock), its runtime directory
// (/run/user/<uid>), its home, the highest directory above the workdir
// that it owns (its checkout's parents), and whatever the manifest
// declares outside the workdir (a CONSUMES scope it can also open, which
// FS_IOC_SETFLAGS needs). Elsewhere (the baseline's /usr, /etc) an
// agent-owned file is a misconfiguration; a change to one there is
// reported as unrecorded, not silently kept (ReportUnrecorded).
func MetaScopes(rs *policy.Ruleset, uid uint32) []Scope {
	cands := []string{"/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/run/user/" + strconv.FormatUint(uint64(uid), 10)}
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil && u.HomeDir != "" {
		cands = append(cands, u.HomeDir)
	}
	return MetaScopesAt(rs, uid, cands)
}

// MetaScopesAt is MetaScopes with the agent's own scratch places given
// (host paths): a container's are its /tmp and the like where its mounts
// show a host directory, not the host's own /tmp, which it cannot reach.
func MetaScopesAt(rs *policy.Ruleset, uid uint32, scratch []string) []Scope {
	cands := append([]string(nil), scratch...)
	if rs != nil {
		if rs.Workdir != "" {
			if top := topOwned(rs.Workdir, uid); top != "" {
				cands = append(cands, top)
			}
		}
		for _, r := range rs.Files {
			if declared(rs, r) {
				cands = append(cands, r.Pattern.Path)
			}
		}
	}
	var out []Scope
	for _, c := range cands {
		// The walk never follows a symlink: /var/lock is /run/lock.
		p, err := filepath.EvalSymlinks(c)
		if err != nil || !filepath.IsAbs(p) || p == "/" {
			continue
		}
		out = append(out, Scope{Path: filepath.Clean(p), Tree: true})
	}
	return normalize(out)
}

// declared says whether a rule comes from the manifest (or a lease), not
// from the baseline alone.
func declared(rs *policy.Ruleset, r policy.PathRule) bool {
	for _, i := range r.Intents {
		if i < len(rs.Intents) && !strings.HasPrefix(rs.Intents[i].Origin, "baseline:") {
			return true
		}
	}
	return false
}

// topOwned is the highest directory above dir that uid owns, with every
// directory between them owned by uid too ("" when its parent is not).
func topOwned(dir string, uid uint32) string {
	top := ""
	for p := filepath.Dir(filepath.Clean(dir)); p != "/"; p = filepath.Dir(p) {
		st, err := lstat(p)
		if err != nil || st == nil || st.Uid != uid || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			break
		}
		top = p
	}
	return top
}

// canMeta says whether the agent could change p's metadata: it owns it
// (chmod, chown to its groups, utimes, every xattr it may set, inode
// flags), or may write a file it does not own (utimes to "now", user.*
// xattrs). A POSIX ACL may grant it writing beyond the mode bits. Another
// user's directory is left out even when writable (/tmp): the agent could
// only move its times to "now", which every other process's entries move
// too, and Restore never puts such times back (see Restore).
func (a *agent) canMeta(p string, st *unix.Stat_t) bool {
	switch {
	case st.Uid == a.uid:
		return true
	case st.Mode&unix.S_IFMT == unix.S_IFLNK, st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return false
	case a.may(st, unix.W_OK):
		return true
	}
	return hasACL(p, st)
}

// inScope says whether p is in one of the scopes, which Take records in
// full; tree: in a tree scope (and so is everything below it).
func inScope(scopes []Scope, p string) (in, tree bool) {
	for _, s := range scopes {
		if s.covers(p) {
			in = true
			if s.Tree {
				return true, true
			}
		}
	}
	return in, false
}

// walkMeta records, metadata only, every path of Options.MetaScopes that
// lies outside the scopes and whose metadata the agent could change,
// going down only where the agent can search. It stops at the limit (the
// regions not finished go to cut) and never fails the backup for a
// region it cannot read (it is cut too): only a cancelled ctx stops it.
func (t *taker) walkMeta() (out []Entry, cut []string, err error) {
	if t.agent == nil || len(t.meta) == 0 {
		return nil, nil, nil
	}
	start := time.Now()
	visited := 0
	for i, root := range t.meta {
		werr := walkScopes([]Scope{root}, t.exclude, func(p string, st *unix.Stat_t) (bool, error) {
			if visited++; visited > t.metaLimit {
				return false, errMetaLimit
			}
			if visited&1023 == 0 {
				if err := t.ctx.Err(); err != nil {
					return false, err
				}
			}
			isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
			in, tree := inScope(t.scopes, p)
			if tree {
				return false, nil // recorded in full by the scopes' walk
			}
			if !in && t.agent.canMeta(p, st) {
				e, err := recordMeta(p, st)
				if err != nil {
					return false, err
				}
				if e.Type != "" {
					out = append(out, e)
				}
			}
			return isDir && t.agent.canEnter(p, st), nil
		})
		switch {
		case werr == nil:
		case errors.Is(werr, errMetaLimit):
			for _, r := range t.meta[i:] {
				cut = append(cut, r.Path)
			}
			t.stats.MetaVisited, t.stats.MetaTime = visited-1, time.Since(start)
			return out, cut, nil
		case t.ctx.Err() != nil:
			return nil, nil, t.ctx.Err()
		default:
			cut = append(cut, root.Path)
		}
	}
	t.stats.MetaVisited, t.stats.MetaTime = visited, time.Since(start)
	return out, cut, nil
}

// recordMeta reads one Meta entry: its stat and xattrs (fillAttrs adds its
// inode flags), no content, no symlink target (Restore never recreates it).
func recordMeta(p string, st *unix.Stat_t) (Entry, error) {
	e := entryOf(p, st)
	e.Meta = true
	x, err := xattrsOf(p, st)
	if err != nil {
		if gone(err) {
			return Entry{}, nil
		}
		return e, pathErr("read xattrs of", p, err, p)
	}
	e.Xattrs = x
	return e, nil
}

// restoreMeta puts back the metadata of every Meta entry the limit covers
// that changed: only on the recorded inode (a file replaced or removed
// since is not the agent's doing: it could not create or remove outside
// the wall), and never another process's change (SpareOthersNew).
func (r *restorer) restoreMeta() {
	for i := range r.m.Entries {
		e := &r.m.Entries[i]
		if !e.Meta || !r.lim.covers(e.Path) {
			continue
		}
		st, err := lstat(e.Path)
		if g, isLeft := r.leftAt(e.Path); isLeft {
			if err == nil && st != nil && st.Dev == e.Dev && st.Ino == e.Ino && tsNano(st.Ctim) != e.Ctime {
				r.leave(e.Path, g)
			}
			continue
		}
		switch {
		case err != nil:
			r.fail(e.Path, Restored, err)
			continue
		case st == nil || st.Dev != e.Dev || st.Ino != e.Ino || typeOf(st.Mode) != e.Type:
			r.set(e.Path, Spared)
			continue
		case tsNano(st.Ctim) == e.Ctime:
			r.set(e.Path, Unchanged)
			continue
		case r.notTheAgents(e, st):
			r.set(e.Path, Spared)
			continue
		}
		changed, err := applyMeta(e.Path, e, st, true)
		switch {
		case err != nil:
			r.fail(e.Path, Restored, err)
		case changed:
			r.set(e.Path, Restored)
		default:
			r.set(e.Path, Unchanged)
		}
	}
}

// ErrUnrecorded: a path the agent changed whose state before the session
// the backup does not hold (ReportUnrecorded).
var ErrUnrecorded = errors.New("no pre-session record")

// reportUnrecorded fails every tree root of the limit the backup holds no
// pre-session state of: outside every scope, with no Meta entry. A
// session passes the paths its agent was seen to change as tree roots, so
// each of these is a change the rollback cannot undo, which the report
// must say rather than keep silently.
func (r *restorer) reportUnrecorded() {
	for _, root := range r.lim.roots {
		if !root.Tree || r.recorded(root.Path) {
			continue
		}
		if g, isLeft := r.leftAt(root.Path); isLeft {
			r.leave(root.Path, g) // another holder's: left, whatever the backup holds
			continue
		}
		why := "it is outside the backup's scopes and no metadata of it was recorded (not a file the agent's uid could change in the places walked at the session's start)"
		for _, c := range r.m.MetaCut {
			if root.Path == c || strings.HasPrefix(root.Path, c+"/") || c == "/" {
				why = fmt.Sprintf("the metadata walk of %s stopped before it (the limit, or an unreadable directory)", c)
				break
			}
		}
		r.fail(root.Path, Restored, fmt.Errorf("%w: %s; its change stays", ErrUnrecorded, why))
	}
}

// recorded says whether the backup holds p's state from before the
// session: p lies in a recorded scope (and is not excluded), or has a
// Meta entry.
func (r *restorer) recorded(p string) bool {
	if i, ok := r.byIdx[p]; ok && r.m.Entries[i].Meta {
		return true
	}
	in, _ := inScope(r.m.Scopes, p)
	return in && !excluded(p, r.m.Exclude)
}
