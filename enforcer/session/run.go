//go:build linux

package session

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/decide"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/policy"
)

// Run runs one session to its end. See the package documentation.
//
// Its phases, in order: the manifest compiled for the kernel and for the
// host (newRunner), names, leases, cgroup and private /tmp (setup), the
// walls and the agent (start), the event loop (serve), the rollback and
// the verification log (finish). What a phase holds is released by the
// runner's cleanups, last first, when Run returns.
func Run(ctx context.Context, o Options) (*Result, error) {
	r, err := newRunner(o)
	if err != nil {
		return nil, err
	}
	defer r.cleanup()
	r.startLoading()
	if ctx, err = r.setup(ctx); err != nil {
		return nil, err
	}
	ready, err := r.start(ctx)
	if err != nil {
		return nil, err
	}
	s := r.serve(ctx, ready)
	return r.finish(ctx, ready, s)
}

// runner is one session from its manifest to its log: what the phases of
// Run hand each other.
type runner struct {
	o    Options
	log  *slog.Logger
	tl   *timeline
	m    *policy.Manifest
	mode policy.Mode
	id   string
	// rs is the ruleset the walls and the engine enforce; host and hostRS
	// are the manifest as the host sees it (leases, backup, rollback): the
	// same, but for a container's session, whose paths the container
	// names, and for a session with a private /tmp, whose intents there
	// name what no other session reaches.
	rs, hostRS  *policy.Ruleset
	host        *policy.Manifest
	privTmp     bool
	nameServers []netip.Addr
	dnsp        *dnsScope
	mask        []string
	leases      *leasing
	g           *cgroup.Group
	// stallGroup is g for freezeAgent, which the leases' keep-alive
	// goroutine calls (it starts before g is made).
	stallGroup  atomic.Pointer[cgroup.Group]
	deleteGroup func()
	priv        *privateTmp
	sessionDir  string
	ctr         *vlog.Container
	ev          emitter
	// cleanups run last first when Run returns (the defers of one long
	// function, spread over the phases).
	cleanups []func()
}

func (r *runner) defer_(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *runner) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// newRunner fills in Options' defaults and compiles the manifest; nothing
// is held yet.
func newRunner(o Options) (*runner, error) {
	r := &runner{o: o, log: o.Logger, tl: newTimeline(), m: o.Manifest, id: o.ID}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.o.tl = r.tl
	r.mode = r.m.Mode
	if o.Mode != "" {
		r.mode = o.Mode
	}
	if r.id == "" {
		r.id = NewID(time.Now())
	}
	r.ev = newEmitter(o, r.id, r.m.Agent.ID, r.mode)
	if o.Backend == BackendObserve && r.mode != policy.ModePermissive {
		return nil, fmt.Errorf("%w: it puts no file wall up, and strict mode promises one. Fix: --mode permissive (to learn what the agent does), or --backend auto", ErrObserveStrict)
	}
	var err error
	if r.rs, err = policy.Compile(r.m); err != nil {
		return nil, err
	}
	return r, r.compileHost()
}

// compileHost compiles the manifest as the host sees it (runner.host).
func (r *runner) compileHost() error {
	var err error
	r.host, r.hostRS = r.m, r.rs
	r.privTmp = usesPrivateTmp(r.o)
	if r.privTmp {
		r.host = withoutTmp(r.m)
		if r.hostRS, err = policy.Compile(r.host); err != nil {
			return fmt.Errorf("%w: the manifest outside the private /tmp: %v", ErrSetup, err)
		}
	}
	if c := r.o.Container; c != nil {
		if r.host, err = c.hostManifest(r.m); err != nil {
			return err
		}
		if r.hostRS, err = policy.Compile(r.host); err != nil {
			return fmt.Errorf("%w: the manifest at the container's host paths: %v", ErrSetup, err)
		}
	}
	return nil
}

// startLoading starts loading the kernel backends the session will need
// (in the embedded path, BPF loads of tens of milliseconds) beside its
// setup; prepare takes them, or they are discarded when Run returns.
func (r *runner) startLoading() {
	l := startLoading(r.o.Backends, needs(r.rs, r.o.Backend, r.o.Container != nil))
	r.o.loads = l
	r.defer_(l.unclaimed)
}

