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
func (e *Engine) leftBehind() []learnObs {
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
	}
	return out
}
