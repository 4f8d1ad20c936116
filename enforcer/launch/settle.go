package launch

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klocklabs/klock/policy"
)

// settle moves every rule the agent could pull out from under itself to a
// directory it cannot.
//
// A Landlock rule belongs to the inode it was opened on, not to its path.
// When the wall lets the agent remove or rename that inode (REMOVE_DIR or
// REMOVE_FILE on its parent's hierarchy) and the declaration lets it make
// a new one by the same name (replaceable), the new one carries no rule: `make clean && make`
// left the rebuilt build/hello unrunnable, a `sed -i` left the file it
// replaced unwritable. So a rule whose inode is removable goes to its
// parent, and again, until it sits on a directory the wall does not let
// the agent remove. The wall is then wider than the rule (everything below
// that directory gets the rights); the observer decides each operation
// against the declared pattern, and the residual says so.
//
// Moving a rule up can only add rights to a higher directory, which can
// make more of the tree removable: settle repeats until nothing moves.
func (p *planner) settle() {
	for moved := true; moved; {
		moved = false
		paths := make([]string, 0, len(p.rules))
		for path := range p.rules {
			paths = append(paths, path)
		}
		// Deepest first, so a chain of removable directories moves in one
		// round and each move sees the rights already granted above.
		sort.Slice(paths, func(i, j int) bool {
			if di, dj := strings.Count(paths[i], "/"), strings.Count(paths[j], "/"); di != dj {
				return di > dj
			}
			return paths[i] < paths[j]
		})
		for _, path := range paths {
			w := p.rules[path]
			if w == nil || path == "/" {
				continue
			}
			need := rRemoveFile
			if w.Dir {
				need = rRemoveDir
			}
			parent := filepath.Dir(path)
			if p.grantedBelow(parent)&need == 0 || !p.replaceable(path, w.Dir) {
				continue
			}
			delete(p.rules, path)
			p.add(parent, w.Rights, true)
			p.residual(Residual{Kind: Widened, Object: "FILE:" + path, Wall: parent, Rights: w.Rights, Intents: p.intentsOn(path),
				Reason: fmt.Sprintf("the agent may remove or rename %s (its parent's wall grants %s), and a Landlock rule stays with the inode it was put on: walled at %s so the rights hold for whatever the agent makes by that name; the observer decides each operation below %s against the declared patterns (detects, kills and rolls back)",
					path, need, parent, parent)})
			moved = true
		}
	}
}

// replaceable says whether the declaration lets the agent put a new inode
// at path: remove or rename it away and make it again, or (a file) rename
// another file over it, which is writing it (sed -i, an editor's save).
// Only then can a rule be lost without a violation: the agent that removes
// a directory it may not make again is killed at the removal or the
// making, so that rule need not move.
func (p *planner) replaceable(path string, dir bool) bool {
	allows := func(pr policy.Predicate) bool { return p.rs.Allows(policy.FileTriple(pr, path)).Allowed }
	if allows(policy.Provides) && (allows(policy.Deletes) || allows(policy.Renames)) {
		return true
	}
	return !dir && allows(policy.Mutates)
}

// intentsOn are the intents of the rules declared on path.
func (p *planner) intentsOn(path string) []int {
	var out []int
	for _, rules := range [][]policy.PathRule{p.rs.Files, p.rs.Exec} {
		for _, r := range rules {
			if r.Pattern.Path == path {
				out = append(out, r.Intents...)
			}
		}
	}
	return out
}

// grantedBelow is what the wall grants on entries of dir: the union of
// the rights of every directory rule on dir or above it (a Landlock
// ruleset's rights add up along the path).
func (p *planner) grantedBelow(dir string) FSRights {
	var r FSRights
	for d := dir; ; d = filepath.Dir(d) {
		if w := p.rules[d]; w != nil && w.Dir {
			r |= w.Rights
		}
		if d == "/" || d == "." {
			return r
		}
	}
}
