//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/observe"
	"github.com/klocklabs/klock/enforcer/oci"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
	"golang.org/x/sys/unix"
)

func systemResolve(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// Run runs one session to its end. See the package documentation.
func Run(ctx context.Context, o Options) (*Result, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	tl := newTimeline()
	o.tl = tl
	m := o.Manifest
	mode := m.Mode
	if o.Mode != "" {
		mode = o.Mode
	}
	id := o.ID
	if id == "" {
		id = NewID(time.Now())
	}
	resolve := o.Resolve
	if resolve == nil {
		resolve = systemResolve
	}

	if o.Backend == BackendObserve && mode != policy.ModePermissive {
		return nil, fmt.Errorf("%w: it puts no file wall up, and strict mode promises one. Fix: --mode permissive (to learn what the agent does), or --backend auto", ErrObserveStrict)
	}
	rs, err := policy.Compile(m)
	if err != nil {
		return nil, err
	}
	// host is the manifest as the host sees it: the same, but for a
	// container's session, whose paths the container names, and for a
	// session with a private /tmp, whose intents there name what no other
	// session reaches (no lease).
	host, hostRS := m, rs
	privTmp := usesPrivateTmp(o)
	if privTmp {
		host = withoutTmp(m)
		if hostRS, err = policy.Compile(host); err != nil {
			return nil, fmt.Errorf("%w: the manifest outside the private /tmp: %v", ErrSetup, err)
		}
	}
	if c := o.Container; c != nil {
		if host, err = c.hostManifest(m); err != nil {
			return nil, err
		}
		if hostRS, err = policy.Compile(host); err != nil {
			return nil, fmt.Errorf("%w: the manifest at the container's host paths: %v", ErrSetup, err)
		}
	}
	proxied := len(declaredHosts(rs)) > 0 && netWalled(rs, o.Backend) && o.Container == nil
	rs, err = rs.Resolve(startLookup(ctx, resolve, rs, proxied, log))
	if err != nil {
		return nil, fmt.Errorf("%w: %v (without a DNS proxy of the session's own, a declared host must resolve at session start)", ErrSetup, err)
	}
	// A declared host name is looked up by the agent too: through the
	// session's DNS proxy when the network is walled (the only name
	// server it may reach, answering the declared names only), else
	// through the system's name servers.
	nameServers := systemResolvers(resolvConf)
	if c := o.Container; c != nil {
		// The container resolves through its own resolv.conf (its
		// network namespace cannot reach a proxy on the host's loopback).
		nameServers = nil
		if conf, ok := c.ToHost(resolvConf); ok {
			nameServers = systemResolvers(conf)
		}
	}
	var dnsp *dnsScope
	if proxied {
		dir := os.TempDir()
		if m.Workdir != "" {
			if dir, err = StateDir(m.Workdir); err != nil {
				return nil, err
			}
		}
		upstreams := o.DNSUpstreams
		if len(upstreams) == 0 {
			for _, a := range nameServers {
				upstreams = append(upstreams, netip.AddrPortFrom(a, 53).String())
			}
		}
		if dnsp, err = startDNS(id, dir, rs, upstreams, log); err != nil {
			return nil, fmt.Errorf("%w: %v (a session that declares a host name and walls the network needs its DNS proxy; it never falls back to the open port 53)", ErrSetup, err)
		}
		defer dnsp.close()
		nameServers = []netip.Addr{dnsp.addr()}
	}
	if rs, err = rs.WithResolvers(nameServers); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	// The kernel names files by their resolved paths: /bin/sh runs as
	// /usr/bin/dash. Declarations through links root made follow them.
	if o.Container == nil {
		// (A container's links are its root file system's, which the
		// host's resolver does not see: its declarations stay at their
		// own paths.)
		if rs, err = rs.FollowLinks(launch.TrustedLinks(rs.Workdir)); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSetup, err)
		}
	}
	if mode == policy.ModeStrict && o.Snapshot == nil && !o.AllowDegraded {
		return nil, fmt.Errorf("%w: strict mode promises to roll back what a detected violation changed, but this session has no pre-flight backup. Fix: run with a backup, or pass --allow-degraded to accept that detected-only violations are killed but not undone", ErrDegraded)
	}

	// klock's own state under the workdir is hidden from the agent; it is checked
	// before anything (the backup first) writes there.
	var mask []string
	if m.Workdir != "" && o.Container != nil {
		// The runtime hides <workdir>/.klock inside the container
		// (klock-runtime's read-only tmpfs over it); klock's state is made
		// at its host path.
		if _, err := StateDir(host.Workdir); err != nil {
			return nil, err
		}
	} else if m.Workdir != "" {
		// Paths below the workdir are the agent's, links included, and
		// none is followed: a workdir that is itself a link would wall
		// nothing the agent then touches through its target.
		if target, err := os.Readlink(m.Workdir); err == nil {
			return nil, fmt.Errorf("%w: workdir %s is a symbolic link (to %s); name the directory itself in the manifest", ErrSetup, m.Workdir, target)
		}
		state, err := StateDir(m.Workdir)
		if err != nil {
			return nil, err
		}
		mask = append(mask, state)
	}
	// The leases of every intent, before anything is backed up or started:
	// two sessions share a workdir when what they change does not
	// conflict, and a strict kill rolls back only what no other session's
	// lease covers. Released after the rollback and the log.
	tl.mark("compiled")
	leases, err := acquireLeases(ctx, o, hostRS, id, log)
	if err != nil {
		return nil, err
	}
	tl.mark("leases")
	if leases != nil {
		defer leases.release()
		// Revoked or expired leases end the session as an interruption
		// from outside: killed, rolled back in strict mode, logged.
		var revoked context.CancelCauseFunc
		ctx, revoked = context.WithCancelCause(ctx)
		defer revoked(nil)
		leases.keepAlive(func(err error) { revoked(err) })
	}
	// Empty groups a killed klock left behind (its session's log says
	// INCOMPLETE): a minute is far beyond a group's first instant, the
	// only time a live session's group is empty.
	if gone, err := cgroup.SweepStale(time.Minute); len(gone) > 0 {
		log.Info("removed the empty session cgroups of a klock that was stopped", "groups", gone)
	} else if err != nil {
		log.Debug("sweep stale session cgroups", "error", err)
	}
	if o.Container == nil && walledNetNS(rs, o.Backend) {
		// The tables of a killed klock's sessions (their links went with
		// their namespaces).
		sweepWalls(log)
	}
	g, deleteGroup, err := sessionGroup(id, o.Container)
	if err != nil {
		return nil, err
	}
	defer deleteGroup()
	tl.mark("cgroup")
	var priv *privateTmp
	if privTmp {
		if o.User == nil {
			return nil, fmt.Errorf("%w: no agent user", launch.ErrBadSpec)
		}
		if priv, err = makePrivateTmp(id, o.User.UID, o.User.GID); err != nil {
			return nil, err
		}
		if !o.KeepTmp {
			// Deferred before the agent is reaped: Run returns once it is.
			defer func() {
				if err := priv.remove(); err != nil {
					log.Warn("cannot remove the session's private /tmp", "dir", priv.dir, "error", err)
				}
			}()
		}
		o.privTmp = true
	}
	if dnsp != nil {
		dnsp.setGroup(g)
	}

	startDir := o.Dir
	if startDir == "" {
		startDir = m.Workdir
	}
	logDir := o.LogDir
	if logDir == "" {
		logDir = DefaultLogDir(host.Workdir)
	}
	sessionDir := filepath.Join(logDir, id)
	// The session's log exists from its start, INCOMPLETE until the real
	// one replaces it: if klock is stopped (kill -9, a crash) the session
	// is still on record, with how to undo it. It is written while the
	// session is prepared, and the agent starts only once it is on disk.
	heldLeases, leaseWait := leases.vlog()
	var ctr *vlog.Container
	if o.Container != nil {
		ctr = o.Container.vlog()
	}
	begun := beginLog(sessionDir, vlog.Session{ID: id, Agent: m.Agent.ID, ManifestPath: o.ManifestPath, ManifestBytes: o.ManifestData, Mode: mode, Start: time.Now(),
		Leases: heldLeases, LeaseWait: leaseWait, Container: ctr})
	o.dns = dnsp
	prep := prepare
	if o.Container != nil {
		prep = prepareContainer(hostRS)
	}
	ready, err := prep(ctx, o, rs, id, g, leases.excludeFromBackup(ctx), launch.Spec{
		Ruleset: rs, Group: g, Args: o.Command, Env: o.Env, Dir: startDir, User: o.User,
		NewNetNS: ownNetNS(o.Backend), Mask: mask, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
		Stage2: o.Stage2, ResolvConf: dnsp.conf(), Binds: priv.bindList(),
	}, []string{startDir}, begun.wait, log)
	if err != nil {
		begun.discard()
		return nil, err
	}
	be, proc, restorer, start := ready.be, ready.proc, ready.restorer, ready.start
	tl.mark("started")
	tl.log(log, "session start")
	closeBackends := sync.OnceFunc(be.close)
	defer closeBackends()
	// Traffic before Started: whoever shows the session running can show
	// its traffic.
	if be.net != nil && o.Traffic != nil {
		n := be.net
		o.Traffic(func() (uint64, uint64) {
			c, err := n.counters()
			if err != nil {
				return 0, 0
			}
			return c.OutBytes, c.InBytes
		})
	}
	if o.Started != nil {
		o.Started(proc.Pid)
	}

	var backendsUsed []vlog.Backend
	switch {
	case o.Container != nil:
		backendsUsed = o.Container.backends(proc.Landlock, be.lsmSkipped)
	case o.Backend == BackendObserve:
		backendsUsed = append(backendsUsed, observeOnlyBackend())
	case be.lsms == nil:
		backendsUsed = append(backendsUsed, landlockBackend(proc.Landlock, be.lsmSkipped))
	}
	if o.Container == nil {
		backendsUsed = append(backendsUsed, seccompBackend(be.metaIoctlsRefused))
	}
	backendsUsed = append(backendsUsed, be.list...)
	if dnsp != nil {
		backendsUsed = append(backendsUsed, dnsp.backend())
	}
	if priv != nil {
		backendsUsed = append(backendsUsed, priv.backend(o.KeepTmp))
	}
	if restorer == nil {
		backendsUsed = append(backendsUsed, vlog.Backend{Name: "pre-flight backup", Guarantee: "unavailable",
			Details: []string{"no backup was taken: a detected-only violation is killed but not undone"}})
	}
	engOpts := []decide.Option{decide.WithLogger(slog.New(slog.DiscardHandler)), decide.WithWall(wallRefuses(be, proc.Landlock, o.Backend)),
		decide.WithNameServers(nameServers)}
	if mode == policy.ModePermissive && leases != nil {
		// An amendment is one more lease of this session's holder: never
		// made over another session's lease (KLIS-6 DLA "if no conflict
		// exists").
		gate := amendGate(ctx, leases.store, leases.holder, leases.age(), leases.ttl(), restorer, be.lsms != nil)
		if priv != nil {
			gate = privateTmpGate(gate)
		}
		engOpts = append(engOpts, decide.WithAmendGate(gate))
	}
	if restorer != nil {
		// A write through one name of a hard-linked file writes it by
		// every other name it had before the session.
		engOpts = append(engOpts, decide.WithOtherNames(otherNames(restorer, o.Container)))
	}
	eng := decide.New(rs, mode, engOpts...)
	s := &running{eng: eng, proc: proc, be: be, log: log, mode: mode, before: restorer,
		wall: &netWall{ngs: be.ngs, eng: eng}, stageExecs: o.Container.stageExecs(), ctr: o.Container, privTmp: priv != nil,
		forked: map[uint32]bool{}, entrants: map[uint32]int{}}
	if dnsp != nil {
		dnsp.attach(eng, s.wall)
		s.dnsRefused = dnsp.refused
	}
	stopBudget := s.watchBudget(be.net)
	s.loop(ctx)
	stopBudget()
	// What the agent sent just before it exited is judged too, before
	// the verdict.
	s.budgetAtEnd(be.net)
	if dnsp != nil {
		// The agent is gone: no query is left to answer.
		dnsp.close()
		s.drainDNS()
	}

	exit, _ := proc.Wait()
	tl.mark("agent ended")
	res := &Result{ID: id, Exit: exit, Killed: s.killed, Reason: s.reason, Interrupted: s.interrupted}
	if s.first != nil && s.first.Err != nil {
		res.Violation = s.first.Err
	}

	var rollback []vlog.RollbackOp
	if s.killed && restorer != nil && rollsBack(mode, s.interrupted, o.RollbackOnInterrupt) {
		rec := eng.Records()
		roots, changed := rollbackRoots(rs.Workdir, rec), changedPaths(rec)
		if c := o.Container; c != nil {
			roots, changed = c.hostScopes(roots), c.hostPaths(changed)
		}
		if priv != nil {
			// The private /tmp is not the host's: the backup holds
			// nothing of it, and it started empty.
			roots, changed = dropTmpScopes(roots), dropTmpPaths(changed)
		}
		rollback = rollBack(context.WithoutCancel(ctx), restorer, rollbackPlan{
			only: roots, changed: changed, leases: leases, log: log,
			self: intruder{session: id, agent: m.Agent.ID, violations: violationsByPath(rec, o.Container), notices: o.noticeDir()},
		})
		if c := o.Container; c != nil {
			c.nameInContainer(rollback)
		}
		if priv != nil {
			rollback = append(rollback, priv.empty()...)
		}
	}

	// The wall's counters, read before it comes down with the backends.
	var network *vlog.Network
	if be.net != nil {
		backendsUsed = append(backendsUsed, be.net.backend())
		if network, err = be.net.counters(); err != nil {
			log.Warn("the network wall's counters", "error", err)
		} else {
			network.Exceeded, _, _ = be.net.exceeded()
		}
	}
	// Every event was read before loop returned and the agent is gone: the
	// kernel side comes down while the log is built and written.
	torn := make(chan struct{})
	go func() {
		closeBackends()
		deleteGroup()
		close(torn)
	}()
	defer func() { <-torn }()
	heldLeases, leaseWait = leases.vlog() // with any that ended since
	vl := vlog.New(vlog.Session{
		ID: id, Agent: m.Agent.ID, ManifestPath: o.ManifestPath, ManifestBytes: o.ManifestData,
		Mode: mode, Start: start, Backends: backendsUsed, Leases: heldLeases, LeaseWait: leaseWait, Container: ctr,
		Network: network,
	})
	vl.AddRecords(eng.Records())
	// Another session's agent may have changed a file this one held: its
	// rollback said what it put back (notice.go).
	vl.Intrusions = takeNotices(o.noticeDir(), id)
	x := vlogExit(exit, s.killed, s.reason)
	if o.Container != nil && exit.Signal == 0 {
		x.Code = nil // a container's exit status is its runtime's, which reaps it
	}
	x.KilledAt = s.killedAt
	vl.Finish(time.Now(), x, rollback)
	tl.mark("log built")
	path, err := vl.Write(sessionDir)
	if err != nil {
		return res, fmt.Errorf("write verification log: %w", err)
	}
	tl.mark("log written")
	res.LogPath, res.Log = path, vl
	if o.Finished != nil && o.Container != nil {
		// The poststop hook waits for this, not for the backends'
		// teardown: what the container held is free once the log is on
		// disk (released again, harmlessly, when Run returns).
		if leases != nil {
			leases.release()
		}
		tl.mark("leases released")
		o.Finished(res)
	}
	tl.log(log, "session end")
	if mode == policy.ModePermissive && o.Container == nil {
		learnHostsFile(eng, hostsFile)
	}
	if mode == policy.ModePermissive {
		if learned, err := eng.Learned(m, o.ManifestData); err == nil {
			res.Learned = learned
		} else {
			log.Warn("cannot write the learned manifest", "error", err)
		}
	}
	return res, nil
}

