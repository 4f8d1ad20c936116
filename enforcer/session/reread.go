package session

import (
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/policy"
)

// rereadTrust says when a name the observer read back from the agent after
// the kernel's copy could not be read (observe.Record.NameReread) may stand
// for the operation in strict mode, and when an operation whose name could
// not be read at all (event.Event.NameUnread) is allowed without one. The
// agent could have rewritten the name in between, so it stands only where
// that cannot hide an effect:
//   - the call failed without the wall (EEXIST, ENOENT...): it changed
//     nothing;
//   - bpf-lsm decided the call on the kernel's own copy of the name;
//   - the Landlock wall is exact for the operation's predicates
//     (LandlockPlan.Exact): every such operation it lets through is
//     declared, whatever its name.
//
// Elsewhere (a hard link's source, a rename over a file, a glob the wall
// widens to its directory, a hook-only container with no file wall) strict
// mode fails closed on it.
type rereadTrust struct {
	lsm      bool
	exactFor map[policy.Predicate]bool
}

func newRereadTrust(b *backends, plan *launch.LandlockPlan, rs *policy.Ruleset, choice Backend) rereadTrust {
	if choice == BackendObserve {
		return rereadTrust{}
	}
	if b.lsms != nil {
		return rereadTrust{lsm: true}
	}
	t := rereadTrust{exactFor: map[policy.Predicate]bool{}}
	for _, p := range []policy.Predicate{policy.Provides, policy.Deletes, policy.Renames} {
		t.exactFor[p] = plan.Exact(p, rs)
	}
	return t
}

func (t rereadTrust) trusts(ev event.Event) bool {
	if ev.Blocked {
		return false
	}
	return ev.Errno != 0 || t.exact(ev)
}

// exact says whether the wall lets through only operations like ev that
// the manifest declares (decide.WithExactWall): then ev needs no name to be
// allowed.
func (t rereadTrust) exact(ev event.Event) bool {
	if t.lsm {
		return true
	}
	if !t.exactFor[ev.Triple.Predicate] {
		return false
	}
	return ev.Extra.Type != policy.ObjFile || t.exactFor[ev.Extra.Predicate]
}
