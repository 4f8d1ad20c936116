package decide

import "github.com/klocklabs/klock/policy"

// leftBehind are the removals a run implies on the files it made and left
// in place: the next run starts with them there and rebuilds them. A
// linker removes its old output before it writes the new one (gcc after
// an edited source: DELETES build/hello), a package manager replaces the
// files it installed; a strict run learned from a run that only made them
// was killed for that. Their writes are declared already (the engine
// allows them as the session's own and Learned declares them); their
// removal is declared with them, on the same scope (ownScopes). Call with
// e.mu held.
func (e *Engine) leftBehind(workdir string) []learnObs {
	var out []learnObs
	for t, o := range e.obs {
		if t.Type != policy.ObjFile || t.Predicate != policy.Provides || o.Count <= o.Failed || !e.create.has(t.Path) {
			continue
		}
		d := policy.FileTriple(policy.Deletes, t.Path)
		if e.obs[d] != nil {
			continue // the run removed it itself: learned from that
		}
		out = append(out, learnObs{t: d, syscall: "unlinkat", scope: e.madeIn(t.Path)})
		// A file the run made by opening it (not a directory, a link or
		// a socket) outside the workdir, in a tool's state (a home's
		// cache, /tmp), is opened again by the next run, which finds it
		// there whatever its workdir holds: a lock file (go's
		// ~/go/pkg/mod/cache/lock, made with O_RDWR|O_CREAT and never
		// written), a cache index, a log appended to. Its creating open
		// was a PROVIDES; the same open next time is a MUTATES of an
		// existing file, declared on the same scope as its removal
		// (which is no narrower a right). In the workdir a write to an
		// existing file keeps its name for the review.
		if m := policy.FileTriple(policy.Mutates, t.Path); e.obs[m] == nil && madeByOpen(o.Syscall) && !inWorkdir(t.Path, workdir) {
			out = append(out, learnObs{t: m, syscall: "openat", scope: e.madeIn(t.Path)})
		}
	}
	return out
}

// madeByOpen: the syscall (or LSM hook) that made a file was an open or a
// mknod of a regular file, not a mkdir, symlink, link or bind.
func madeByOpen(syscall string) bool {
	switch syscall {
	case "open", "openat", "openat2", "creat", "file_open", "path_mknod", "mknod", "mknodat":
		return true
	}
	return false
}