// rollsBack says whether a killed session is rolled back: always in strict
// mode; in permissive mode only when asked (Options.RollbackOnInterrupt),
// since what kills a permissive session is an interruption from outside,
// and a learning run's work is what its operator wanted to keep.
func rollsBack(mode policy.Mode, interrupted, onInterrupt bool) bool {
	return mode != policy.ModePermissive || !interrupted || onInterrupt
}

// DefaultLogDir is where session logs go for a workdir.
func DefaultLogDir(workdir string) string {
	if workdir == "" {
		return "/var/lib/klock/sessions"
	}
	return filepath.Join(workdir, ".klock", "sessions")
}

func seccompBackend(metaIoctls bool) vlog.Backend {
	be := vlog.Backend{Name: "seccomp+namespaces", Guarantee: vlog.GuaranteeBlocks, Details: []string{
		"no capabilities, no_new_privs, non-root uid, own mount/pid/cgroup namespaces",
		"bpf, perf_event_open, ptrace, process_vm_*, io_uring_*, mount, kexec and module loading denied",
	}}
	if metaIoctls {
		be.Details = append(be.Details, "ioctls that change a file's metadata (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...) denied before the effect: the manifest lets the agent change no file")
	}
	return be
}

func vlogExit(e launch.Exit, killed bool, reason string) vlog.Exit {
	x := vlog.Exit{KilledByKlock: killed, Reason: reason}
	if e.Signal != 0 {
		// SIGKILL, as operators write it (the Go name is "killed").
		if x.Signal = unix.SignalName(e.Signal); x.Signal == "" {
			x.Signal = e.Signal.String()
		}
	} else {
		x.Code = vlog.ExitCode(e.Code)
	}
	return x
}

