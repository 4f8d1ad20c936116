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
	// canaried: stage 2 tried the canaries (launch.Canaries), whose
	// events are not the agent's (isCanary).
	canaried bool
	eng      *decide.Engine
	proc     *launch.Process
	be       *backends
	log      *slog.Logger
	mode     policy.Mode
	// reread: when a name the observer read back from the agent stands
	// for its operation in strict mode (observe.Record.NameReread).
	reread rereadTrust
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
	// priv: the agent's /tmp and /var/tmp are the session's own, which
	// started empty (nil: the host's).
	priv *privateTmp
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
	// ev is where the session's event records go (Options.Events).
	ev emitter
	// execVeto is Options.ExecVeto.
	execVeto func(event.Event) string
	// countIn: reads below it, which one intent allows whole, are
	// counted in the kernel (counted.go); empty: none. counting: the
	// kernel counts them now.
	countIn  string
	counting bool
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
		s.ev.kill(reason, s.killedAt)
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
		s.takeCounted()
	case decide.ActionBlocked:
		s.warn("blocked (permissive)", "triple", v.Triple.String())
		s.widen(v)
		s.takeCounted()
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
		v := s.observe(ev)
		s.countFrom(r, ev, v)
		if s.mode == policy.ModeStrict && v.Action == decide.ActionAllow && r.NameReread && !s.reread.trusts(ev) {
			s.kill(fmt.Sprintf("klock could not read the name a %s used when it returned (its page was out of memory) and read %q back from the agent afterwards, which the agent could have rewritten; no wall judged that operation exactly as declared, so strict mode fails closed",
				r.Event.Syscall, r.Arg), nil)
		}
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
	if s.priv != nil && policy.InTmp(dst) {
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

// feeds are the channels the session's backends report on (nil: no such
// backend; a nil channel is never ready).
type feeds struct {
	obs            <-chan observe.Record
	net, unix, lsm <-chan event.Event
	// queued are the backlogs behind obs, net and unix (pending).
	queued                     []interface{ Pending() bool }
	netLost, unixLost, lsmLost <-chan event.Lost
	// relay: the connects the loopback relay answered itself (bpf-lsm
	// only: sessionNet.relayed).
	relay <-chan event.Event
	// Only while the agent runs (nil when draining):
	dns        <-chan event.Event
	overBudget <-chan string
	ctxDone    <-chan struct{}
	procDone   <-chan struct{}
}

// feeds are the session's channels while the agent runs.
func (s *running) feeds(ctx context.Context) feeds {
	f := feeds{dns: s.dnsRefused, overBudget: s.overBudget, ctxDone: ctx.Done(), procDone: s.proc.Done()}
	if s.be.watch != nil {
		f.obs = s.be.watch.Records()
		f.queued = append(f.queued, s.be.watch)
	}
	if s.be.ngs != nil {
		f.net, f.netLost = s.be.ngs.Events(), s.be.ngs.Lost()
		f.queued = append(f.queued, s.be.ngs)
	}
	// The cgroup AF_UNIX wall's refusals are cgroup programs' too: they
	// share the network's channels' handling (and drain).
	if s.be.ugs != nil {
		f.unix, f.unixLost = s.be.ugs.Events(), s.be.ugs.Lost()
		f.queued = append(f.queued, s.be.ugs)
	}
	if s.be.lsms != nil {
		f.lsm, f.lsmLost = s.be.lsms.Events(), s.be.lsms.Lost()
	}
	if s.be.net != nil {
		f.relay = s.be.net.relayed
	}
	return f
}

// draining are the feeds drain reads once the agent exited: the
// observer's and the cgroup walls' (bpf-lsm's has drainLSM).
func (f feeds) draining() feeds {
	return feeds{obs: f.obs, queued: f.queued, net: f.net, netLost: f.netLost, unix: f.unix, unixLost: f.unixLost, relay: f.relay}
}

// pending says whether a record waits on one of the draining feeds (this
// goroutine is their only reader: a step then takes one without blocking).
func (f feeds) pending() bool {
	for _, q := range f.queued {
		if q.Pending() {
			return true
		}
	}
	return len(f.netLost)+len(f.unixLost)+len(f.relay) > 0
}

// loop feeds events to the engine until the agent has exited and every
// event it caused has been read.
func (s *running) loop(ctx context.Context) {
	f := s.feeds(ctx)
	for !s.step(ctx, &f) {
	}
	s.drain(f.draining())
	s.drainLSM()
}

// step takes one record of f to the engine, or acts on the interruption
// or the end it signals; it reports whether the agent has ended.
func (s *running) step(ctx context.Context, f *feeds) (ended bool) {
	select {
	case r := <-f.obs:
		s.record(r)
	case ev := <-f.net:
		s.observe(ev)
	case l := <-f.netLost:
		s.act(s.eng.Lost(l))
	case ev := <-f.unix:
		socketAbsent(&ev)
		s.observe(ev)
	case l := <-f.unixLost:
		s.act(s.eng.Lost(l))
	case ev := <-f.lsm:
		s.observeLSM(ev)
	case l := <-f.lsmLost:
		s.act(s.eng.Lost(l))
	case ev := <-f.dns:
		s.observeDNS(ev)
	case ev := <-f.relay:
		s.observe(ev)
	case why := <-f.overBudget:
		s.overBudgetAt(why)
	case <-f.ctxDone:
		s.interrupt(ctx, f)
	case <-f.procDone:
		// The launcher kills the cgroup on the same cancel: the agent's
		// end can win this select, and is still the interruption's.
		if f.ctxDone != nil && ctx.Err() != nil {
			s.interrupt(ctx, f)
		}
		return true
	}
	return false
}

// interrupt ends the session from outside (its context is done), once.
func (s *running) interrupt(ctx context.Context, f *feeds) {
	s.interrupted = !s.killed
	s.kill("ended from outside: "+context.Cause(ctx).Error(), nil)
	f.ctxDone = nil
}

// observeLSM judges one bpf-lsm decision, its objects named as the agent
// sees them (privateTmp.agentView).
func (s *running) observeLSM(ev event.Event) {
	socketAbsent(&ev)
	s.priv.agentView(&ev)
	s.observe(ev)
}

// drainLSM delivers the bpf-lsm decisions still in flight after the agent
// exited, then its loss count.
func (s *running) drainLSM() {
	if s.be.lsms == nil {
		return
	}
	// Everything the kernel produced until now reaches the channel by the
	// flush's end; it is read meanwhile (a delivery waits for room).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	flushed := make(chan error, 1)
	go func() { flushed <- s.be.lsms.Flush(ctx) }()
	for waiting := true; waiting; {
		select {
		case ev := <-s.be.lsms.Events():
			s.observeLSM(ev)
		case l := <-s.be.lsms.Lost():
			s.act(s.eng.Lost(l))
		case err := <-flushed:
			if err != nil {
				s.log.Warn("bpf-lsm events still in flight after 5s", "error", err)
			}
			waiting = false
		}
	}
	cancel()
	for drained := false; !drained; {
		select {
		case ev := <-s.be.lsms.Events():
			s.observeLSM(ev)
		default:
			drained = true
		}
	}
	// Opens the kernel counted instead of reporting again.
	evs, err := s.be.lsms.Repeats()
	if err != nil {
		s.log.Warn("bpf-lsm repeats", "error", err)
	}
	for _, ev := range evs {
		s.priv.agentView(&ev)
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
func (s *running) drain(f feeds) {
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
	s.settleRelay(f)
	for f.pending() {
		s.step(context.Background(), &f)
	}
	s.repeats()
	s.takeCounted()
}

// settleRelay waits, for at most relaySettle, until the loopback relay
// answers no trapped connect, reading its reports meanwhile: every
// connect it answered before the agent exited is reported by then (the
// relay reports before it answers, and the agent's thread waited for the
// answer).
func (s *running) settleRelay(f feeds) {
	if f.relay == nil || s.be.net == nil || s.be.net.relay == nil {
		return
	}
	deadline := time.Now().Add(relaySettle)
	for s.be.net.relay.Answering() && time.Now().Before(deadline) {
		select {
		case ev := <-f.relay:
			s.observe(ev)
		case <-time.After(time.Millisecond):
		}
	}
}

// relaySettle bounds settleRelay: a connect klock is still making for a
// thread that is gone gets no answer, and is reported by nobody.
const relaySettle = time.Second

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
			s.observeDNS(ev)
		default:
			return
		}
	}
}
