//go:build linux

package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lsm"
	"github.com/klocklabs/klock/enforcer/nshelper"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

// prepareContainer is prepare for an adopted container (Options.Container):
// the kernel backends go on the runtime's cgroup while the container's
// init waits (the OCI createRuntime hook), the wall stage 2 enforces
// inside the container is written (runtime mode), the backup is taken of
// the host paths (hostRS), and the init is adopted: nothing is launched.
// The runtime execs stage 2 once klock's hook returns, and stage 2 the
// entrypoint. With a release gate (klock-runtime's state directory) the
// hook returns as soon as the watchers are on and the wall is written
// (Options.Armed), the rest is done while the runtime sets the container
// up, and every stage 2 there waits for the release, written last: the
// entrypoint still runs only inside every wall, after the backup and the
// session's first log.
func prepareContainer(hostRS *policy.Ruleset) func(ctx context.Context, a prepareArgs) (*prepared, error) {
	return func(ctx context.Context, a prepareArgs) (_ *prepared, err error) {
		if a.o.Backend == BackendObserve {
			return nil, fmt.Errorf("%w: --backend observe is for klock run's learning runs, not containers", ErrSetup)
		}
		p := newAdopting(ctx, a, hostRS)
		// The backup (of host paths) and the backends (on the cgroup) do
		// not depend on each other: both only have to be done before the
		// entrypoint starts (the release, or the hook's return).
		start := time.Now()
		p.takeBackup()
		defer func() {
			if err != nil {
				p.gate.refuse(err)
				p.abort()
				if p.canaries != nil && p.canaries.Report != nil {
					p.canaries.Report.Close()
				}
			}
		}()
		defer p.awaitMemfd() // never left running behind the caller's back
		if err := p.attachWatchers(); err != nil {
			return nil, err
		}
		if err := p.writeWall(); err != nil {
			return nil, err
		}
		if p.gate != nil && a.o.Armed != nil {
			// Watched and walled from here on: what is left (the network
			// programs, the backup, the log) is done while the runtime
			// sets the container up, and its stage 2 waits for the gate.
			a.o.Armed()
		}
		if err := p.attachWalls(); err != nil {
			return nil, err
		}
		if err := p.probeCanaries(); err != nil {
			return nil, err
		}
		restorer, err := p.awaitBackup("the container was not started")
		if err != nil {
			return nil, err
		}
		if err := a.logged(); err != nil {
			return nil, err
		}
		a.o.tl.mark("begun log")
		proc, err := launch.Adopt(p.c.Pid, p.g, p.plan, p.canaries)
		p.canaries = nil // Adopt's now
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		p.refuseProbed(proc)
		if err := p.gate.open(); err != nil {
			_ = proc.Kill()
			return nil, err
		}
		return &prepared{be: p.be, proc: proc, restorer: restorer, start: start}, nil
	}
}

// adopting is one prepareContainer under way.
type adopting struct {
	*preparing
	c      *Container
	hostRS *policy.Ruleset
	// plan is the Landlock wall written for stage 2 inside the container
	// (nil: none, hook-only mode or bpf-lsm).
	plan *launch.LandlockPlan
	// canaries are what the entrypoint's stage 2 proves the walls with
	// (nil: none), until Adopt takes them.
	canaries *launch.AdoptedCanaries
	memfd    chan memfdResult
	// gate holds the container's entrypoint until the preparation is done
	// (nil: the hook returns only then).
	gate *releaseGate
}

func newAdopting(ctx context.Context, a prepareArgs, hostRS *policy.Ruleset) *adopting {
	return &adopting{preparing: newPreparing(ctx, a, true), c: a.o.Container, hostRS: hostRS}
}

// takeBackup starts the pre-flight backup of the container's host paths.
func (p *adopting) takeBackup() {
	o, c := p.o, p.c
	if o.Snapshot == nil {
		return
	}
	p.backup = make(chan backupResult, 1)
	go func() {
		r, err := o.Snapshot(p.ctx, Preflight{Ruleset: p.hostRS, ID: p.id, AgentUID: c.UID, AgentGIDs: append([]uint32{c.GID}, c.Groups...), Others: p.exclude,
			Scratch: c.scratch()})
		o.tl.mark("backup")
		p.backup <- backupResult{r, err}
	}()
}