// running is the event loop of one live session.
type running struct {
	eng  *decide.Engine
	proc *launch.Process
	be   *backends
	log  *slog.Logger
	mode policy.Mode
	// before is the pre-flight backup: what existed when the agent
	// started (nil without one).
	before Restorer
	once   sync.Once
	// execs counts successful execs of the session's first process: the
	// first is klock's own stage 2 (the re-exec of /proc/self/exe), the
	// second is the agent. Nothing before it is the agent's doing.
	execs    int
	killed   bool
	killedAt time.Time
	// interrupted: the kill came from the context (Result.Interrupted).
	interrupted bool
	reason      string
	first       *decide.Verdict
	// warned counts the permissive warnings logged as they happen.
	warned int
	// wall serializes the cgroup-net rule updates (widen, DNS answers).
	wall *netWall
	// dnsRefused are the names the session's DNS proxy refused.
	dnsRefused <-chan event.Event
	// stageExecs: the execs of the first process before the agent's
	// history starts (Container.stageExecs).
	stageExecs int
	// ctr is the adopted container (nil: klock launched the agent).
	ctr *Container
	// privTmp: the agent's /tmp and /var/tmp are the session's own, which
	// started empty.
	privTmp bool
	// overBudget says once that the agent spent its egress budget;
	// budgetSpent, that it was acted on.
	overBudget  chan string
	budgetSpent bool
	// forked are the processes of the container whose fork the observer
	// reported (a child of a process already in it), and entrants those
	// that joined it from outside (runc exec and the engines' exec: the
	// runtime moves its own process in), pid → execs seen: their events
	// are the runtime's and stage 2's until stage 2 execs their command,
	// as the first process's are (agentStarted). Both only for an
	// adopted container; lostAny: after records were lost, a fork may
	// have been, so no process is taken for an entrant any more.
	forked   map[uint32]bool
	entrants map[uint32]int
	lostAny  bool
}

