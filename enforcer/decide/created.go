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

// createdSet tracks the paths the session created and still owns.
type createdSet map[string]struct{}

// allows reports whether t is allowed because the session created t.Path.
func (s createdSet) allows(t policy.Triple) bool {
	if t.Type != policy.ObjFile || !createdGrants.Has(t.Predicate) {
		return false
	}
	_, ok := s[t.Path]
	return ok
}

// update applies a successful, fully allowed event to the set.
func (s createdSet) update(ev event.Event) {
	t := ev.Triple
	if t.Type != policy.ObjFile {
		return
	}
	switch t.Predicate {
	case policy.Provides:
		if IsCreation(ev.Syscall) {
			s[t.Path] = struct{}{}
		} else {
			// A link or anything else landing on the path: not ours.
			delete(s, t.Path)
		}
	case policy.Deletes:
		delete(s, t.Path)
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
		for rel := range moved {
			s[dst.Path+rel] = struct{}{}
		}
	}
}

// takeTree removes path and everything below it, returning the removed
// entries relative to path ("" for path itself).
func (s createdSet) takeTree(path string) map[string]struct{} {
	out := map[string]struct{}{}
	if _, ok := s[path]; ok {
		out[""] = struct{}{}
		delete(s, path)
	}
	prefix := strings.TrimSuffix(path, "/") + "/"
	for p := range s {
		if strings.HasPrefix(p, prefix) {
			out[p[len(prefix)-1:]] = struct{}{}
			delete(s, p)
		}
	}
	return out
}

func (s createdSet) removeTree(path string) { s.takeTree(path) }
