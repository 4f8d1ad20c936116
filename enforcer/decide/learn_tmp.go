package decide

import (
	"strings"

	"github.com/klocklabs/klock/policy"
)

// tmpScopes declares what the run did in a private /tmp or /var/tmp
// (policy.Manifest.PrivateTmp) on the whole of it: its scratch. A private
// /tmp is the session's own and starts empty (README, "A private /tmp"):
// no other process reaches it, nothing there is leased or backed up, and
// the names the run used there (mktemp's, pytest's pytest-<N>, go build's
// $WORK) are not the next run's. So each predicate the run used there is
// declared on the subtree (${tmpdir}/**, /var/tmp/**: no variable names
// the private /var/tmp), never on a path of this run. With the host's
// /tmp the paths are the host's, shared with every process: they are
// learned as anywhere else, and listed for review (Review).
//
// What a run implies there without doing it (the removal of a file it
// left, a family's leftovers) is dropped: the next run's private /tmp
// starts empty, nothing is left in it. It returns need without them.
func tmpScopes(need []learnObs, m *policy.Manifest) []learnObs {
	if !m.PrivateTmp() {
		return need
	}
	kept := need[:0]
	for _, o := range need {
		if o.t.Type == policy.ObjFile && policy.InTmp(o.t.Path) {
			if o.count == 0 {
				continue
			}
			o.scope = policy.PathPattern{Path: tmpRoot(o.t.Path), Match: policy.MatchSubtree}
			o.note = "learned: scratch in the session's private " + tmpRoot(o.t.Path) + " (it starts empty every run; the names change from run to run); "
		}
		kept = append(kept, o)
	}
	return append(kept, tmpRenames(kept)...)
}

// tmpRenames declares RENAMES on a private tmp root where the run both
// made and removed names: a rename is a name made and a name removed
// (Landlock's own model of it), which the scratch allows already, and a
// tool that renamed nothing there this run (pip's temporary files, a
// cache written atomically) may next time. Declared, it also makes the
// Landlock wall exact there for renames, so a rename whose name the
// tracepoint could not read is allowed on the wall's word rather than
// killed (enforcer/launch's LandlockPlan.Exact).
func tmpRenames(kept []learnObs) []learnObs {
	has := map[string]policy.Access{}
	for _, o := range kept {
		if o.scope.Match == policy.MatchSubtree && policy.InTmp(o.scope.Path) && o.t.Type == policy.ObjFile {
			has[o.scope.Path] |= policy.AccessOf(o.t.Predicate)
		}
	}
	var out []learnObs
	for _, root := range []string{"/tmp", "/var/tmp"} {
		a := has[root]
		if a.Has(policy.Provides) && a.Has(policy.Deletes) && !a.Has(policy.Renames) {
			out = append(out, learnObs{t: policy.FileTriple(policy.Renames, root), count: 1, family: true,
				scope: policy.PathPattern{Path: root, Match: policy.MatchSubtree},
				note:  "learned: the run made and removed names in the session's private " + root + ", which a rename does (it starts empty every run); "})
		}
	}
	return out
}

// privateTmpObs is everything the run did in a private /tmp, the writes
// to its own files included (which the engine and a PROVIDES wall let
// through and Learned otherwise leaves out): the scratch's rights are
// what the run used there, on all of it (tmpScopes). Call with e.mu held.
func (e *Engine) privateTmpObs(m *policy.Manifest) []learnObs {
	if !m.PrivateTmp() {
		return nil
	}
	var out []learnObs
	for t, o := range e.obs {
		if t.Type == policy.ObjFile && policy.InTmp(t.Path) && (o.Count > o.Failed || o.Violation) {
			out = append(out, learnObs{t: t, count: o.Count, syscall: o.Syscall})
		}
	}
	return out
}

// tmpRoot is /var/tmp for a path in it, else /tmp.
func tmpRoot(p string) string {
	if p == "/var/tmp" || strings.HasPrefix(p, "/var/tmp/") {
		return "/var/tmp"
	}
	return "/tmp"
}

// contractTmp writes an object in /tmp as ${tmpdir}/... when the session's
// /tmp is private: the learned manifest then names the agent's /tmp, not a
// host path. (${tmpdir} expands to /tmp in every session; the variable
// says which /tmp is meant.)
func contractTmp(obj string, private bool) string {
	typ, p, ok := strings.Cut(obj, ":")
	if !private || !ok || (typ != "FILE" && typ != "PROC") {
		return obj
	}
	if p == "/tmp" || strings.HasPrefix(p, "/tmp/") {
		return typ + ":" + policy.TmpdirVar + strings.TrimPrefix(p, "/tmp")
	}
	return obj
}