// maxLiveWarnings bounds the permissive mode's warnings on the terminal: a
// learning run of a build amends the scope a thousand times, and every
// amendment is in the verification log and its summary anyway.
const maxLiveWarnings = 20

// warn logs a permissive amendment or refusal while fewer than
// maxLiveWarnings were, then says once that the rest go to the log only.
func (s *running) warn(msg string, args ...any) {
	s.warned++
	switch {
	case s.warned <= maxLiveWarnings:
		s.log.Warn(msg, args...)
	case s.warned == maxLiveWarnings+1:
		s.log.Warn(fmt.Sprintf("more permissive amendments and refusals: not shown here, all in the verification log (%d shown)", maxLiveWarnings))
	}
}

func (s *running) kill(reason string, v *decide.Verdict) {
	s.once.Do(func() {
		s.killed, s.reason, s.first = true, reason, v
		s.killedAt = time.Now()
		if err := s.proc.Kill(); errors.Is(err, os.ErrNotExist) && s.ctr != nil {
			// The container ended before the kill (its runtime removed
			// its cgroup): there is nothing left to kill, the rollback
			// follows as for any kill.
			s.log.Info("the container had ended before the kill", "container", s.ctr.ID)
		} else if err != nil {
			s.log.Error("cgroup.kill failed", "error", err)
		}
	})
}

