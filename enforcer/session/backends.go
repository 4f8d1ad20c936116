//go:build linux

package session

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/lsm"
	"github.com/klocklabs/klock/enforcer/netguard"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/unixguard"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// backends are the kernel mechanisms put on one session cgroup.
type backends struct {
	obs   *observe.Observer
	watch *observe.Watch
	ng    *netguard.Guard
	ngs   *netguard.Session
	lsm   *lsm.LSM
	lsms  *lsm.Session // nil: Landlock walls the files
	ug    *unixguard.Guard
	ugs   *unixguard.Session // nil: no cgroup AF_UNIX wall (bpf-lsm decides, or the kernel has no hooks)
	list  []vlog.Backend
	// ownObs, ownNG, ownLSM: the session loaded them (not Shared) and
	// closes them.
	ownObs, ownNG, ownLSM, ownUG bool
	// lsmSkipped says why BackendAuto did not use bpf-lsm.
	lsmSkipped string

	// metaIoctlsRefused: the seccomp filter refuses metadata ioctls
	// (launch.Spec.DenyMetaIoctls).
	metaIoctlsRefused bool

	allowDegraded bool
	log           *slog.Logger

	// net is the session's own network namespace's wall and relays (nil
	// without NET intents, observe-only, or a container).
	net *sessionNet

	// mntns are the agent's mount namespaces (an adopted container's, or
	// klock run's stage 2's and, started over, its successor's), held
	// while the observer may resolve their paths (observe.InOwnRoot,
	// Watch.InRoot).
	mntns []*os.File
}

// attachLSM puts the BPF-LSM wall on g when the choice allows and it
// works; otherwise the session uses Landlock (BackendAuto, the reason kept
// for the log) or refuses (BackendLSM).
func (b *backends) attachLSM(g *cgroup.Group, rs *policy.Ruleset, loads *loading, choice Backend, opts ...lsm.AttachOption) error {
	if choice == BackendLandlock || choice == BackendObserve {
		return nil
	}
	r := loads.lsmBackend()
	l, own, err := r.l, r.own, r.err
	if err == nil {
		// Permissive mode keeps the wall (as with Landlock): a refused
		// operation is reported, the scope amended (Session.Update), and
		// the agent's retry goes through.
		b.lsms, err = l.Attach(g.ID, rs, opts...)
		if err != nil && own {
			l.Close()
		}
	}
	if err != nil {
		if choice == BackendLSM {
			return fmt.Errorf("%w: --backend bpf-lsm: %v. Fix: boot with bpf in lsm= (klock doctor says what is missing), or use --backend auto", ErrDegraded, err)
		}
		b.lsmSkipped = err.Error()
		return nil
	}
	b.lsm, b.ownLSM = l, own
	b.list = append(b.list, vlog.Backend{Name: "bpf-lsm", Guarantee: vlog.GuaranteeBlocks, Details: []string{
		"LSM programs on file_open, bprm_check_security, path_mknod/mkdir/symlink/link/unlink/rmdir/rename/truncate/chmod/chown, inode_setattr (times), inode_setxattr/removexattr, unix_stream_connect/unix_may_send and socket_connect (AF_UNIX) decide in the kernel, before the effect, from the session's rules (io_uring operations included)",
		"file_ioctl decides the ioctls that change a file's metadata (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...) as MUTATES of the descriptor's file; mmap_file and file_mprotect decide executable mappings of files (the dynamic loader run directly, dlopen) by the PROC rules and the baseline's library directories: both before the effect",
		"objects are named by the kernel's own path; an object with no reachable name is refused",
		"no Landlock wall: the LSM decides every file operation with a path hook",
	}})
	return nil
}

// degrade records a backend the session runs without, or refuses
// (ErrDegraded) when the operator did not allow degraded enforcement.
func (b *backends) degrade(what, lost, fix string, err error) error {
	if !b.allowDegraded {
		return fmt.Errorf("%w: %s is unavailable (%v): %s. Fix: %s; or pass --allow-degraded to run without it", ErrDegraded, what, err, lost, fix)
	}
	b.log.Warn("running degraded", "backend", what, "lost", lost, "error", err)
	b.list = append(b.list, vlog.Backend{Name: what, Guarantee: "unavailable", Details: []string{err.Error(), "lost: " + lost}})
	return nil
}

// attachObserver watches g with the observer r (loaded, or taken from
// Shared), or degrades. Call it before the session's first process exists:
// the event loop counts that process's execs from the first.
// nsHelper has the observer open the agent's mount namespace with
// klock-stage2 (stage2, or the one beside the executable: launch.OpenHelper)
// rather than by re-executing klockd, whose package initialisation costs
// several times that small binary's whole start, once every session.
func nsHelper(stage2 string) observe.WatchOption {
	return observe.Helper(func() *os.File { return launch.OpenHelper(stage2) })
}

