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
			l.add(Scope{Path: filepath.Clean(r.Path), Tree: r.Tree})
		}
	}
}

// All makes Restore cover every recorded scope even when it finishes an
// interrupted restore that was limited (which it otherwise stays), and
// remove every new path (SpareOthersNew is dropped, even a resumed one).
// It does not drop the regions Leave gives the same call (another
// session's work is not widened into), only those a resumed restore had.
func All() RestoreOption { return func(l *limit) { l.all = true } }

// SpareOthersNew leaves in place every path new since Take that the
// agent's uid (Options.AgentUID) does not own: an agent without
// capabilities cannot make a file another user owns, so such a file is
// another process's (a scope such as /tmp/** is shared with the whole
// machine), and removing it would destroy what the agent never touched.
// Inside a spared directory each path is judged on its own. A recorded
// file that changed is left too when it is still the recorded inode, owned
// by another user and writable by nobody else: the agent could neither
// write it nor change its metadata. Other recorded paths are put back as
// usual. Without a recorded uid it changes nothing.
func SpareOthersNew() RestoreOption { return func(l *limit) { l.spare = true } }

// ReportUnrecorded makes Restore fail (ErrUnrecorded, in the Report) every
// tree root of Only whose state before the session the backup does not
// hold: outside every recorded scope, and without a Meta entry. A session
// passes the paths its agent was seen to change as tree roots, so each is
// a change a rollback cannot undo, and it must be said, not silently
// kept. Without Only it changes nothing.
func ReportUnrecorded() RestoreOption { return func(l *limit) { l.unrecorded = true } }

// Reclaim names recorded paths, in a region Restore otherwise leaves
// (Leave's, or Options.Others), that this session's agent was seen to
// change or to reach through another name (a rename, a hard link): they
// are its doing, in another holder's region, and Restore brings each back
// anyway: the pre-session inode moved back to its name, its content put
// back when the backup has it, its metadata put back. A reclaimed path
// the backup holds no content of (it was changing while the backup was
// taken) is a failed entry that says so and what was done. Each is
// reported with the region it lay in (ReportEntry.Holder: the region's
// Why, naming the holder). A reclaimed path that is not recorded (a new
// name the agent gave something in the region) is judged as an
// unrecorded path outside any region: a pre-session file found there is
// moved back, a file the session made is removed. With Only, the paths
// are added as exact roots. A resumed restore keeps them.
func Reclaim(paths ...string) RestoreOption {
	return func(l *limit) {
		if l.reclaim == nil {
			l.reclaim = map[string]bool{}
		}
		for _, p := range paths {
			if p = filepath.Clean(p); filepath.IsAbs(p) && !l.reclaim[p] {
				l.reclaim[p] = true
				l.reclaimed = append(l.reclaimed, p)
			}
		}
	}
}

// ReclaimName is Reclaim for paths whose file the agent gave another name
// (a rename into its own scope) but whose content and metadata it was not
// seen to change: the pre-session inode is moved back to its name, and
// once it is there, what it holds is left as found (the holder may have
// changed it since this session began: that is its work). A path whose
// inode cannot be brought back is reclaimed whole, as by Reclaim. A
// resumed restore keeps them.
func ReclaimName(paths ...string) RestoreOption {
	return func(l *limit) {
		Reclaim(paths...)(l)
		if l.nameOnly == nil {
			l.nameOnly = map[string]bool{}
		}
		for _, p := range paths {
			if p = filepath.Clean(p); filepath.IsAbs(p) && !l.nameOnly[p] {
				l.nameOnly[p] = true
				l.namesOnly = append(l.namesOnly, p)
			}
		}
	}
}

// limit is the set of roots Restore is limited to (on), or none. It is
// indexed so that a check costs the depth of the path, not the number of
// roots: a session can touch tens of thousands of paths, and every path
// in the backup's scopes is checked.
type limit struct {
	on    bool
	all   bool // All: no limit, not even a resumed one
	spare bool // SpareOthersNew
	// unrecorded: ReportUnrecorded.
	unrecorded bool
	// leave: Leave's regions.
	leave []Region
	// reclaim: Reclaim's paths (reclaimed: in order, for the journal).
	reclaim   map[string]bool
	reclaimed []string
	// nameOnly: ReclaimName's paths (namesOnly: in order, for the
	// journal), reclaimed for their name alone.
	nameOnly  map[string]bool
	namesOnly []string
	roots     []Scope
	tree      map[string]bool // tree roots
	exact     map[string]bool // exact roots
	anc       map[string]bool // every proper ancestor of a root
}

func (l *limit) add(r Scope) {
	if l.tree == nil {
		l.tree, l.exact, l.anc = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	l.roots = append(l.roots, r)
	if r.Tree {
		l.tree[r.Path] = true
	} else {
		l.exact[r.Path] = true
	}
	for p := r.Path; p != "/"; {
		p = parent(p)
		if l.anc[p] {
			break // and all of its ancestors
		}
		l.anc[p] = true
	}
}

// covers reports whether p (clean, absolute) is covered by a root (always,
// when off).
func (l *limit) covers(p string) bool {
	if !l.on || l.exact[p] || l.tree[p] {
		return true
	}
	for q := p; q != "/"; {
		q = parent(q)
		if l.tree[q] {
			return true
		}
	}
	return false
}

// above reports whether a root lies strictly below directory p.
func (l *limit) above(p string) bool { return l.on && l.anc[p] }

// parent is filepath.Dir for a clean absolute path, without allocating.
func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
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
	for _, r := range more {
		l.add(r)
	}
}
