//go:build linux

package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/klocklabs/klock/enforcer/vlog"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/policy"
)

// prepared is a session whose agent runs, walled and watched.
type prepared struct {
	be       *backends
	proc     *launch.Process
	restorer Restorer
	start    time.Time
	// closeBackends brings the backends down once (Run sets it).
	closeBackends func()
}

// prepareArgs are what prepare (and prepareContainer) work from: the
// session's options, its compiled ruleset, id and cgroup, the other
// sessions' trees the backup records only (exclude), stage 2's spec, the
// directories the agent starts in (the observer's known dirs), and logged,
// which returns once the session's first log is on disk.
type prepareArgs struct {
	o       Options
	rs      *policy.Ruleset
	id      string
	g       *cgroup.Group
	exclude []string
	spec    launch.Spec
	dirs    []string
	logged  func() error
	log     *slog.Logger
}

type netResult struct {
	n   *sessionNet
	err error
	// dnsErr: the session's DNS proxy could not listen in the namespace
	// (never degraded: the session refuses to start).
	dnsErr error
}

// walledNS builds the packet wall and the relays around pid's network
// namespace and starts the session's DNS proxy in it. A namespace
// already gone (stage 2 exited: it is started over) is left for the new
// one.
func walledNS(ctx context.Context, o Options, id string, pid int, plan netPlan, log *slog.Logger) netResult {
	n, err := setupNet(ctx, id, pid, plan, log)
	if err != nil && errors.Is(err, os.ErrNotExist) {
		return netResult{n, err, nil}
	}
	dnsErr := o.dns.listenIn(netNSPath(pid))
	if dnsErr != nil && errors.Is(dnsErr, os.ErrNotExist) {
		// Gone since the wall was built: the same as above.
		n.close()
		return netResult{nil, dnsErr, nil}
	}
	return netResult{n, err, dnsErr}
}

type backupResult struct {
	r   Restorer
	err error
}

// prepare puts the kernel backends on g, takes the pre-flight backup and
// starts the agent once logged (the session's first log is on disk) says
// so. The independent steps overlap: the BPF loads run in the background
// from the start, the backup's walk too (the longest step: it reads every
// tree the agent may change), and stage 2 (klock's re-exec, which sets up
// namespaces, Landlock and seccomp) runs while the network programs are
// attached and the backup is taken; it execs the agent only once all of
// that is done (launch.Pending.Release). What has to come first still does:
// bpf-lsm and the observer's watch are in place before stage 2 exists (both
// count that process's execs to find the agent's), and nothing that can
// refuse the session (ErrDegraded) comes after the backup is kept
// (Preflight.Ready: a backup the walls refuse is removed). On error
// nothing is left running or loaded.
func prepare(ctx context.Context, a prepareArgs) (_ *prepared, err error) {
	p := newPreparing(ctx, a, false)
	defer func() {
		if err != nil {
			p.abort()
		}
	}()
	p.takeBackup()
	if err := p.attachWatchers(); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := p.spawn(); err != nil {
		return nil, err
	}
	defer func() { _ = p.joinedNet() }() // never leave it building behind the caller's back
	if err := p.attachWalls(); err != nil {
		return nil, err
	}
	restorer, err := p.awaitBackup("the agent was not started")
	if err != nil {
		return nil, err
	}
	if err := a.logged(); err != nil {
		return nil, err
	}
	a.o.tl.mark("begun log")
	// From the listener's hand-over on, every connect of stage 2 (its
	// connect canary) and of the agent waits for an answer.
	p.pending.OnListener(p.be.net.handOff)
	proc, err := p.release()
	if err != nil {
		return nil, err
	}
	if proc.ConnectListener == nil && p.spec.TrapConnect {
		p.be.net.copyOnly("the kernel made no seccomp listener for the agent's connect calls (before Linux 5.0)")
	}
	return &prepared{be: p.be, proc: proc, restorer: restorer, start: start}, nil
}

// preparing is one prepare under way: what its steps hand each other.
type preparing struct {
	prepareArgs
	ctx     context.Context
	choice  Backend
	l       *loading
	be      *backends
	pending *launch.Pending
	backup  chan backupResult
	// wallsUp is closed once the walls are up (wallsErr nil) or the
	// session is refused (wallsErr says why): the backup, started before
	// them, is kept (or removed) only then (wallsReady).
	wallsUp   chan struct{}
	wallsErr  error
	wallsOnce sync.Once
	// joined delivers the packet wall built around stage 2's namespace
	// (nil: none, or already taken).
	joined chan netResult
	// netLater: stage 2 was gone before its namespace could be walled
	// (a klock-stage2 of another build exits at once): Release starts it
	// over, and the wall is built for the new one (OnRelaunch), or
	// Release says why stage 2 failed. relaunched: it did.
	netLater, relaunched bool
	// relaunchSteps are what Release calls with a new stage 2's pid (a
	// new namespace for every step that was built around the old one).
	relaunchSteps []func(pid int) error
}

