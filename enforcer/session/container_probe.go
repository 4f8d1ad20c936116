//go:build linux

package session

import (
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
)

// probeCanaries proves the walls of a container adopted through OCI hooks
// alone (no WallFile: no klock code runs inside it to try the canaries
// before the entrypoint, as klock-stage2 does in runtime mode): a probe
// klock starts tries them in the container's cgroup and network
// namespace while its init waits (launch.ProbeCanaries). bpf-lsm, which
// arms such a session at the entrypoint's exec, decides for the probe
// meanwhile. Without bpf-lsm the container has no file wall, only the
// tracepoints that detect (the log says so): its file canaries are
// skipped and say why.
func (p *adopting) probeCanaries() error {
	if p.c.WallFile != "" || p.spec.Canaries == nil {
		return nil
	}
	sc, skipped := launch.PlanCanaries(p.spec.Canaries, p.rs, nil)
	var register func(int) (func(), error)
	if lsms := p.be.lsms; lsms != nil {
		register = lsms.Probe
	} else {
		skipped = append(skipped, noFileWall(sc)...)
		sc.Write, sc.Exec = false, false
	}
	if !sc.Write && !sc.Exec && sc.Connect == "" {
		p.canaries = &launch.AdoptedCanaries{Skipped: skipped}
		return nil
	}
	netns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", p.c.Pid))
	if err != nil {
		return fmt.Errorf("%w: container %s: its network namespace: %v", ErrSetup, p.c.ID, err)
	}
	defer netns.Close()
	p.canaries, err = launch.ProbeCanaries(p.ctx, sc, skipped, launch.Probe{Group: p.g, Netns: netns, Register: register, Helper: p.o.Stage2})
	p.o.tl.mark("canaries")
	if err != nil {
		return fmt.Errorf("%w: container %s: %v", ErrSetup, p.c.ID, err)
	}
	return nil
}

// noFileWall: the file canaries a hook-only container without bpf-lsm
// cannot be asked, since nothing walls its files.
func noFileWall(sc *stage2.Canary) []launch.CanaryResult {
	var out []launch.CanaryResult
	why := "hook-only mode without bpf-lsm: no file wall in the container (the tracepoints detect, strict mode kills and rolls back)"
	if sc.Write {
		out = append(out, launch.CanaryResult{Kind: stage2.CanaryKindWrite, Target: sc.Dir + "/" + stage2.CanaryWrite, Wall: "none", Skipped: why})
	}
	if sc.Exec {
		out = append(out, launch.CanaryResult{Kind: stage2.CanaryKindExec, Target: sc.Dir + "/" + stage2.CanaryExec, Wall: "none", Skipped: why})
	}
	return out
}

// refuseProbed ends, in strict mode, a hook-only container whose probe
// found a wall letting its canary through: its init is killed before the
// runtime can exec the entrypoint, and the session ends as klock's
// refusal (finish: the error names the wall and the kernel). In runtime
// mode stage 2 itself refuses to exec the entrypoint.
func (p *adopting) refuseProbed(proc *launch.Process) {
	if p.c.WallFile != "" || !proc.Canaried() {
		return
	}
	if proc.CanaryError() != nil {
		if err := p.g.Kill(); err != nil {
			p.log.Error("the container's canaries found a wall not enforcing, and its init could not be killed", "error", err)
		}
	}
}