func (b *backends) attachObserver(g *cgroup.Group, r loadedObserver, dirs []string, extra ...observe.WatchOption) error {
	watchOpts := append([]observe.WatchOption{observe.KnownDirs(dirs...)}, extra...)
	if b.lsms != nil {
		// bpf-lsm decides and reports file, exec and raw-socket
		// operations, cgroup-net (ReportAllowed) the network ones: the
		// observer only delimits the agent's history, with no syscall
		// tracepoint for this session.
		watchOpts = append(watchOpts, observe.ProcessEvents())
	}
	err := r.err
	if err == nil {
		b.obs, b.ownObs = r.o, r.own
		b.watch, err = r.o.Watch(g.ID, watchOpts...)
	}
	if err != nil {
		if b.obs != nil && b.ownObs {
			b.obs.Close()
		}
		b.obs, b.watch = nil, nil
		return b.degrade("tracepoints", "operations Landlock cannot wall (its residuals) go undetected and the verification log is incomplete",
			"run as root on a kernel with BTF and raw tracepoints (klock doctor says which)", err)
	}
	obs := r.o
	details := []string{"raw syscall tracepoints filtered by the session cgroup id; detects what the walls do not block",
		"kernel paths: opens and f* calls name the object the kernel acted on (dentry walk at syscall exit)"}
	if obs.CtimeHooks() == 0 {
		// Not silent: on this kernel a path-based chmod/chown/utimes/xattr
		// is judged by its name string, which a symlink swap can change.
		why := "no BPF trampolines for the fentry programs that stand in for them"
		if err := obs.MetadataHooksErr(); err != nil {
			why = "the fentry programs that stand in for them did not load or attach (" + err.Error() + ")"
		}
		details = append(details, "degraded: no ctime tracepoints on this kernel (< 6.13), and "+why+": path-based metadata changes are judged by their name, not by the inode the kernel changed; a name that cannot be verified (relative, or through a symlink) kills a strict session")
	} else {
		details = append(details, "kernel paths: path-based metadata changes are checked against the inode the kernel changed (ctime tracepoints; before 6.13, fentry on notify_change and the xattr setters)")
	}
	details = append(details, "ioctls that change a file's metadata (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...) are reported as MUTATES of the descriptor's file, after the effect, where seccomp lets them through")
	if b.lsms != nil {
		details = []string{"raw syscall tracepoints filtered by the session cgroup id, reporting only what bpf-lsm does not decide: io_uring set-up, 32-bit syscalls, and the process events that delimit the agent's history (detects and kills)"}
	}
	b.list = append(b.list, vlog.Backend{Name: "tracepoints", Guarantee: vlog.GuaranteeDetects, Details: details})
	return nil
}

// attachNet walls g's network: its own namespace when the ruleset declares
// no NET intent, else the guard l loads (or Shared's), or degrades. The
// cgroup programs only need to be attached before the agent runs.
func (b *backends) attachNet(g *cgroup.Group, rs *policy.Ruleset, l *loading, choice Backend) error {
	if choice == BackendObserve {
		b.list = append(b.list, observeOnlyNetwork())
		return nil
	}
	if launch.NeedsNetNS(rs) {
		b.list = append(b.list, vlog.Backend{Name: "netns", Guarantee: vlog.GuaranteeBlocks,
			Details: []string{"no NET intent declared: the agent has its own network namespace with only loopback"}})
		return nil
	}
	return b.attachNetAlways(g, rs, l)
}

// attachNetAlways puts cgroup-net on g whatever the ruleset declares (a
// container's network namespace is its runtime's: no NET intent means
// nothing reachable, loopback included), or degrades.
func (b *backends) attachNetAlways(g *cgroup.Group, rs *policy.Ruleset, l *loading) error {
	r := l.guard()
	err := r.err
	if err == nil {
		b.ng, b.ownNG = r.g, r.own
		var opts []netguard.AttachOption
		if b.lsms != nil {
			opts = append(opts, netguard.ReportAllowed()) // no syscall tracepoint reports them
		}
		b.ngs, err = r.g.Attach(g, rs, opts...)
	}
	if err != nil {
		if b.ng != nil && b.ownNG {
			b.ng.Close()
		}
		b.ng, b.ngs = nil, nil
		return b.degrade("cgroup-net", "undeclared connections, datagrams, binds and raw sockets are not blocked",
			"run as root on a kernel with cgroup BPF (CONFIG_CGROUP_BPF)", err)
	}
	b.list = append(b.list, vlog.Backend{Name: "cgroup-net", Guarantee: vlog.GuaranteeBlocks,
		Details: []string{"connect4/6, sendmsg4/6, bind4/6 and sock_create programs on the session cgroup"}})
	return nil
}

// joinedNet takes the packet wall setupNet built around the agent's
// namespace, or degrades when it failed (err): without the wall the
// namespace has no way out, so its declared peers are unreachable (closed,
// never open).
func (b *backends) joinedNet(n *sessionNet, err error) error {
	if err != nil {
		return b.degrade("netwall", "the agent's network namespace has no way out: its declared peers are unreachable, and no packet wall counts or budgets its traffic",
			"run as root on a kernel with veth and nftables (klock doctor says what is missing)", err)
	}
	b.net = n
	return nil
}

