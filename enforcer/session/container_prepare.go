//go:build linux

package session

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
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
// The runtime execs the entrypoint once klock's hook returns.
func prepareContainer(hostRS *policy.Ruleset) func(ctx context.Context, o Options, rs *policy.Ruleset, id string, g *cgroup.Group, exclude []string, spec launch.Spec, dirs []string, logged func() error, log *slog.Logger) (*prepared, error) {
	return func(ctx context.Context, o Options, rs *policy.Ruleset, id string, g *cgroup.Group, exclude []string, _ launch.Spec, _ []string, logged func() error, log *slog.Logger) (_ *prepared, err error) {
		c := o.Container
		choice := o.Backend
		if choice == "" {
			choice = BackendAuto
		}
		if choice == BackendObserve {
			return nil, fmt.Errorf("%w: --backend observe is for klock run's learning runs, not containers", ErrSetup)
		}
		// A container's network namespace is its runtime's (a bridge, the
		// host's): cgroup-net walls it whatever the manifest declares.
		l := startLoading(o.Backends, true, unixWalled(choice))
		be := &backends{allowDegraded: o.AllowDegraded, log: log}
		// The backup (of host paths) and the backends (on the cgroup) do
		// not depend on each other: both only have to be done before the
		// hook returns and the runtime starts the entrypoint.
		start := time.Now()
		var backup chan backupResult
		if o.Snapshot != nil {
			backup = make(chan backupResult, 1)
			go func() {
				r, err := o.Snapshot(ctx, Preflight{Ruleset: hostRS, ID: id, AgentUID: c.UID, AgentGIDs: append([]uint32{c.GID}, c.Groups...), Others: exclude,
					Scratch: c.scratch()})
				o.tl.mark("backup")
				backup <- backupResult{r, err}
			}()
		}
		defer func() {
			if err != nil {
				if backup != nil {
					<-backup // never left writing behind the caller's back
				}
				l.discard()
				be.close()
			}
		}()
		var lopts []lsm.AttachOption
		if c.WallFile == "" {
			lopts = append(lopts, lsm.ArmAtFirstExec())
		}
		if err := be.attachLSM(g, rs, o.Backends, choice, lopts...); err != nil {
			return nil, err
		}
		o.tl.mark("bpf-lsm")
		// The container's mount namespace, held open for the session: the
		// observer resolves a path of a process that has exited inside it.
		ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", c.Pid))
		if err != nil {
			return nil, fmt.Errorf("%w: container %s: its mount namespace: %v", ErrSetup, c.ID, err)
		}
		be.mntns = append(be.mntns, ns)
		if err := be.attachObserver(g, l.observer(), nil, append(knownDirs(c, o.Manifest.Workdir), observe.InOwnRoot(ns, c.Pid))...); err != nil {
			return nil, err
		}
		o.tl.mark("observer")
		plan, err := writeWall(c, rs, be.lsms != nil, be.watch != nil)
		o.tl.mark("wall written")
		if err != nil {
			return nil, err
		}
		// As klock run's stage 2 does in its own pid namespace (the agent
		// has no capability to, inside the container): a helper process,
		// the longest step here, run beside the network backends' attach.
		var memfd chan memfdResult
		if plan != nil && plan.MemfdNoexec {
			memfd = make(chan memfdResult, 1)
			go func() {
				shared, err := memfdNoexec(c, o.Stage2)
				o.tl.mark("memfd_noexec")
				memfd <- memfdResult{shared, err}
			}()
			defer func() {
				if memfd != nil {
					<-memfd // never left running behind the caller's back
				}
			}()
		}
		joinMemfd := func() error {
			if memfd == nil {
				return nil
			}
			r := <-memfd
			memfd = nil
			if r.shared {
				be.list = append(be.list, vlog.Backend{Name: "memfd exec", Guarantee: vlog.GuaranteeDetects, Details: []string{
					"the container shares klockd's pid namespace (the host's), whose vm.memfd_noexec klock leaves as it is: an exec of a memfd is not walled by Landlock there; the tracepoints (or bpf-lsm) see it",
				}})
			}
			return r.err
		}
		be.metaIoctlsRefused = c.WallFile != "" && launch.MetaIoctlsRefused(rs, be.lsms != nil, be.watch != nil)
		if be.lsms == nil && plan == nil && !o.AllowDegraded && be.watch == nil {
			return nil, fmt.Errorf("%w: container %s has no file wall (no bpf-lsm, no Landlock inside: hook-only mode) and no tracepoints to detect what it does. Fix: klock doctor says what the kernel lacks", ErrDegraded, c.ID)
		}
		if be.lsms == nil && plan == nil {
			be.list = append(be.list, vlog.Backend{Name: "no file wall", Guarantee: vlog.GuaranteeDetects, Details: []string{
				"hook-only mode on a kernel without bpf-lsm: no wall inside the container; the tracepoints detect an undeclared operation after it happened, and strict mode kills the container and rolls its files back",
			}})
		}
		if err := be.attachNetAlways(g, rs, l); err != nil {
			return nil, err
		}
		o.tl.mark("cgroup-net")
		if err := be.attachUnix(g, rs, l); err != nil {
			return nil, err
		}
		o.tl.mark("cgroup-unix")
		if err := joinMemfd(); err != nil {
			return nil, err
		}
		var restorer Restorer
		if backup != nil {
			r := <-backup
			backup = nil
			if r.err != nil {
				return nil, fmt.Errorf("%w: pre-flight backup: %v (the container was not started)", ErrSetup, r.err)
			}
			restorer = r.r
		}
		o.tl.mark("backup taken")
		if err := logged(); err != nil {
			return nil, err
		}
		o.tl.mark("begun log")
		proc, err := launch.Adopt(c.Pid, g, plan)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		return &prepared{be: be, proc: proc, restorer: restorer, start: start}, nil
	}
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
