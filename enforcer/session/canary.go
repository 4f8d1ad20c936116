//go:build linux

package session

import (
	"strings"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// canaries is what a launched session asks stage 2 to prove before the
// agent runs (launch.Canaries): a write and an exec the file wall must
// refuse, and a connect the network wall must, in strict mode as a
// condition of the start (a wall that lets its canary through is a
// typed error naming it and the kernel, launch.ErrWallNotEnforcing), in
// permissive mode as a report (the log's canaries and headline say the
// wall is not enforcing). An observe-only session promises no wall: it
// tries none.
func canaries(mode policy.Mode, choice Backend) *launch.Canaries {
	if choice == BackendObserve {
		return nil
	}
	return &launch.Canaries{Strict: mode == policy.ModeStrict, NetWall: "cgroup-net"}
}

// canaryLog is the log's record of the canaries.
func canaryLog(proc *launch.Process) []vlog.Canary {
	if proc == nil {
		return nil
	}
	out := make([]vlog.Canary, 0, len(proc.Canaries))
	for _, c := range proc.Canaries {
		out = append(out, vlog.Canary{Kind: c.Kind, Target: c.Target, Wall: c.Wall, Refused: c.Refused, Errno: c.Errno, Skipped: c.Skipped})
	}
	return out
}

// isCanary reports whether ev is about a canary's object: stage 2's own
// attempts before the agent's exec, which the walls report like any
// refusal and which are neither the agent's nor in its scope. The
// objects live in the canaries' tmpfs, mounted in the agent's mount
// namespace only, and on an address no network routes: nothing the
// agent can do to them reaches anything outside, so the engine never
// sees them (a permissive amendment would otherwise widen the scope to
// them).
func isCanary(ev event.Event) bool {
	return canaryObject(ev.Triple) || canaryObject(ev.Extra)
}

func canaryObject(t policy.Triple) bool {
	switch t.Type {
	case policy.ObjFile, policy.ObjProc:
		return t.Path == launch.DefaultCanaryDir || strings.HasPrefix(t.Path, launch.DefaultCanaryDir+"/")
	case policy.ObjNet:
		return t.Addr == launch.CanaryPeer
	}
	return false
}

// notEnforcing says, once proc's canaries are known, which wall let its
// canary through in a permissive session (Options.NotEnforcing, and at
// the error level: klock run -q still shows it). A strict session never
// gets here with one: it did not start (launch.ErrWallNotEnforcing; for a
// container, finish says so).
func (r *runner) notEnforcing(proc *launch.Process) {
	if proc.CanaryError() != nil {
		return
	}
	walls := vlog.NotEnforcing(canaryLog(proc))
	if len(walls) == 0 {
		return
	}
	if r.o.NotEnforcing != nil {
		r.o.NotEnforcing(walls)
	}
	for _, c := range proc.Canaries {
		if !c.Refused && c.Skipped == "" {
			r.log.Error("a wall is not enforcing: the agent runs without it (permissive)", "canary", c.String())
		}
	}
}