// attachWatchers puts bpf-lsm and the observer's watch on the runtime's
// cgroup, the observer resolving in the container's mount namespace
// (held open for the session: a path of a process that has exited is
// resolved inside it).
func (p *adopting) attachWatchers() error {
	be, o, c := p.be, p.o, p.c
	var lopts []lsm.AttachOption
	if c.WallFile == "" {
		lopts = append(lopts, lsm.ArmAtFirstExec())
	}
	if err := be.attachLSM(p.g, p.rs, p.l, p.choice, lopts...); err != nil {
		return err
	}
	o.tl.mark("bpf-lsm")
	if c.WallFile != "" && be.lsms == nil && launch.MemfdNoexecSupported() {
		// Landlock inside will be the wall, and its plan will ask for
		// unexecutable memfds (launch.LandlockPlan.MemfdNoexec): the
		// helper, the adopt's longest step, starts now.
		p.startMemfd()
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", c.Pid))
	if err != nil {
		return fmt.Errorf("%w: container %s: its mount namespace: %v", ErrSetup, c.ID, err)
	}
	be.mntns = append(be.mntns, ns)
	if err := be.attachObserver(p.g, p.l.observer(), nil, append(knownDirs(c, o.Manifest.Workdir), observe.InOwnRoot(ns, c.Pid), nsHelper(o.Stage2))...); err != nil {
		return err
	}
	o.tl.mark("observer")
	return nil
}

// writeWall writes the wall stage 2 enforces inside the container (and
// makes sure the memfd helper runs when its plan asks for it). It refuses
// a container no wall or tracepoint covers.
func (p *adopting) writeWall() error {
	be, o, c := p.be, p.o, p.c
	var err error
	if p.gate, err = openReleaseGate(c); err != nil {
		return err
	}
	plan, canaries, err := writeWall(c, p.rs, be.lsms != nil, be.watch != nil, p.gate != nil, p.spec.Canaries)
	o.tl.mark("wall written")
	if err != nil {
		return err
	}
	p.plan, p.canaries = plan, canaries
	if plan != nil && plan.MemfdNoexec {
		p.startMemfd() // started already, as a rule (attachWatchers)
	}
	be.metaIoctlsRefused = c.WallFile != "" && launch.MetaIoctlsRefused(p.rs, be.lsms != nil, be.watch != nil)
	if be.lsms == nil && plan == nil && !o.AllowDegraded && be.watch == nil {
		return fmt.Errorf("%w: container %s has no file wall (no bpf-lsm, no Landlock inside: hook-only mode) and no tracepoints to detect what it does. Fix: klock doctor says what the kernel lacks", ErrDegraded, c.ID)
	}
	if be.lsms == nil && plan == nil {
		be.list = append(be.list, vlog.Backend{Name: "no file wall", Guarantee: vlog.GuaranteeDetects, Details: []string{
			"hook-only mode on a kernel without bpf-lsm: no wall inside the container; the tracepoints detect an undeclared operation after it happened, and strict mode kills the container and rolls its files back",
		}})
	}
	return nil
}

// startMemfd starts, once, the helper that makes memfds unexecutable in
// the container's pid namespace (as klock run's stage 2 does in its own:
// the agent has no capability to, inside the container).
func (p *adopting) startMemfd() {
	if p.memfd != nil {
		return
	}
	p.memfd = make(chan memfdResult, 1)
	go func() {
		shared, err := memfdNoexec(p.c, p.o.Stage2)
		p.o.tl.mark("memfd_noexec")
		p.memfd <- memfdResult{shared, err}
	}()
}

// attachWalls puts the cgroup programs on and waits for the memfd helper.
func (p *adopting) attachWalls() error {
	o := p.o
	if err := p.be.attachNetAlways(p.g, p.rs, p.l); err != nil {
		return err
	}
	o.tl.mark("cgroup-net")
	if err := p.be.attachUnix(p.g, p.rs, p.l); err != nil {
		return err
	}
	o.tl.mark("cgroup-unix")
	return p.awaitMemfd()
}

// awaitMemfd waits for the memfd helper (if any, once) and says in the log
// when the container shares the host's pid namespace.
func (p *adopting) awaitMemfd() error {
	if p.memfd == nil {
		return nil
	}
	r := <-p.memfd
	p.memfd = nil
	if r.shared {
		p.be.list = append(p.be.list, vlog.Backend{Name: "memfd exec", Guarantee: vlog.GuaranteeDetects, Details: []string{
			"the container shares klockd's pid namespace (the host's), whose vm.memfd_noexec klock leaves as it is: an exec of a memfd is not walled by Landlock there; the tracepoints (or bpf-lsm) see it",
		}})
	}
	return r.err
}

type memfdResult struct {
	shared bool
	err    error
}

// memfdNoexec sets vm.memfd_noexec = 2 in the container's pid namespace:
// no memfd made there can be executed (the Landlock plan counts on it). A
// container that shares klockd's pid namespace (the host's: --pid=host)
// is left alone, and shared says so: the switch would be the whole
// host's. The helper process is klock-stage2 (stage2, or beside the
// running binary) when there is one: it starts sooner than klockd.
func memfdNoexec(c *Container, stage2 string) (shared bool, err error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", c.Pid))
	if err != nil {
		return false, fmt.Errorf("%w: container %s: its pid namespace: %v", ErrSetup, c.ID, err)
	}
	defer ns.Close()
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &theirs); err != nil {
		return false, fmt.Errorf("%w: container %s: its pid namespace: %v", ErrSetup, c.ID, err)
	}
	if err := unix.Stat("/proc/self/ns/pid", &ours); err != nil {
		return false, fmt.Errorf("%w: klockd's own pid namespace: %v", ErrSetup, err)
	}
	if theirs.Dev == ours.Dev && theirs.Ino == ours.Ino {
		return true, nil
	}
	if bin := launch.OpenHelper(stage2); bin != nil {
		err := nshelper.SetMemfdNoexec(ns, nshelper.Binary(bin))
		bin.Close()
		if err == nil {
			return false, nil
		}
		// A klock-stage2 of another build may not know the helper's part:
		// klockd's own binary does the same, only later.
	}
	if err := nshelper.SetMemfdNoexec(ns); err != nil {
		return false, fmt.Errorf("%w: container %s: %v", ErrSetup, c.ID, err)
	}
	return false, nil
}

// knownDirs are the directories c's processes start in, as they name
// them, with their host paths: a relative name used by a process that has
// exited before the observer read its record resolves from them
// (observe.KnownDirAs).
func knownDirs(c *Container, workdir string) []observe.WatchOption {
	var out []observe.WatchOption
	for _, d := range []string{c.Cwd, workdir} {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if h, ok := c.ToHost(d); ok {
			out = append(out, observe.KnownDirAs(d, h))
		}
	}
	return out
}