func (s *running) act(v decide.Verdict) {
	switch v.Action {
	case decide.ActionKill:
		if v.First {
			vv := v
			s.log.Error("killing the session", "violation", v.Message(), "blocked", v.Blocked)
			s.kill(v.Message(), &vv)
		}
	case decide.ActionAmended:
		s.warn("scope amended (permissive)", "lease", v.Lease)
		s.widen(v)
	case decide.ActionBlocked:
		s.warn("blocked (permissive)", "triple", v.Triple.String())
		s.widen(v)
	case decide.ActionLeaseDenied:
		s.warn("scope not amended: another session holds the lease", "why", v.LeaseError)
	}
}

// widen gives a permissive lease to the walls that can take it while the
// agent runs (cgroup-net, bpf-lsm), so a retry of the refused operation
// goes through; a Landlock ruleset cannot be widened after exec, so there
// the retry stays refused (and is logged under the lease).
func (s *running) widen(v decide.Verdict) {
	if v.Lease == nil {
		return
	}
	if v.Triple.Type == policy.ObjNet && s.be.ngs != nil {
		if err := s.wall.sync(); err != nil {
			s.log.Warn("cannot widen the network wall", "error", err)
		}
	}
	if v.Triple.Type == policy.ObjNet {
		if err := s.be.net.widen(v.Triple); err != nil {
			s.log.Warn("cannot widen the packet wall", "error", err)
		}
	}
	if v.Triple.Type == policy.ObjFile && s.be.ugs != nil {
		if err := s.be.ugs.Update(s.eng.Ruleset()); err != nil {
			s.log.Warn("cannot widen the AF_UNIX wall", "error", err)
		}
	}
	if v.Triple.Type != policy.ObjNet && s.be.lsms != nil {
		if err := s.be.lsms.Update(s.eng.Ruleset()); err != nil {
			s.log.Warn("cannot widen the bpf-lsm rules", "error", err)
		}
	}
}