// newPreparing starts loading the backends the session needs; netAlways
// loads cgroup-net whatever the manifest declares (a container's network
// namespace is its runtime's: a bridge, the host's).
func newPreparing(ctx context.Context, a prepareArgs, netAlways bool) *preparing {
	p := &preparing{prepareArgs: a, ctx: ctx, choice: a.o.Backend, wallsUp: make(chan struct{})}
	if p.choice == "" {
		p.choice = BackendAuto
	}
	need := needs(a.rs, p.choice, netAlways)
	if p.l = a.o.loads; !p.l.claim(need) {
		// Not started before the setup, or for other needs (a name
		// the setup resolved changed what the session walls).
		p.l = startLoading(a.o.Backends, need)
	}
	p.be = &backends{allowDegraded: a.o.AllowDegraded, log: a.log}
	return p
}

// abort leaves nothing running or loaded after a failed prepare.
func (p *preparing) abort() {
	p.wallsDone(errRefused)
	if p.pending != nil {
		p.pending.Abort()
	}
	if p.backup != nil {
		// Never leave it writing behind the caller's back; a backup that
		// completed stays, as any backup of a session that failed to
		// start does.
		<-p.backup
	}
	p.l.discard()
	p.be.close()
}

// errRefused tells a backup held for the walls that the session was
// refused before they were up: it is abandoned.
var errRefused = errors.New("the session was refused before its walls were up")

// wallsDone releases the backup held for the walls (wallsReady): err nil,
// they are up; else the session was refused. Only the first call counts.
func (p *preparing) wallsDone(err error) {
	p.wallsOnce.Do(func() {
		p.wallsErr = err
		close(p.wallsUp)
	})
}

// wallsReady is the backup's Preflight.Ready: it waits for the walls.
// With AllowDegraded nothing after the backup can refuse the session on
// that account, and it need not wait.
func (p *preparing) wallsReady() error {
	<-p.wallsUp
	return p.wallsErr
}

// takeBackup starts the pre-flight backup in the background; it is kept
// once the walls are up (wallsDone).
func (p *preparing) takeBackup() {
	o, spec := p.o, p.spec
	if o.Snapshot == nil {
		return
	}
	var ready func() error
	if !o.AllowDegraded {
		ready = p.wallsReady
	}
	p.backup = make(chan backupResult, 1)
	go func() {
		r, err := o.Snapshot(p.ctx, Preflight{Ruleset: p.rs, ID: p.id, AgentUID: spec.User.UID, AgentGIDs: append([]uint32{spec.User.GID}, spec.User.Groups...), Others: p.exclude,
			PrivateTmp: o.privTmp, Ready: ready})
		o.tl.mark("backup")
		p.backup <- backupResult{r, err}
	}()
}

// attachWatchers puts bpf-lsm and the observer's watch on the cgroup
// before stage 2 exists (both count its execs to find the agent's), and
// tells stage 2 which walls are its own to build.
func (p *preparing) attachWatchers() error {
	be, o := p.be, p.o
	if err := be.attachLSM(p.g, p.rs, p.l, p.choice); err != nil {
		return err
	}
	o.tl.mark("bpf-lsm")
	if err := be.attachObserver(p.g, p.l.observer(), p.dirs, nsHelper(o.Stage2)); err != nil {
		return err
	}
	o.tl.mark("observer")
	p.spec.NoLandlock = be.lsms != nil || p.choice == BackendObserve
	// An observe-only run refuses nothing it can record (the observer
	// reports the ioctls it lets through).
	p.spec.DenyMetaIoctls = p.choice != BackendObserve && launch.MetaIoctlsRefused(p.rs, be.lsms != nil, be.watch != nil)
	be.metaIoctlsRefused = p.spec.DenyMetaIoctls
	return nil
}

// spawn starts stage 2 (re-exec and runtime start of klock's binary, the
// longest step once the BPF programs are loaded: before the backup
// competes with it for the CPUs), has the observer name paths in its
// mount namespace, and starts building the packet wall around its
// network namespace.
func (p *preparing) spawn() error {
	var err error
	p.spec.TrapConnect = p.trapsConnect()
	if p.pending, err = launch.Spawn(p.ctx, p.spec); err != nil {
		return err
	}
	p.o.tl.mark("stage 2 spawned")
	if err := p.be.observeInAgentRoot(p.pending.Pid()); err != nil {
		return err
	}
	p.relaunchSteps = []func(pid int) error{p.be.observeInAgentRoot}
	p.pending.OnRelaunch(func(pid int) error {
		for _, f := range p.relaunchSteps {
			if err := f(pid); err != nil {
				return err
			}
		}
		return nil
	})
	return p.wallNetNS()
}

