package launch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"github.com/klocklabs/klock/policy"
)

// DefaultCanaryDir is where stage 2 mounts the canaries' tmpfs in the
// agent's mount namespace (a container's spec mounts one there). Spawn
// makes the empty directory on the host; the host never sees what is
// mounted on it. One fixed place, which the session also uses to keep the
// canaries' events from its engine.
const DefaultCanaryDir = stage2.CanaryDir

// CanaryConnect is the connect canary's destination: TEST-NET-1 (RFC
// 5737), an address no network routes, on the discard port.
const CanaryConnect = "192.0.2.1:9"

// CanaryPeer is CanaryConnect as an address.
var CanaryPeer = netip.MustParseAddrPort(CanaryConnect)

// Canaries asks stage 2 to prove the walls before the agent's exec: a
// write to a file no declared scope covers, an exec of a program none
// declares, and (Connect) a TCP connect to a peer none declares, each
// tried as the agent, in its cgroup, namespaces, Landlock domain and
// seccomp filter, after the caller's cgroup programs are attached
// (Release). Each must be refused; Process.Canaries says what happened.
// A canary the walls are meant to let through (a scope that covers its
// object) is skipped, and says why.
type Canaries struct {
	// NetWall names the network wall that must refuse a connect to
	// CanaryConnect; "" for no connect canary (a session whose network
	// klock does not wall).
	NetWall string
	// Strict: a canary let through fails Release with a *StageError that
	// matches ErrWallNotEnforcing; the agent never runs. Otherwise the
	// agent runs and Process.Canaries reports the wall that let it
	// through.
	Strict bool
}

// CanaryResult is one canary's outcome (Skipped: why it was not tried).
type CanaryResult = stage2.CanaryResult

// PlanCanaries decides which canaries c asks of a session walled by rs
// apply (its walls must refuse them as planned: plan for Landlock, nil
// when bpf-lsm walls the files and decides by rs), and returns stage 2's
// part (nil for none) and the skipped ones, each saying why. A
// container's session puts stage 2's part in the wall stage 2 reads
// there (stage2.ContainerWall.Canary).
func PlanCanaries(c *Canaries, rs *policy.Ruleset, plan *LandlockPlan) (*stage2.Canary, []CanaryResult) {
	if c == nil {
		return nil, nil
	}
	dir := DefaultCanaryDir
	sc := &stage2.Canary{Dir: dir, Strict: c.Strict, FileWall: "landlock", NetWall: c.NetWall}
	if plan == nil {
		sc.FileWall = "bpf-lsm"
	}
	var skipped []CanaryResult
	skip := func(kind, target, why string) {
		skipped = append(skipped, CanaryResult{Kind: kind, Target: target, Wall: sc.FileWall, Skipped: why})
	}
	w := policy.FileTriple(policy.Mutates, filepath.Join(dir, stage2.CanaryWrite))
	if sc.Write = refusedAsPlanned(rs, plan, w, "openat"); !sc.Write {
		skip(stage2.CanaryKindWrite, w.Path, "the wall as planned lets the agent write there")
	}
	x := policy.ExecTriple(filepath.Join(dir, stage2.CanaryExec))
	if sc.Exec = refusedAsPlanned(rs, plan, x, "execve"); !sc.Exec {
		skip(stage2.CanaryKindExec, x.Path, "the wall as planned lets the agent execute it")
	}
	if c.NetWall != "" {
		if rs.Allows(policy.NetTriple(policy.Consumes, CanaryPeer, policy.ProtoTCP)).Allowed {
			skipped = append(skipped, CanaryResult{Kind: stage2.CanaryKindConnect, Target: CanaryConnect, Wall: c.NetWall, Skipped: "a declared peer covers it"})
		} else {
			sc.Connect = CanaryConnect
		}
	}
	return sc, skipped
}

// refusedAsPlanned reports whether the session's file wall is meant to
// refuse t: Landlock's plan (which may be wider than the declaration),
// else the declaration itself (bpf-lsm decides by it).
func refusedAsPlanned(rs *policy.Ruleset, plan *LandlockPlan, t policy.Triple, syscall string) bool {
	if rs.Allows(t).Allowed {
		return false
	}
	if plan != nil {
		return plan.Refuses(t, syscall)
	}
	return true
}

// readStatus reads what stage 2 wrote on its status pipe (or, in a
// container, on its canaries' report pipe): the canaries' line, if any,
// then a failure's report, if any, as a *StageError (a canary's with the
// hint that says what to do about it).
func readStatus(status []byte) ([]CanaryResult, *StageError, error) {
	var ran []CanaryResult
	if bytes.HasPrefix(status, []byte(`{"canaries":`)) {
		line, rest, _ := bytes.Cut(status, []byte{'\n'})
		var r stage2.CanaryReport
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, nil, err
		}
		ran, status = r.Canaries, rest
	}
	if status = bytes.TrimSpace(status); len(status) == 0 {
		return ran, nil, nil
	}
	se := &StageError{}
	if jerr := json.Unmarshal(status, se); jerr != nil {
		se = &StageError{Step: "stage2", Msg: fmt.Sprintf("unreadable status %q", status)}
	}
	if se.Step == stage2.StepCanary {
		se.Hint = "The agent was not started. klock doctor says what this kernel enforces; a wall that loads and does not refuse is a defect of klock or of the kernel: report it with klock doctor --json"
	}
	return ran, se, nil
}

// makeCanaryMountPoint makes the empty directory stage 2 mounts the
// canaries' tmpfs on (root's, 0755: the agent may look, not write).
func makeCanaryMountPoint(c *stage2.Canary) error {
	if c == nil {
		return nil
	}
	if err := os.Mkdir(c.Dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: the canaries' mount point: %v", ErrBadSpec, err)
	}
	return nil
}