// agentStarted reports whether ev belongs to the agent's history, counting
// the session process's execs to find where stage 2 ends.
func (s *running) agentStarted(ev event.Event) bool {
	if s.execs >= s.stageExecs {
		return true
	}
	if ev.PID == uint32(s.proc.Pid) && ev.Triple.Type == policy.ObjProc && ev.Errno == 0 && !ev.Blocked {
		s.execs++
	}
	return s.execs >= s.stageExecs
}

// forget takes an open that is not the agent's out of the kernel's count
// of repeats (observe.Watch.Forget): a later open of the same file, by
// the agent or by another process's stage 2, is reported on its own
// instead of being handed over at the end under this one. Repeats counted
// before the session got here cannot be told apart: they are judged, as
// at the end.
func (s *running) forget(r observe.Record) {
	if s.be.watch == nil {
		return
	}
	n, err := s.be.watch.Forget(r)
	if err != nil {
		s.log.Warn("observer: forget a counted open", "error", err)
		return
	}
	if n > 0 {
		ev := r.Event
		ev.Repeat = n - 1
		s.act(s.eng.Repeated(ev))
	}
}

// entering reports whether ev is a process's that joined the container
// from outside (no fork of it was seen: the runtime's exec) and is still
// in the runtime's and stage 2's hands: before its first exec, and in
// runtime mode until stage 2 (which must be that first exec, else its
// history starts there) execs the command. The command's exec and all
// that follows are judged as the agent's.
func (s *running) entering(ev event.Event) bool {
	if s.ctr == nil || ev.PID == uint32(s.proc.Pid) || s.forked[ev.PID] {
		return false
	}
	n, ok := s.entrants[ev.PID]
	if !ok && s.lostAny {
		s.forked[ev.PID] = true // its fork may be among the lost records
		return false
	}
	if ev.Triple.Type == policy.ObjProc && ev.Errno == 0 && !ev.Blocked {
		n++
		if n >= s.stageExecs || s.ctr.WallFile != "" && ev.Triple.Path != oci.Stage2Path {
			delete(s.entrants, ev.PID)
			s.forked[ev.PID] = true // from here on, the agent's
			return false
		}
	}
	s.entrants[ev.PID] = n
	return true
}

