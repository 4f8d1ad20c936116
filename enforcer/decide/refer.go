package decide

import (
	"fmt"
	"slices"
	"strings"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// A file is its inode, not its name. A hard link or a rename gives an
// existing inode a new name, and every right the new name carries then
// reaches the inode's content, whichever name the agent writes through
// afterwards (the observer names an open by the dentry it went through:
// the new one). Landlock's REFER rule refuses a link or rename whose
// destination would grant the file more than its source did; a wall
// widened past the declaration (a rule moved up to a directory the agent
// cannot replace, enforcer/launch's settle) lets such a link through, so
// the engine applies the same rule to the manifest: every content right
// the new name has must already be the inode's by its existing name.
//
// contentRights are the predicates that act on an inode whatever name it
// is reached by. DELETES and RENAMES of the new name act on that name
// only (the inode keeps its other names), and PROVIDES is the new name's
// own creation, judged as the operation's main triple.
var contentRights = []policy.Predicate{policy.Consumes, policy.Mutates, policy.DependsOn}

// referSyscalls are the operations that give an existing inode another
// name: the tracepoints report the syscall, bpf-lsm its hook.
var referSyscalls = map[string]bool{
	"link": true, "linkat": true, "path_link": true,
	"rename": true, "renameat": true, "renameat2": true, "path_rename": true,
}

// refer judges the rights a link or rename would give the inode it moves
// or names again, each as a triple on the inode's existing name with Via
// naming the new one. It returns the first violation, or a zero Verdict.
//
// It judges only a link or rename that took effect or that a wall refused
// (the attempt to widen is the violation, KLIS-6 §3.2). Any other failure
// did nothing and was no wall's refusal: EXDEV across mounts, the answer
// Landlock gives for its own REFER refusal (git's local clone then copies
// instead of linking), ENOENT, EEXIST.
func (e *Engine) refer(ev event.Event) Verdict {
	if !referSyscalls[ev.Syscall] || ev.Triple.Type != policy.ObjFile || ev.Extra.Type != policy.ObjFile {
		return Verdict{}
	}
	if ev.Errno != 0 && !ev.Blocked {
		return Verdict{}
	}
	src, dst, via := ev.Extra.Path, ev.Triple.Path, "through the hard link "+ev.Triple.Path
	if ev.Triple.Predicate == policy.Renames {
		src, dst, via = ev.Triple.Path, ev.Extra.Path, "renamed to "+ev.Extra.Path
	}
	if ev.Errno == 0 && src != "" && dst != "" && src != dst {
		e.alias(dst, src)
	}
	if src == "" || dst == "" || src == dst || e.create.has(src) {
		// A file the session made has no pre-session state to protect:
		// it may go anywhere the agent may create (created.go).
		return Verdict{}
	}
	var first Verdict
	for _, p := range contentRights {
		if !e.rs.Allows(policy.FileTriple(p, dst)).Allowed {
			continue
		}
		x := e.decideVia(ev, policy.FileTriple(p, src), via, true)
		if x.Violation() && !first.Violation() {
			first = x
		}
	}
	// Running a file is a right of its name too (PROC intents). A file
	// the session wrote could have been written at the new name anyway.
	if e.rs.Allows(policy.ExecTriple(dst)).Allowed {
		if x := e.decideVia(ev, policy.ExecTriple(src), via, true); x.Violation() && !first.Violation() {
			first = x
		}
	}
	return first
}

// decideVia judges t only when the ruleset (or a permissive amendment
// made now) refuses it: a right the inode already had by its existing name
// is no new operation and is not recorded as one. referred: t is a right
// another name's operation needs (a link or rename's, refer; a write
// through a file with hidden names, throughHidden), which changes nothing
// at t's own name (Observation.Referred).
func (e *Engine) decideVia(ev event.Event, t policy.Triple, via string, referred bool) Verdict {
	if e.rs.Allows(t).Allowed || e.create.allows(t) {
		return Verdict{}
	}
	return e.decideAs(ev, t, via, referred)
}

// alias records that the session gave the inode at existing the new name
// name (a hard link, a rename that took effect).
func (e *Engine) alias(name, existing string) {
	if e.aliases == nil {
		e.aliases = map[string][]string{}
	}
	if !slices.Contains(e.aliases[name], existing) {
		e.aliases[name] = append(e.aliases[name], existing)
	}
}

// throughLinks judges a change of a file's content or metadata against
// every other name its inode had before the session (WithOtherNames): a
// hard link planted before the session between a writable name and one
// the agent may only read makes a write through the first a write of the
// second. A file the session made anew at that name is another inode. A
// write of its content through a file with names the backup did not find
// (WithHiddenNames) is judged against the file system they lie on.
func (e *Engine) throughLinks(ev event.Event) Verdict {
	t := ev.Triple
	if t.Type != policy.ObjFile || t.Predicate != policy.Mutates || ev.Unnamed {
		return Verdict{}
	}
	if ev.Errno != 0 && !ev.Blocked || e.create.has(t.Path) {
		return Verdict{}
	}
	var first Verdict
	if e.otherNames != nil {
		for _, q := range e.otherNames(t.Path) {
			x := e.decideVia(ev, policy.FileTriple(policy.Mutates, q), "through the hard link "+t.Path, false)
			if x.Violation() && !first.Violation() {
				first = x
			}
		}
	}
	if x := e.throughHidden(ev); x.Violation() && !first.Violation() {
		first = x
	}
	return first
}

// throughHidden judges a write of the content of a file that had names
// the backup did not find when the session began (WithHiddenNames) as a
// MUTATES of the root of the file system those names lie on: whichever
// they are, only a manifest that declares all of it declares them. Its
// times and attributes (git freshens an object it would write again with
// utime) and a rename over it (which leaves the other names their
// content) are not its content. A write that failed changed nothing.
func (e *Engine) throughHidden(ev event.Event) Verdict {
	if e.hidden == nil || ev.Errno != 0 || !contentWrite(ev.Syscall) {
		return Verdict{}
	}
	n, root := e.hidden(ev.Triple.Path)
	if n <= 0 || root == "" {
		return Verdict{}
	}
	via := fmt.Sprintf("through %s, which had %d more name(s) than klock's backup found when the session began (a hard link from outside its scopes, made before it): they lie somewhere on the file system at %s, which the manifest does not declare whole; remove the extra link before the session",
		ev.Triple.Path, n, root)
	t := policy.FileTriple(policy.Mutates, root)
	v := e.decideVia(ev, t, via, true)
	if o := e.obs[t]; o != nil {
		o.Hidden = true
	}
	return v
}

// contentWrite: a MUTATES by this syscall (or bpf-lsm hook) may have
// written the file's content: not a change of its times, mode, owner or
// attributes, nor a rename over it.
func contentWrite(syscall string) bool {
	switch {
	case timesSyscall(syscall), renameSyscall(syscall),
		strings.Contains(syscall, "chmod"), strings.Contains(syscall, "chown"),
		strings.Contains(syscall, "xattr"), syscall == "ioctl":
		return false
	}
	return true
}
