package decide

import (
	"fmt"
	"path"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// The run's own files. A learning run names files whose names the next run
// will not repeat: git's .git/objects/<hash>, npm's
// _logs/<timestamp>-debug-0.log, go test's /tmp/go-build<N>/b001/<pkg>.test,
// sed -i's sedXXXXXX. What they share is that the run made them (a PROVIDES
// that took effect): a name the run brought into existence was chosen by
// the run, and an exact intent on it pins this run's choice. Declared
// exactly, it also grants nothing on a file wall, whose rules attach to
// paths that exist when the session starts. So what the run needed on its
// own files is declared on the nearest directory that existed before it
// (ownScopes), the way a file wall can enforce it.

// ownFiles are the paths the run made: a FILE PROVIDES that took effect at
// least once (created, linked, a rename that could not replace), whether
// or not the file is still there. Each directory the run made something
// in is also there as "dir/" (a key no clean path has), so that finding
// whether the run filled a directory costs one look-up. Call with e.mu
// held.
func (e *Engine) ownFiles() map[string]bool {
	own := map[string]bool{}
	for t, o := range e.obs {
		// An O_TMPFILE open's PROVIDES names the directory the unnamed
		// file went in: not a file the run made.
		if t.Type == policy.ObjFile && t.Predicate == policy.Provides && o.Count > o.Failed && !o.Tmpfile && absClean(t.Path) {
			own[t.Path] = true
		}
	}
	for p := range own {
		if strings.HasSuffix(p, "/") {
			continue
		}
		for d := parentDir(p); d != "/" && !own[d+"/"]; d = parentDir(d) {
			own[d+"/"] = true
		}
	}
	return own
}

// ownArea says whether the run's own files in dir may be declared on dir
// (dir/*, dir/**): the workdir, /tmp and /var/tmp, and inside a home
// directory (a tool's cache or state: ~/.npm/_logs, ~/.cache/go-build), never
// a home directory itself nor /proc, /sys, /dev, /run.
func ownArea(dir, workdir string) bool {
	if scratchArea(dir, workdir) {
		return true
	}
	for _, n := range neverCollapse {
		if dir == n || strings.HasPrefix(dir, n+"/") {
			return false
		}
	}
	if rest, ok := strings.CutPrefix(dir, "/root/"); ok && rest != "" {
		return true
	}
	if rest, ok := strings.CutPrefix(dir, "/home/"); ok {
		user, below, _ := strings.Cut(rest, "/")
		return user != "" && below != ""
	}
	return false
}

// homeDir: dir is a home directory itself (/root, /home/<user>).
func homeDir(dir string) bool {
	if dir == "/root" {
		return true
	}
	user, ok := strings.CutPrefix(dir, "/home/")
	return ok && user != "" && !strings.Contains(user, "/")
}

// ownPattern is where a learned intent on the run's own file p is declared:
// the directory the run found in place (the parent of the outermost
// directory it made above p: everything in a directory the run made is
// the run's), its children (dir/*) when the run made p directly in it and
// nothing inside p, its subtree (dir/**) when the run made a directory
// there and filled it. top is that outermost thing the run made. ok is
// false when that directory is not an ownArea (top is still set); when it is a home directory
// and top a directory the run made there, the pattern is top's own subtree.
func ownPattern(p string, own map[string]bool, workdir string) (pat policy.PathPattern, top string, ok bool) {
	top = p
	for d := parentDir(p); d != "/" && d != workdir; d = parentDir(d) {
		if own[d] {
			top = d
		}
	}
	dir := parentDir(top)
	if !ownArea(dir, workdir) {
		// A directory the run made directly in a home directory (go's
		// ~/.cache, ~/.config and ~/go, pip's ~/.cache/pip on a fresh
		// account): its name is the tool's, not the run's, and the next
		// run finds it there; what the run put inside it is the run's.
		// Declared on that directory's subtree, never on the home
		// directory's (~/.ssh is there too).
		if homeDir(dir) && (top != p || own[p+"/"]) {
			return policy.PathPattern{Path: top, Match: policy.MatchSubtree}, top, true
		}
		return policy.PathPattern{}, top, false
	}
	if top == p && !own[p+"/"] {
		return policy.PathPattern{Path: dir, Match: policy.MatchChildren}, top, true
	}
	return policy.PathPattern{Path: dir, Match: policy.MatchSubtree}, top, true
}

// ownScopes declares what the run needed on its own files (and on the
// existing files it changed among them) on the patterns of ownPattern,
// where need has no wider scope for them already (madeIn):
//   - a file the run made directly in a directory → dir/*; made, then
//     renamed away or removed (gone) says "a temporary file";
//   - anything inside a directory the run made → the subtree of the
//     directory that was there (git init's repo, go build's $WORK);
//   - own files in a hash fan-out (two or more sibling directories named
//     by hash prefixes: .git/objects/ab, ~/.cache/go-build/cd) → the
//     fan-out's subtree: the next run's hashes pick other directories;
//   - MUTATES of an existing file in a fan-out, or of an existing file's
//     times in a directory where the run made files (git refreshing the
//     time of an object it already has, a cache marking an entry used: the
//     next run uses others) → that pattern. A write to an existing file
//     beside the run's own (a config file next to its output), or a file
//     replaced by a rename (sed -i's target, an editor's save), keeps its
//     exact name: that is the file the run meant;
//   - a program the run made and executed (a build's output, go test's
//     <pkg>.test) → PROVIDES PROC on the same pattern.
func ownScopes(need []learnObs, own, gone map[string]bool, workdir string) {
	set := ownPatterns(own, workdir)
	for i := range need {
		o := &need[i]
		if (o.t.Type != policy.ObjFile && o.t.Type != policy.ObjProc) || (o.scope.Path != "" && o.scope.Match != policy.MatchExact) {
			continue
		}
		p := o.t.Path
		if own[p] {
			pat, top, ok := ownPattern(p, own, workdir)
			if !ok {
				if g := set.fanOf(p); g != "" {
					o.scope = policy.PathPattern{Path: g, Match: policy.MatchSubtree}
					o.note = ownNote(o.t, top, o.scope, gone[p], true)
				}
				continue
			}
			fan := pat.Match == policy.MatchChildren && set.fan[parentDir(pat.Path)]
			if fan {
				pat = policy.PathPattern{Path: parentDir(pat.Path), Match: policy.MatchSubtree}
			}
			o.scope, o.note = pat, ownNote(o.t, top, pat, gone[p], fan)
			continue
		}
		if o.t.Type != policy.ObjFile || o.t.Predicate != policy.Mutates || renameSyscall(o.syscall) {
			continue
		}
		d := parentDir(p)
		switch {
		case set.fan[parentDir(d)]:
			o.scope = policy.PathPattern{Path: parentDir(d), Match: policy.MatchSubtree}
		case set.fan[d]:
			o.scope = policy.PathPattern{Path: d, Match: policy.MatchSubtree}
		case set.children[d] && timesSyscall(o.syscall):
			o.scope = policy.PathPattern{Path: d, Match: policy.MatchChildren}
		default:
			continue
		}
		o.note = fmt.Sprintf("learned: an existing file among the run's own, %s (which one changes from run to run); ", path.Base(p))
	}
}

func ownNote(t policy.Triple, top string, pat policy.PathPattern, gone, fan bool) string {
	why := "a wall's rule attaches to a directory that exists when the session starts"
	switch {
	case t.Type == policy.ObjProc:
		return fmt.Sprintf("learned: a program the run built, %s (%s); ", strings.TrimPrefix(t.Path, pat.Path+"/"), why)
	case fan:
		return fmt.Sprintf("learned: the run's own files in a hash fan-out, %s (the next run's hashes pick other directories); ", strings.TrimPrefix(t.Path, pat.Path+"/"))
	case pat.Match == policy.MatchSubtree:
		return fmt.Sprintf("learned: in a directory the run made, %s (its names change from run to run; %s); ", path.Base(top), why)
	case gone:
		return fmt.Sprintf("learned: a temporary file of the run, %s (made, then renamed away or removed: its name may change from run to run); ", path.Base(t.Path))
	}
	return fmt.Sprintf("learned: a file the run made, %s (its name may change from run to run; %s); ", path.Base(t.Path), why)
}

// renameSyscall: the operation was a rename (its MUTATES is of the file it
// replaced).
func renameSyscall(s string) bool { return strings.HasPrefix(s, "rename") || s == "path_rename" }

// timesSyscall: the operation changed a file's times or attributes, not
// its content (bpf-lsm reports both as inode_setattr).
func timesSyscall(s string) bool {
	return strings.HasPrefix(s, "utime") || s == "futimesat" || s == "inode_setattr"
}

// ownSet says where the run's own files are.
type ownSet struct {
	// children: directories the run made files directly in (found there).
	children map[string]bool
	// fan: hash fan-outs, directories whose subdirectories holding the
	// run's own files (made or found) are two or more, all named by hash
	// prefixes of one length.
	fan map[string]bool
}

func ownPatterns(own map[string]bool, workdir string) ownSet {
	s := ownSet{children: map[string]bool{}, fan: map[string]bool{}}
	kids := map[string]map[string]bool{} // directory -> subdirectories with own files
	addKid := func(dir string) {
		g := parentDir(dir)
		if kids[g] == nil {
			kids[g] = map[string]bool{}
		}
		kids[g][path.Base(dir)] = true
	}
	for p := range own {
		if strings.HasSuffix(p, "/") {
			continue
		}
		pat, top, ok := ownPattern(p, own, workdir)
		switch {
		case !ok && top == p:
			addKid(parentDir(p))
		case !ok:
			addKid(top)
		case top == p && pat.Path != top:
			s.children[pat.Path] = true
			addKid(pat.Path)
		default:
			addKid(top)
		}
	}
	for g, names := range kids {
		// Never above the workdir: its own rules stay on it.
		if len(names) >= 2 && hashNames(names) && (ownArea(g, workdir) || storeArea(g)) && (workdir == "" || !strings.HasPrefix(workdir, g+"/")) {
			s.fan[g] = true
		}
	}
	return s
}

// storeArea: a content-addressed store found outside the workdir, the
// temporary directories and the homes may be declared on its subtree when
// the run filled its fan-out (GOCACHE=/srv/cache/go-build, a ccache
// directory): the next run's hashes pick other directories. Never in the
// system's own trees, nor at depth < 2.
func storeArea(dir string) bool {
	if strings.Count(dir, "/") < 2 {
		return false
	}
	for _, n := range append([]string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot"}, neverCollapse...) {
		if dir == n || strings.HasPrefix(dir, n+"/") {
			return false
		}
	}
	return true
}

// fanOf is the hash fan-out p is in, or "".
func (s ownSet) fanOf(p string) string {
	for d := parentDir(p); d != "/"; d = parentDir(d) {
		if s.fan[d] {
			return d
		}
	}
	return ""
}

// hashNames: every name is a hash prefix (lower-case hex), all of one
// length, as content-addressed stores name their fan-out directories.
func hashNames(names map[string]bool) bool {
	n := -1
	for name := range names {
		if n == -1 {
			n = len(name)
		}
		if len(name) != n || n < 2 || strings.Trim(name, "0123456789abcdef") != "" {
			return false
		}
	}
	return true
}