func (b *backends) close() {
	b.net.close()
	if b.lsms != nil {
		b.lsms.Close()
	}
	if b.lsm != nil && b.ownLSM {
		b.lsm.Close()
	}
	if b.watch != nil {
		b.watch.Close()
	}
	if b.obs != nil && b.ownObs {
		b.obs.Close()
	}
	if b.ngs != nil {
		b.ngs.Close()
	}
	if b.ng != nil && b.ownNG {
		b.ng.Close()
	}
	if b.ugs != nil {
		b.ugs.Close()
	}
	if b.ug != nil && b.ownUG {
		b.ug.Close()
	}
	for _, f := range b.mntns {
		f.Close()
	}
}

// observeInAgentRoot has the observer resolve the session's paths in the
// mount namespace of stage 2 (pid), which becomes the agent: stage 2
// mounts the private /tmp and hides paths there, so the same name is
// another file in klock's own namespace, and a process that has exited
// before the observer reads its record must be named by the agent's mount
// table, never klock's (observe's doc, "Races, honestly"). A stage 2
// already gone is started over by Release, which calls this again.
func (b *backends) observeInAgentRoot(pid int) error {
	if b.watch == nil {
		return nil
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: the agent's mount namespace: %v", ErrSetup, err)
	}
	b.mntns = append(b.mntns, ns)
	b.watch.InLiveRoot(ns, pid) // stage 2: our child, at the namespace's root
	return nil
}

// landlockBackend describes the wall the launcher built; skipped says why
// bpf-lsm was not used instead (empty when it was not tried).
func landlockBackend(p *launch.LandlockPlan, skipped string) vlog.Backend {
	be := vlog.Backend{Name: "landlock", Guarantee: vlog.GuaranteeBlocks}
	if skipped != "" {
		be.Details = append(be.Details, "bpf-lsm not used: "+skipped)
	}
	if p == nil {
		return be
	}
	be.Details = append(be.Details, fmt.Sprintf("Landlock ABI %d, %d rules; %d residual difference(s) covered by detection", p.ABI, len(p.Rules), len(p.Residuals)))
	for _, r := range p.Residuals {
		be.Details = append(be.Details, "residual: "+r.String())
	}
	return be
}

// observeOnlyBackend describes the file wall of a BackendObserve session:
// there is none, and the log says so first.
func observeOnlyBackend() vlog.Backend {
	return vlog.Backend{Name: "observe-only", Guarantee: vlog.GuaranteeRecords, Details: []string{
		"--backend observe: no file wall (no Landlock, no bpf-lsm); every file and exec operation went ahead and the tracepoints recorded it",
		"permissive mode only: a learning run (--learn) that sees the whole run where the file wall cannot be widened while the agent runs",
	}}
}

// ownNetNS says whether the agent gets a network namespace of its own:
// always, except in an observe-only session, whose network is recorded,
// not walled. Without NET intents it has only loopback; with them, the
// packet wall joins it to the host (walledNetNS).
func ownNetNS(choice Backend) bool {
	return choice != BackendObserve
}

// walledNetNS says whether the agent's own namespace is joined to the
// host through netwall: NET intents declared, and a namespace of its own.
func walledNetNS(rs *policy.Ruleset, choice Backend) bool {
	return ownNetNS(choice) && !launch.NeedsNetNS(rs)
}

// netWalled says whether the session needs cgroup-net: NET intents to
// wall, and a wall at all.
func netWalled(rs *policy.Ruleset, choice Backend) bool {
	return !launch.NeedsNetNS(rs) && choice != BackendObserve
}

// observeOnlyNetwork is the log's entry for an observe-only session's
// network: a learning run must reach what the agent needs, or --learn
// would see only the failed name lookups of an empty namespace.
func observeOnlyNetwork() vlog.Backend {
	return vlog.Backend{Name: "network", Guarantee: vlog.GuaranteeRecords, Details: []string{
		"observe-only: no network namespace and no cgroup-net wall: every connection, datagram, bind and raw socket goes ahead and is recorded (tracepoints)",
	}}
}

// wallRefuses tells the decision engine which refusals were a wall of
// klock's and not the file's owner and mode: every refusal bpf-lsm
// reports but a hard link's (it decides from the session's rules), and a refusal the
// tracepoints saw where the Landlock plan grants nothing for it. A
// declared operation refused that way makes the verdict REFUSED, never
// CLEAN. An observe-only session has no wall.
func wallRefuses(b *backends, plan *launch.LandlockPlan, choice Backend) func(event.Event, policy.Triple) bool {
	switch {
	case choice == BackendObserve:
		return nil
	case b.lsms != nil:
		// bpf-lsm decides from the same rules, so a refusal of a declared
		// operation is its failure, except a hard link: both its names
		// may be declared and the link still refused, because it would
		// give the inode rights its first name does not have (a
		// CONSUMES-only file made writable). That is the wall working.
		return func(ev event.Event, _ policy.Triple) bool {
			return ev.Source == event.SourceLSM && ev.Syscall != "path_link"
		}
	case plan != nil:
		return func(ev event.Event, t policy.Triple) bool {
			return ev.Source == event.SourceCgroupUnix || ev.Source == event.SourceTracepoint && plan.Refuses(t, ev.Syscall)
		}
	}
	return nil
}