// wallNetNS builds the packet wall and the relays around the agent's own
// network namespace, which exists with stage 2, while stage 2 and the
// cgroup programs get ready, before the agent runs.
func (p *preparing) wallNetNS() error {
	o := p.o
	walled := p.spec.NewNetNS && !launch.NeedsNetNS(p.rs)
	if o.dns != nil && !walled {
		// Not reached: a session gets a DNS proxy only with a namespace
		// of its own (netWalled), where the proxy listens.
		return fmt.Errorf("%w: the session's DNS proxy needs the session's own network namespace", ErrSetup)
	}
	if !walled {
		return nil
	}
	var dnsAddr netip.Addr
	if o.dns != nil {
		dnsAddr = o.dns.addr()
	}
	plan := planNet(p.rs, o.Manifest.EgressBudget(), dnsAddr)
	plan.pingGID = p.spec.User.GID
	// Under bpf-lsm the session has no syscall tracepoint: a connect the
	// relay answers at its trap reaches no hook that reports it (cgroup-
	// net's run inside connect(2)), so the relay reports it. Under the
	// Landlock wall the tracepoints report every connect, answered at the
	// trap or not: a second report would count each use twice.
	plan.reportRelay = p.be.lsms != nil
	p.joined = make(chan netResult, 1)
	pid := p.pending.Pid()
	go func() { p.joined <- walledNS(p.ctx, o, p.id, pid, plan, p.log) }()
	p.relaunchSteps = append(p.relaunchSteps, func(pid int) error {
		// A new stage 2, a new namespace: the wall is built again, and
		// the DNS proxy listens in the new one.
		p.relaunched = true
		p.be.net.close()
		p.be.net = nil
		p.be.list = slices.DeleteFunc(p.be.list, func(b vlog.Backend) bool { return b.Name == "netwall" })
		return p.join(walledNS(p.ctx, o, p.id, pid, plan, p.log))
	})
	return nil
}

// trapsConnect says whether the agent's connect calls trap to the loopback
// relay (looprelay.HandOff): its namespace is walled, it declares a host
// loopback service, and it has no egress budget (then the copying relay
// carries every flow, counted and held to the budget: a handed-over
// socket's bytes the kernel carries, uncounted by the relay). Under
// either wall: the connects the relay answers are reported by the
// tracepoints (Landlock) or by the relay itself (bpf-lsm, wallNetNS).
func (p *preparing) trapsConnect() bool {
	if !p.spec.NewNetNS || launch.NeedsNetNS(p.rs) || p.o.Manifest.EgressBudget() > 0 {
		return false
	}
	return len(planNet(p.rs, 0, netip.Addr{}).relays) > 0
}

// joinedNet waits for the packet wall wallNetNS is building, if any.
func (p *preparing) joinedNet() error {
	if p.joined == nil {
		return nil
	}
	r := <-p.joined
	p.joined = nil
	if r.err != nil && errors.Is(r.err, os.ErrNotExist) {
		// Stage 2 is our unreaped child: its pid is not reused, and a
		// namespace gone means stage 2 is.
		p.log.Debug("stage 2 ended before its namespace was walled", "error", r.err)
		p.netLater = true
		return nil
	}
	return p.join(r)
}

// join takes a built packet wall into the session's backends, and points
// the DNS proxy at it.
func (p *preparing) join(r netResult) error {
	if r.dnsErr != nil {
		r.n.close()
		return fmt.Errorf("%w: %v (a session that declares a host name and walls the network needs its DNS proxy; it never falls back to the open port 53)", ErrSetup, r.dnsErr)
	}
	if err := p.be.joinedNet(r.n, r.err); err != nil {
		return err
	}
	p.o.dns.setNet(p.be.net)
	return nil
}

// attachWalls puts the cgroup programs on and waits for the packet wall,
// then lets the backup be kept: nothing that can refuse the session
// (ErrDegraded) comes after that.
func (p *preparing) attachWalls() error {
	o := p.o
	if err := p.be.attachNet(p.g, p.rs, p.l, p.choice); err != nil {
		return err
	}
	o.tl.mark("cgroup-net")
	if err := p.be.attachUnix(p.g, p.rs, p.l); err != nil {
		return err
	}
	o.tl.mark("cgroup-unix")
	if err := p.joinedNet(); err != nil {
		return err
	}
	o.tl.mark("netwall")
	p.wallsDone(nil)
	return nil
}

// awaitBackup waits for the pre-flight backup (nil without one); unsaid
// says what did not happen when it failed.
func (p *preparing) awaitBackup(unsaid string) (Restorer, error) {
	defer p.o.tl.mark("backup taken")
	if p.backup == nil {
		return nil, nil
	}
	r := <-p.backup
	p.backup = nil
	if r.err != nil {
		return nil, fmt.Errorf("%w: pre-flight backup: %v (%s)", ErrSetup, r.err, unsaid)
	}
	return r.r, nil
}

// release lets stage 2 exec the agent.
func (p *preparing) release() (*launch.Process, error) {
	proc, err := p.pending.Release()
	p.pending = nil // Release cleans up after itself
	if err != nil {
		return nil, err
	}
	if p.netLater && !p.relaunched {
		// Not reached: a stage 2 gone before Release fails or starts
		// over. Never run an agent whose namespace was not walled.
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, fmt.Errorf("%w: stage 2 ended before its network namespace was walled, yet the agent ran", ErrSetup)
	}
	return proc, nil
}