// setup does what must hold before anything is backed up or started:
// the names resolved, klock's state checked, the leases taken, the cgroup
// and the private /tmp made. The context it returns ends when the leases
// are revoked.
func (r *runner) setup(ctx context.Context) (context.Context, error) {
	if err := r.resolveNames(ctx); err != nil {
		return ctx, err
	}
	if r.mode == policy.ModeStrict && r.o.Snapshot == nil && !r.o.AllowDegraded {
		return ctx, fmt.Errorf("%w: strict mode promises to roll back what a detected violation changed, but this session has no pre-flight backup. Fix: run with a backup, or pass --allow-degraded to accept that detected-only violations are killed but not undone", ErrDegraded)
	}
	if err := r.checkState(); err != nil {
		return ctx, err
	}
	r.tl.mark("compiled")
	ctx, err := r.takeLeases(ctx)
	if err != nil {
		return ctx, err
	}
	r.tl.mark("leases")
	r.sweepStale()
	if err := r.makeGroup(); err != nil {
		return ctx, err
	}
	r.tl.mark("cgroup")
	if err := r.makePrivateTmp(); err != nil {
		return ctx, err
	}
	if r.dnsp != nil {
		r.dnsp.setGroup(r.g)
	}
	return ctx, nil
}

// resolveNames resolves the declared hosts, starts the session's DNS
// proxy when the network is walled, and follows root's links in the
// declarations: the kernel names files by their resolved paths (/bin/sh
// runs as /usr/bin/dash).
func (r *runner) resolveNames(ctx context.Context) error {
	resolve := r.o.Resolve
	if resolve == nil {
		resolve = systemResolve
	}
	proxied := len(declaredHosts(r.rs)) > 0 && netWalled(r.rs, r.o.Backend) && r.o.Container == nil
	var err error
	r.rs, err = r.rs.Resolve(startLookup(ctx, resolve, r.rs, proxied, r.log))
	if err != nil {
		return fmt.Errorf("%w: %v (without a DNS proxy of the session's own, a declared host must resolve at session start)", ErrSetup, err)
	}
	r.nameServers = r.agentNameServers()
	if proxied {
		if err := r.startDNS(); err != nil {
			return err
		}
	}
	if r.rs, err = r.rs.WithResolvers(r.nameServers); err != nil {
		return fmt.Errorf("%w: %v", ErrSetup, err)
	}
	if r.o.Container == nil {
		// (A container's links are its root file system's, which the
		// host's resolver does not see: its declarations stay at their
		// own paths.)
		if r.rs, err = r.rs.FollowLinks(launch.TrustedLinks(r.rs.Workdir)); err != nil {
			return fmt.Errorf("%w: %v", ErrSetup, err)
		}
	}
	return nil
}

// agentNameServers are where the agent looks a declared host name up
// without a proxy of the session's: the system's name servers, or a
// container's own resolv.conf (its network namespace cannot reach a proxy
// on the host's loopback).
func (r *runner) agentNameServers() []netip.Addr {
	c := r.o.Container
	if c == nil {
		return systemResolvers(resolvConf)
	}
	if conf, ok := c.ToHost(resolvConf); ok {
		return systemResolvers(conf)
	}
	return nil
}

// startDNS starts the session's DNS proxy, the only name server the
// agent of a walled network may reach, answering the declared names only.
func (r *runner) startDNS() error {
	dir := os.TempDir()
	if r.m.Workdir != "" {
		var err error
		if dir, err = StateDir(r.m.Workdir); err != nil {
			return err
		}
	}
	upstreams := r.o.DNSUpstreams
	if len(upstreams) == 0 {
		for _, a := range r.nameServers {
			upstreams = append(upstreams, netip.AddrPortFrom(a, 53).String())
		}
	}
	dnsp, err := startDNS(r.id, dir, r.rs, upstreams, r.log)
	if err != nil {
		return fmt.Errorf("%w: %v (a session that declares a host name and walls the network needs its DNS proxy; it never falls back to the open port 53)", ErrSetup, err)
	}
	r.dnsp = dnsp
	r.defer_(dnsp.close)
	r.nameServers = []netip.Addr{dnsp.addr()}
	return nil
}

// checkState checks klock's own state under the workdir, hidden from the
// agent, before anything (the backup first) writes there.
func (r *runner) checkState() error {
	m := r.m
	if m.Workdir == "" {
		return nil
	}
	if r.o.Container != nil {
		// The runtime hides <workdir>/.klock inside the container
		// (klock-runtime's read-only tmpfs over it); klock's state is made
		// at its host path.
		_, err := StateDir(r.host.Workdir)
		return err
	}
	// Paths below the workdir are the agent's, links included, and none
	// is followed: a workdir that is itself a link would wall nothing the
	// agent then touches through its target.
	if target, err := os.Readlink(m.Workdir); err == nil {
		return fmt.Errorf("%w: workdir %s is a symbolic link (to %s); name the directory itself in the manifest", ErrSetup, m.Workdir, target)
	}
	state, err := StateDir(m.Workdir)
	if err != nil {
		return err
	}
	r.mask = append(r.mask, state)
	return nil
}

