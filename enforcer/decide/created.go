package decide

import (
	"strings"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// creationSyscalls are the operations whose successful, allowed PROVIDES
// makes the path "created by the session". Backends must report PROVIDES
// for an open only when the kernel created the inode (O_CREAT on a path
// that did not exist); an open of an existing file is MUTATES or CONSUMES.
// link/linkat are deliberately absent: a hard link of an inode the agent may
// only read must never become writable through the new name (the same holds
// for O_TMPFILE + linkat of /proc/self/fd/N). An event with no Syscall is
// never a creation (fail closed: at worst a later write is a violation).
var creationSyscalls = map[string]bool{
	"open": true, "openat": true, "openat2": true, "creat": true,
	"mknod": true, "mknodat": true,
	"mkdir": true, "mkdirat": true,
	"symlink": true, "symlinkat": true,
	// BPF-LSM hook names, for backends that report the hook.
	"path_mknod": true, "path_mkdir": true, "path_symlink": true, "inode_create": true,
}

// IsCreation reports whether a successful PROVIDES FILE reported for this
// syscall (or LSM hook) name counts as the session creating the file.
func IsCreation(syscall string) bool { return creationSyscalls[syscall] }

// createdGrants are the predicates the session may use on a file it created.
var createdGrants = policy.AccessOf(policy.Consumes, policy.Mutates, policy.Deletes, policy.Renames)

// createdSet tracks the paths the session created and still owns. Renames
// move whole subtrees, so besides the set it keeps, for every directory on
// the way to a created path, the names below it that lead to one: moving or
// removing a tree costs its size, not the size of the set (a build that
// renames twenty thousand files into place took seconds at the session's
// end when every rename scanned every created path).
type createdSet struct {
	paths map[string]struct{}
	// kids: directory -> the entries directly in it that are created
	// paths or lead to one.
	kids map[string]map[string]struct{}
}

func newCreatedSet() *createdSet {
	return &createdSet{paths: map[string]struct{}{}, kids: map[string]map[string]struct{}{}}
}

// all lists the created paths, in no order.
func (s *createdSet) all() []string {
	out := make([]string, 0, len(s.paths))
	for p := range s.paths {
		out = append(out, p)
	}
	return out
}

// has reports whether the session created p and still owns it.
func (s *createdSet) has(p string) bool {
	_, ok := s.paths[p]
	return ok
}

// allows reports whether t is allowed because the session created t.Path.
func (s *createdSet) allows(t policy.Triple) bool {
	if t.Type != policy.ObjFile || !createdGrants.Has(t.Predicate) {
		return false
	}
	_, ok := s.paths[t.Path]
	return ok
}

// update applies a successful, fully allowed event to the set.
func (s *createdSet) update(ev event.Event) {
	t := ev.Triple
	if t.Type != policy.ObjFile {
		return
	}
	switch t.Predicate {
	case policy.Provides:
		if ev.Tmpfile {
			// An unnamed file made in an existing directory: neither is
			// the session's creation (a linkat naming it is a link).
			return
		}
		if IsCreation(ev.Syscall) {
			s.add(t.Path)
		} else {
			// A link or anything else landing on the path: not ours.
			s.remove(t.Path)
		}
	case policy.Deletes:
		s.remove(t.Path)
	case policy.Renames:
		dst := ev.Extra
		if dst.Type != policy.ObjFile || dst.Path == "" {
			// Destination unknown: the source is gone, nothing is gained.
			s.removeTree(t.Path)
			return
		}
		moved := s.takeTree(t.Path)
		// Whatever the rename replaced is no longer a file we created.
		s.removeTree(dst.Path)
		for _, rel := range moved {
			s.add(dst.Path + rel)
		}
	}
}

func (s *createdSet) add(p string) {
	s.paths[p] = struct{}{}
	for q := p; q != "/" && q != ""; {
		d := parentDir(q)
		k := s.kids[d]
		if k == nil {
			k = map[string]struct{}{}
			s.kids[d] = k
		}
		if _, ok := k[q]; ok {
			return // the rest of the way is indexed already
		}
		k[q] = struct{}{}
		q = d
	}
}

func (s *createdSet) remove(p string) {
	delete(s.paths, p)
	s.prune(p)
}

// prune drops p from its directory's index, and that directory from its
// own, as long as they lead to no created path any more.
func (s *createdSet) prune(p string) {
	for q := p; q != "/" && q != ""; q = parentDir(q) {
		if _, created := s.paths[q]; created || len(s.kids[q]) > 0 {
			return
		}
		d := parentDir(q)
		delete(s.kids[d], q)
		if len(s.kids[d]) == 0 {
			delete(s.kids, d)
		}
	}
}

// takeTree removes path and everything below it, returning the removed
// entries relative to path ("" for path itself).
func (s *createdSet) takeTree(path string) []string {
	path = strings.TrimSuffix(path, "/")
	if path == "" {
		path = "/"
	}
	var out []string
	var walk func(p string)
	walk = func(p string) {
		if _, ok := s.paths[p]; ok {
			rel := p[len(path):]
			if path == "/" {
				rel = p
			}
			out = append(out, rel)
			delete(s.paths, p)
		}
		for c := range s.kids[p] {
			walk(c)
		}
		delete(s.kids, p)
	}
	walk(path)
	s.prune(path)
	return out
}

func (s *createdSet) removeTree(path string) { s.takeTree(path) }

// parentDir is path.Dir for clean absolute paths.
func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}