func (s *running) record(r observe.Record) {
	switch r.Kind {
	case observe.KindFork:
		if s.ctr != nil {
			s.forked[r.Event.PID] = true
		}
	case observe.KindExit:
		delete(s.forked, r.Event.PID)
		delete(s.entrants, r.Event.PID)
	case observe.KindEvent:
		if !s.agentStarted(r.Event) || s.entering(r.Event) {
			s.forget(r)
			return
		}
		if s.be.lsms != nil && r.Event.Triple.Type == policy.ObjProc {
			// bpf-lsm decides and reports execs; the tracepoint's only
			// delimit the agent's history.
			return
		}
		ev := r.Event
		if r.ReplaceUnknown && s.renamedOntoNothing(ev.Extra.Path) {
			ev.Extra.Predicate = policy.Provides
		}
		socketAbsent(&ev)
		v := s.eng.Observe(ev)
		s.act(v)
		if s.mode == policy.ModeStrict && v.Action == decide.ActionAllow && r.MetadataUnverified {
			s.kill(fmt.Sprintf("klock could not verify which file a %s changed (the agent moved its directory or the name before klock resolved %q; it resolved to %s): metadata changes have no kernel wall, so strict mode fails closed",
				r.Event.Syscall, r.Arg, r.Event.Triple.Path), nil)
		}
	case observe.KindLost:
		s.lostAny = true
		s.act(s.eng.Lost(r.Lost))
	case observe.KindUnobserved:
		if r.Event.Errno == 0 && s.mode == policy.ModeStrict {
			s.kill(fmt.Sprintf("the agent used %s, which the tracepoint backend cannot observe: strict mode fails closed", r.Event.Syscall), nil)
		}
	}
}

// renamedOntoNothing says whether a rename (the tracepoint backend cannot
// tell whether it replaced its destination, and reports MUTATES dst)
// landed where nothing was: dst is not the session's own file and the
// pre-flight backup covers it and holds nothing there. Then the rename
// made dst, as bpf-lsm, which sees it, reports: PROVIDES. Residual: a file
// another process made at dst during the session, which the rename
// replaced, is judged as a create.
func (s *running) renamedOntoNothing(dst string) bool {
	if s.before == nil || dst == "" || s.eng.Created(dst) {
		return false
	}
	if s.privTmp && policy.InTmp(dst) {
		// The private /tmp started empty and only the session reaches
		// it: what the session did not make there was not there.
		return true
	}
	if s.ctr != nil {
		h, ok := s.ctr.ToHost(dst)
		if !ok {
			return false
		}
		dst = h
	}
	known, existed := s.before.Existed(dst)
	return known && !existed
}

// loop feeds events to the engine until the agent has exited and every
// event it caused has been read.
func (s *running) loop(ctx context.Context) {
	var obsCh <-chan observe.Record
	if s.be.watch != nil {
		obsCh = s.be.watch.Records()
	}
	var netCh, lsmCh <-chan event.Event
	var netLost, lsmLost <-chan event.Lost
	if s.be.ngs != nil {
		netCh, netLost = s.be.ngs.Events(), s.be.ngs.Lost()
	}
	// The cgroup AF_UNIX wall's refusals are cgroup programs' too: they
	// share the network's channels' handling (and drain).
	var unixCh <-chan event.Event
	var unixLost <-chan event.Lost
	if s.be.ugs != nil {
		unixCh, unixLost = s.be.ugs.Events(), s.be.ugs.Lost()
	}
	if s.be.lsms != nil {
		lsmCh, lsmLost = s.be.lsms.Events(), s.be.lsms.Lost()
	}
	for {
		select {
		case r := <-obsCh:
			s.record(r)
		case ev := <-netCh:
			s.act(s.eng.Observe(ev))
		case l := <-netLost:
			s.act(s.eng.Lost(l))
		case ev := <-unixCh:
			socketAbsent(&ev)
			s.act(s.eng.Observe(ev))
		case l := <-unixLost:
			s.act(s.eng.Lost(l))
		case ev := <-lsmCh:
			socketAbsent(&ev)
			s.act(s.eng.Observe(ev))
		case l := <-lsmLost:
			s.act(s.eng.Lost(l))
		case ev := <-s.dnsRefused:
			s.act(s.eng.Observe(ev))
		case why := <-s.overBudget:
			s.overBudgetAt(why)
		case <-ctx.Done():
			s.interrupted = !s.killed
			s.kill("ended from outside: "+context.Cause(ctx).Error(), nil)
			ctx = context.Background()
		case <-s.proc.Done():
			s.drain(obsCh, netCh, netLost, unixCh, unixLost)
			s.drainLSM()
			return
		}
	}
}