// takeLeases takes the lease of every intent before anything is backed
// up or started: two sessions share a workdir when what they change does
// not conflict, and a strict kill rolls back only what no other session's
// lease covers. They are released after the rollback and the log; revoked
// or expired leases end the session as an interruption from outside
// (killed, rolled back in strict mode, logged) through the returned
// context.
func (r *runner) takeLeases(ctx context.Context) (context.Context, error) {
	leases, err := acquireLeases(ctx, r.o, r.hostRS, r.id, r.log)
	if err != nil {
		return ctx, err
	}
	r.leases = leases
	if leases == nil {
		return ctx, nil
	}
	r.defer_(leases.release)
	ctx, revoked := context.WithCancelCause(ctx)
	r.defer_(func() { revoked(nil) })
	leases.notify = r.o.LeaseStall
	if r.mode == policy.ModePermissive {
		leases.onStall = r.freezeAgent
	} else {
		leases.killEarly = true
	}
	leases.keepAlive(func(err error) { revoked(err) })
	return ctx, nil
}

// freezeAgent freezes (true) or thaws the agent's cgroup, and says
// whether it is frozen. Nothing to freeze before the agent's group is
// made; a failure is logged and leaves the agent running (a permissive
// session promises a record, not a wall).
func (r *runner) freezeAgent(freeze bool) bool {
	g := r.stallGroup.Load()
	if g == nil {
		return false
	}
	op, do := "thaw", g.Thaw
	if freeze {
		op, do = "freeze", g.Freeze
	}
	if err := do(); err != nil {
		r.log.Warn("cannot "+op+" the agent while the lease store does not answer", "error", err)
		return false
	}
	return freeze
}

// sweepStale removes what a killed klock's sessions left: their empty
// cgroups (a minute is far beyond a group's first instant, the only time
// a live session's group is empty) and their packet walls' tables (their
// links went with their namespaces).
func (r *runner) sweepStale() {
	if gone, err := cgroup.SweepStale(time.Minute); len(gone) > 0 {
		r.log.Info("removed the empty session cgroups of a klock that was stopped", "groups", gone)
	} else if err != nil {
		r.log.Debug("sweep stale session cgroups", "error", err)
	}
	if r.o.Container == nil && walledNetNS(r.rs, r.o.Backend) {
		sweepWalls(r.log)
	}
}

func (r *runner) makeGroup() error {
	g, deleteGroup, err := sessionGroup(r.id, r.o.Container)
	if err != nil {
		return err
	}
	r.g, r.deleteGroup = g, deleteGroup
	r.stallGroup.Store(g)
	r.defer_(deleteGroup)
	return nil
}

// makePrivateTmp makes the session's own /tmp and /var/tmp, removed when
// Run returns (after the agent is reaped) unless Options.KeepTmp.
func (r *runner) makePrivateTmp() error {
	if !r.privTmp {
		return nil
	}
	if r.o.User == nil {
		return fmt.Errorf("%w: no agent user", launch.ErrBadSpec)
	}
	priv, err := makePrivateTmp(r.id, r.o.User.UID, r.o.User.GID)
	if err != nil {
		return err
	}
	r.priv = priv
	if !r.o.KeepTmp {
		r.defer_(func() {
			if err := priv.remove(); err != nil {
				r.log.Warn("cannot remove the session's private /tmp", "dir", priv.dir, "error", err)
			}
		})
	}
	r.o.privTmp = true
	return nil
}

// start writes the session's first log and has prepare put the walls up,
// take the backup and start the agent. The log exists from the start,
// INCOMPLETE until the real one replaces it: if klock is stopped (kill -9,
// a crash) the session is still on record, with how to undo it; the agent
// starts only once it is on disk.
func (r *runner) start(ctx context.Context) (*prepared, error) {
	o, m := r.o, r.m
	startDir := o.Dir
	if startDir == "" {
		startDir = m.Workdir
	}
	logDir := o.LogDir
	if logDir == "" {
		logDir = DefaultLogDir(r.host.Workdir)
	}
	r.sessionDir = filepath.Join(logDir, r.id)
	heldLeases, leaseWait := r.leases.vlog()
	if o.Container != nil {
		r.ctr = o.Container.vlog()
	}
	begun := beginLog(r.sessionDir, vlog.Session{ID: r.id, Agent: m.Agent.ID, ManifestPath: o.ManifestPath, ManifestBytes: o.ManifestData, Mode: r.mode, Start: time.Now(),
		Leases: heldLeases, LeaseWait: leaseWait, Container: r.ctr})
	o.dns = r.dnsp
	prep := prepare
	if o.Container != nil {
		prep = prepareContainer(r.hostRS)
	}
	ready, err := prep(ctx, prepareArgs{o: o, rs: r.rs, id: r.id, g: r.g, exclude: r.leases.excludeFromBackup(ctx), spec: launch.Spec{
		Ruleset: r.rs, Group: r.g, Args: o.Command, Env: o.Env, Dir: startDir, User: o.User,
		NewNetNS: ownNetNS(o.Backend), Mask: r.mask, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
		Stage2: o.Stage2, ResolvConf: r.dnsp.conf(), Binds: r.priv.bindList(),
		Canaries: canaries(r.mode, o.Backend),
	}, dirs: []string{startDir}, logged: begun.wait, log: r.log})
	if err != nil {
		begun.discard()
		return nil, err
	}
	r.tl.mark("started")
	r.tl.log(r.log, "session start")
	ready.closeBackends = sync.OnceFunc(ready.be.close)
	r.defer_(ready.closeBackends)
	r.announce(ready)
	return ready, nil
}

