package snapshot

import (
	"path/filepath"
	"strings"
)

// RestoreOption configures Restore.
type RestoreOption func(*limit)

// Only limits Restore to roots: a Tree root covers its path and everything
// below it, an exact one its path alone (paths are cleaned here). Only
// they are put back, and only new paths among them removed. A recorded
// directory above a root gets its times back (creating or removing an
// entry changed them) and nothing else. Without Only, Restore covers
// every recorded scope; Only() with no roots restores nothing.
//
// A session passes its workdir and the paths the agent was seen to touch:
// a scope such as /tmp/** is shared with every other process on the
// machine, and what they changed there while the session ran is theirs,
// not the agent's, and must not be reverted or removed.
func Only(roots ...Scope) RestoreOption {
	return func(l *limit) {
		l.on = true
		for _, r := range roots {
			l.roots = append(l.roots, Scope{Path: filepath.Clean(r.Path), Tree: r.Tree})
		}
	}
}

// limit is the set of roots Restore is limited to (on), or none.
type limit struct {
	on    bool
	roots []Scope
}

// covers reports whether p is covered by a root (always, when off).
func (l *limit) covers(p string) bool {
	if !l.on {
		return true
	}
	for _, r := range l.roots {
		if r.covers(p) {
			return true
		}
	}
	return false
}

// above reports whether a root lies strictly below directory p.
func (l *limit) above(p string) bool {
	if !l.on {
		return false
	}
	for _, r := range l.roots {
		if r.Path != p && (p == "/" || strings.HasPrefix(r.Path, p+"/")) {
			return true
		}
	}
	return false
}

// withLinkGroups adds, as exact roots, every other name of a hard-link
// group one of whose names the limit covers: restoring one name puts a
// new inode there, and a name of the old inode left out would keep what
// the agent wrote through the covered one.
func (l *limit) withLinkGroups(entries []Entry) {
	if !l.on {
		return
	}
	groups := map[string][]string{} // leader -> members
	for _, e := range entries {
		if e.Link != "" {
			groups[e.Link] = append(groups[e.Link], e.Path)
		}
	}
	var more []Scope
	for leader, members := range groups {
		covered := l.covers(leader)
		for _, m := range members {
			covered = covered || l.covers(m)
		}
		if !covered {
			continue
		}
		for _, p := range append(members, leader) {
			if !l.covers(p) {
				more = append(more, Scope{Path: p})
			}
		}
	}
	l.roots = append(l.roots, more...)
}