// drainLSM delivers the bpf-lsm decisions still in flight after the agent
// exited, then its loss count.
func (s *running) drainLSM() {
	if s.be.lsms == nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case ev := <-s.be.lsms.Events():
			socketAbsent(&ev)
			s.act(s.eng.Observe(ev))
			continue
		case l := <-s.be.lsms.Lost():
			s.act(s.eng.Lost(l))
			continue
		default:
		}
		if s.be.lsms.Idle() && len(s.be.lsms.Events()) == 0 {
			break
		}
		if time.Now().After(deadline) {
			s.log.Warn("bpf-lsm events still in flight after 5s")
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Opens the kernel counted instead of reporting again.
	evs, err := s.be.lsms.Repeats()
	if err != nil {
		s.log.Warn("bpf-lsm repeats", "error", err)
	}
	for _, ev := range evs {
		s.act(s.eng.Repeated(ev))
	}
	s.be.lsms.Sync()
	for {
		select {
		case l := <-s.be.lsms.Lost():
			s.act(s.eng.Lost(l))
		default:
			return
		}
	}
}

// drain reads what is still in flight after the agent exited: the observer's
// and the walls' Syncs guarantee every record produced before them is
// delivered.
func (s *running) drain(obsCh <-chan observe.Record, netCh <-chan event.Event, netLost <-chan event.Lost, unixCh <-chan event.Event, unixLost <-chan event.Lost) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if s.be.obs != nil {
		if err := s.be.obs.Sync(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			s.log.Warn("observer sync", "error", err)
		}
	}
	// The network and AF_UNIX walls' refusals still in their rings.
	if s.be.ng != nil {
		if err := s.be.ng.Sync(ctx); err != nil {
			s.log.Warn("cgroup-net sync", "error", err)
		}
	}
	if s.be.ug != nil {
		if err := s.be.ug.Sync(ctx); err != nil {
			s.log.Warn("cgroup-unix sync", "error", err)
		}
	}
	cancel()
	for {
		select {
		case r := <-obsCh:
			s.record(r)
		case ev := <-netCh:
			s.act(s.eng.Observe(ev))
		case l := <-netLost:
			s.act(s.eng.Lost(l))
		case ev := <-unixCh:
			socketAbsent(&ev)
			s.act(s.eng.Observe(ev))
		case l := <-unixLost:
			s.act(s.eng.Lost(l))
		default:
			s.repeats()
			return
		}
	}
}

// repeats adds the opens the observer's kernel side counted instead of
// reporting again; after Sync, every first record they repeat was read.
// They count under the verdict of that first record (decide.Repeated), not
// judged again against the end of the session.
func (s *running) repeats() {
	if s.be.watch == nil {
		return
	}
	recs, err := s.be.watch.Repeats()
	if err != nil {
		s.log.Warn("observer repeats", "error", err)
	}
	for _, r := range recs {
		if r.Kind != observe.KindEvent || !s.agentStarted(r.Event) {
			continue
		}
		s.act(s.eng.Repeated(r.Event))
	}
}

// drainDNS decides the refusals still queued once the proxy stopped.
func (s *running) drainDNS() {
	for {
		select {
		case ev := <-s.dnsRefused:
			s.act(s.eng.Observe(ev))
		default:
			return
		}
	}
}