// announce hands the caller the running session: its traffic counters,
// before Started (whoever shows the session running can show its
// traffic), then the agent's pid.
func (r *runner) announce(ready *prepared) {
	if n := ready.be.net; n != nil && r.o.Traffic != nil {
		r.o.Traffic(func() (uint64, uint64) {
			c, err := n.counters()
			if err != nil {
				return 0, 0
			}
			return c.OutBytes, c.InBytes
		})
	}
	r.ev.start(ready.proc.Pid, r.o.Command)
	select {
	case <-ready.proc.CanariesKnown():
		r.notEnforcing(ready.proc)
	default:
		// A container's stage 2 proves its walls once its runtime starts
		// it, after this.
		go func() {
			<-ready.proc.CanariesKnown()
			r.notEnforcing(ready.proc)
		}()
	}
	if r.o.Started != nil {
		r.o.Started(ready.proc.Pid)
	}
}

// serve feeds the session's events to its engine until the agent has
// exited and every event it caused is judged.
func (r *runner) serve(ctx context.Context, ready *prepared) *running {
	be, proc := ready.be, ready.proc
	reread := newRereadTrust(be, proc.Landlock, r.rs, r.o.Backend)
	eng := decide.New(r.rs, r.mode, r.engineOptions(ctx, ready, reread)...)
	s := &running{eng: eng, proc: proc, be: be, log: r.log, mode: r.mode, before: ready.restorer, canaried: proc.Canaried(),
		wall: &netWall{ngs: be.ngs, eng: eng}, stageExecs: r.o.Container.stageExecs(), ctr: r.o.Container, priv: r.priv,
		forked: map[uint32]bool{}, entrants: map[uint32]int{}, ev: r.ev, execVeto: r.o.ExecVeto, countIn: r.countReadsIn(be),
		reread: reread}
	if r.dnsp != nil {
		r.dnsp.attach(eng, s.wall)
		s.dnsRefused = r.dnsp.refused
	}
	stopBudget := s.watchBudget(be.net)
	s.loop(ctx)
	stopBudget()
	// What the agent sent just before it exited is judged too, before
	// the verdict.
	s.budgetAtEnd(be.net)
	if r.dnsp != nil {
		// The agent is gone: no query is left to answer.
		r.dnsp.close()
		s.drainDNS()
	}
	return s
}

// engineOptions configure the session's decision engine: the walls that
// refuse, the name servers, the permissive amendments' lease gate and the
// pre-session names of hard-linked files.
func (r *runner) engineOptions(ctx context.Context, ready *prepared, reread rereadTrust) []decide.Option {
	opts := []decide.Option{decide.WithLogger(slog.New(slog.DiscardHandler)), decide.WithWall(wallRefuses(ready.be, ready.proc.Landlock, r.o.Backend)),
		decide.WithNameServers(r.nameServers),
		decide.WithExactWall(reread.exact)}
	if r.mode == policy.ModePermissive && r.leases != nil {
		// An amendment is one more lease of this session's holder: never
		// made over another session's lease (KLIS-6 DLA "if no conflict
		// exists").
		l := r.leases
		gate := amendGate(ctx, l.store, l.holder, l.age(), l.ttl(), ready.restorer, ready.be.lsms != nil)
		if r.priv != nil {
			gate = privateTmpGate(gate)
		}
		opts = append(opts, decide.WithAmendGate(gate))
	}
	if ready.restorer != nil {
		// A write through one name of a hard-linked file writes it by
		// every other name it had before the session.
		opts = append(opts, decide.WithOtherNames(otherNames(ready.restorer, r.o.Container)),
			decide.WithHiddenNames(hiddenNames(ready.restorer, r.o.Container)))
	}
	return opts
}
