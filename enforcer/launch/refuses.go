package launch

import (
	"path/filepath"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// Refuses reports whether the wall p describes refuses the file or exec
// operation t (done by the system call syscall): whether an EACCES the
// agent got for it was Landlock's doing, not the file's owner and mode.
//
// The session asks this of every refused operation the manifest declares:
// a declaration the wall does not honour is klock's failure, not the
// agent's, and the verdict must not read CLEAN. The answer is
// read from the rules as planned, which hold for the whole session:
// PlanLandlock puts no rule on an inode the declaration lets the agent
// replace (settle.go).
//
// Landlock decides no metadata change (chmod, chown, times, xattrs): an
// EPERM there is never the wall's. For the rest, the right the operation
// needs is looked up where Landlock looks it up: on the object for
// reading, writing and executing, on its directory for making, removing
// and renaming.
func (p *LandlockPlan) Refuses(t policy.Triple, syscall string) bool {
	if p == nil || t.Path == "" || t.Path[0] != '/' || metadataSyscall(syscall) {
		return false
	}
	var need FSRights
	at := t.Path
	switch {
	case t.Type == policy.ObjProc:
		need = rExec
	case t.Type != policy.ObjFile:
		return false
	case t.Predicate == policy.Consumes || t.Predicate == policy.DependsOn:
		need = rRead | rReadDir
	case t.Predicate == policy.Mutates:
		need = rWrite | rTruncate
	case t.Predicate == policy.Provides:
		need, at = rMake, filepath.Dir(t.Path)
	case t.Predicate == policy.Deletes || t.Predicate == policy.Renames:
		need, at = rRemoveFile|rRemoveDir, filepath.Dir(t.Path)
	default:
		return false
	}
	need &= p.HandledFS
	return need != 0 && p.granted(at)&need == 0
}

// granted is the union of the rights of the rules on path and on every
// directory above it.
func (p *LandlockPlan) granted(path string) FSRights {
	var r FSRights
	for _, w := range p.Rules {
		if w.Path == path || w.Dir && (w.Path == "/" || strings.HasPrefix(path, w.Path+"/")) {
			r |= w.Rights
		}
	}
	return r
}

// metadataSyscall reports whether syscall changes only metadata, which
// Landlock does not decide.
func metadataSyscall(syscall string) bool {
	for _, s := range []string{"chmod", "chown", "utime", "xattr"} {
		if strings.Contains(syscall, s) {
			return true
		}
	}
	return false
}

// Exact says whether every operation of predicate pred the wall lets
// through is one rs declares: each rule granting a right such an operation
// needs (making a name for PROVIDES, removing one for DELETES and RENAMES)
// is on a directory below which rs allows pred everywhere. The wall judged
// the kernel's own copy of the name, so then the operation was declared,
// whatever name is read back from the agent afterwards. Any other
// predicate, or a right the ruleset does not handle, is not exact.
func (p *LandlockPlan) Exact(pred policy.Predicate, rs *policy.Ruleset) bool {
	var need FSRights
	switch pred {
	case policy.Provides:
		need = rMake
	case policy.Deletes, policy.Renames:
		need = rRemoveFile | rRemoveDir
	default:
		return false
	}
	if p == nil || rs == nil || p.HandledFS&need != need {
		return false
	}
	for _, w := range p.Rules {
		if w.Rights&need == 0 {
			continue
		}
		if !w.Dir || !rs.AllowsAllBelow(pred, w.Path) {
			return false
		}
	}
	return true
}
