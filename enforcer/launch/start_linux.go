//go:build linux

package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/launch/stage2"
	"golang.org/x/sys/unix"
)

// Process is a running agent: pid 1 of its own pid namespace, in the
// session cgroup, under its Landlock ruleset and seccomp filter.
type Process struct {
	// Pid is the agent's pid in klock's pid namespace.
	Pid int
	// Landlock is the wall that was enforced, with its residual differences
	// from the declared scope.
	Landlock *LandlockPlan
	// Launcher is the stage-2 binary that set the session up: a
	// klock-stage2's path, or "/proc/self/exe" (the running binary).
	Launcher string
	// Canaries is what the walls did with the canaries (Spec.Canaries),
	// the skipped ones included.
	Canaries []CanaryResult
	// ConnectListener is the agent's seccomp listener for its connect
	// calls (Spec.TrapConnect), which the caller must answer for as long
	// as the agent runs (every connect waits for its answer); nil when
	// not asked for, or when the kernel could not make one.
	ConnectListener *os.File

	cmd   *exec.Cmd // nil for an adopted process (Adopt)
	group *cgroup.Group
	done  chan struct{}
	exit  Exit
	err   error
	// killed: Kill was called (an adopted process's exit is then SIGKILL).
	killed atomic.Bool
	// canariesIn is closed once an adopted container's stage 2 reported
	// its canaries (nil: known from the start); canaryErr is the failure
	// it reported with them.
	canariesIn chan struct{}
	canaryErr  error
}

// known is closed: what is known from the start.
var known = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// CanariesKnown is closed once Canaries says what the walls did: at once
// for an agent klock launched (Release waited for stage 2's report), once
// an adopted container's stage 2 reported them, or its init ended
// without (Adopt). Canaries must not be read before.
func (p *Process) CanariesKnown() <-chan struct{} {
	if p.canariesIn == nil {
		return known
	}
	return p.canariesIn
}

// Canaried says whether the walls were (or are being) proven by canaries:
// their events, before the agent's exec, are not the agent's.
func (p *Process) Canaried() bool { return p.canariesIn != nil || len(p.Canaries) > 0 }

// CanaryError is, once CanariesKnown is closed, the failure an adopted
// container's stage 2 reported with its canaries: a *StageError matching
// ErrWallNotEnforcing when a wall let one through in strict mode (the
// entrypoint never ran, stage 2 exited FailExit). Nil otherwise, and
// always for an agent klock launched (Release returns that error).
func (p *Process) CanaryError() error {
	<-p.CanariesKnown()
	return p.canaryErr
}

// Exit is how the agent ended.
type Exit struct {
	Code   int            // exit status when it exited
	Signal syscall.Signal // the signal that killed it, 0 when it exited
}

// ExitCode is the session's exit status: Code, or 128+signal (the shell's
// convention) when a signal ended the agent.
func (e Exit) ExitCode() int {
	if e.Signal != 0 {
		return 128 + int(e.Signal)
	}
	return e.Code
}

func (e Exit) String() string {
	if e.Signal != 0 {
		if name := unix.SignalName(e.Signal); name != "" {
			return "killed by " + name
		}
		return "killed by signal " + strconv.Itoa(int(e.Signal))
	}
	return "exit status " + strconv.Itoa(e.Code)
}

// Start launches the agent described by s and returns once it runs: its
// first instruction executes inside s.Group, in new mount, pid and cgroup
// namespaces (and a new network namespace when s.NewNetNS), as s.User with
// no capabilities and no_new_privs, under the Landlock ruleset compiled
// from s.Ruleset and the seccomp filter. If anything fails before the
// agent's exec, Start returns an error (a *StageError for failures inside
// stage 2) and nothing is left running. When ctx is done, the whole
// session cgroup is killed. Start is Spawn then Release.
func Start(ctx context.Context, s Spec) (*Process, error) {
	p, err := Spawn(ctx, s)
	if err != nil {
		return nil, err
	}
	return p.Release()
}

// Pending is a session whose stage 2 runs but whose agent has not started:
// stage 2 prepares everything (namespaces, mounts, credentials, Landlock,
// seccomp) and then waits, right before the agent's exec, for Release.
// Nothing of the agent runs before Release; call Release or Abort.
type Pending struct {
	proc   *Process
	abort  func(error) (*Process, error)
	stop   func() bool
	goW    *os.File // one byte from here lets stage 2 exec the agent
	status *os.File // stage 2's report: JSON error, or EOF at exec
	notify *os.File // stage 2 sends its connect listener here (TrapConnect)
	ctx    context.Context
	// retry launches the session again with the running binary as stage
	// 2, when a klock-stage2 turns out to be from another build; nil when
	// this is not possible.
	retry func() (*Pending, error)
	uid   uint32 // the agent's, for ExecHint
	// relaunched: see OnRelaunch.
	relaunched func(pid int) error
	// onListener: see OnListener.
	onListener func(*os.File)
}

// Spawn starts stage 2 of the session described by s (see Start) and
// returns at once, without waiting for stage 2 to get ready: starting a
// process and setting up take milliseconds that the caller can spend on
// its own preparation (a backup, cgroup programs) before Release. When ctx
// is done, the whole session cgroup is killed.
//
// Stage 2 is klock-stage2 (s.Stage2, or beside the running executable)
// when it is a regular executable file, not a symbolic link, and root owns
// it and its directory, neither writable by group or others; and when it
// comes from the same build as the running binary (otherwise Release
// starts over without it). Else stage 2 is the running binary re-executed
// (its Init). The agent's session is the same either way.
func Spawn(ctx context.Context, s Spec) (*Pending, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	var plan *LandlockPlan
	if !s.NoLandlock {
		abi, err := ProbeABI()
		if err != nil {
			return nil, err
		}
		if plan, err = PlanLandlockOn(s.Ruleset, abi, BoundFS(s.Binds)); err != nil {
			return nil, err
		}
	}
	return spawn(ctx, s, plan, true)
}

// spawn starts stage 2 from klock-stage2 when tryLauncher and one is fit,
// else from the running binary.
func spawn(ctx context.Context, s Spec, plan *LandlockPlan, tryLauncher bool) (*Pending, error) {
	canary, skipped := PlanCanaries(s.Canaries, s.Ruleset, plan)
	if err := makeCanaryMountPoint(canary); err != nil {
		return nil, err
	}
	spec, err := encodeStage2Spec(s, plan, canary)
	if err != nil {
		return nil, err
	}
	cgfd, err := s.Group.OpenFD()
	if err != nil {
		return nil, err
	}
	defer cgfd.Close()
	pp, err := openStage2Pipes(s.TrapConnect)
	if err != nil {
		return nil, err
	}

	files := append(append([]*os.File(nil), s.ExtraFiles...), pp.specR, pp.statusW, pp.goR)
	if pp.notifyW != nil {
		files = append(files, pp.notifyW) // fd notifyFD(s)
	}
	path, launcher := selfLauncher, selfLauncher
	var lid fileID
	if tryLauncher {
		var lf *os.File
		if lf, lid = openLauncher(s.Stage2); lf != nil {
			defer lf.Close()
			// The child execs the descriptor checked, through its own fd
			// table (the fd number after stage 2's pipes); stage 2 marks it
			// close-on-exec with every other fd it does not pass on.
			path, launcher = "/proc/self/fd/"+strconv.Itoa(3+len(files)), lf.Name()
			files = append(files, lf)
		}
	}
	cmd := stage2Cmd(s, path, files, cgfd)
	err = onSpawnerThread(cmd.Start) // the parent-death signal follows that thread
	pp.closeChildEnds()
	if err != nil {
		pp.closeParentEnds()
		if launcher != selfLauncher {
			// Not executable after all (another architecture, say).
			return spawn(ctx, s, plan, false)
		}
		return nil, fmt.Errorf("launch: start stage 2: %w", err)
	}
	p := newPending(ctx, s, plan, cmd, launcher, lid, pp)
	p.proc.Canaries = skipped
	// The spec fits in the pipe buffer only when small: write it from a
	// goroutine so Spawn never waits for stage 2.
	go func() {
		_, _ = pp.specW.Write(spec)
		pp.specW.Close()
	}()
	return p, nil
}

// encodeStage2Spec is what stage 2 is told to set up (stage2.Spec, sent
// on its spec pipe): the program defaults to Args[0], the directory to
// the workdir, else "/".
func encodeStage2Spec(s Spec, plan *LandlockPlan, canary *stage2.Canary) ([]byte, error) {
	w := stage2.Spec{
		Protocol: stage2.Protocol, Build: stage2.Build,
		Path: s.Path, Args: s.Args, Env: s.Env, Dir: s.Dir,
		UID: s.User.UID, GID: s.User.GID, Groups: s.User.Groups,
		NewNetNS: s.NewNetNS, IOURing: s.AllowIOURing, ExtraFiles: len(s.ExtraFiles),
		Landlock: plan.wall(), NoLandlock: s.NoLandlock, Mask: s.Mask,
		ResolvConf: s.ResolvConf, Binds: s.Binds,
		DenyMetaIoctls: s.DenyMetaIoctls,
		Canary:         canary,
	}
	if s.TrapConnect {
		w.NotifyFD = notifyFD(s)
	}
	if w.Path == "" {
		w.Path = s.Args[0]
	}
	if w.Dir == "" {
		w.Dir = s.Ruleset.Workdir
	}
	if w.Dir == "" {
		w.Dir = "/"
	}
	spec, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("launch: encode spec: %w", err)
	}
	return spec, nil
}

// stage2Pipes are the three pipes between klock and stage 2 (the fds
// stage2.EnvVar names): the spec, stage 2's status report, and the go
// byte that lets it exec the agent; with Spec.TrapConnect, a socket pair
// too, for the connect listener (stage2.Spec.NotifyFD).
type stage2Pipes struct {
	specR, specW     *os.File
	statusR, statusW *os.File
	goR, goW         *os.File
	notifyR, notifyW *os.File // nil without TrapConnect
}

// notifyFD is stage 2's fd of the listener's socket: the one after its
// pipes.
func notifyFD(s Spec) int { return 3 + len(s.ExtraFiles) + 3 }

// openStage2Pipes opens the pipes (and the listener's socket pair when
// notify); on an error none is left open.
func openStage2Pipes(notify bool) (*stage2Pipes, error) {
	var pipes [3][2]*os.File // spec, status, go: [read, write]
	closeAll := func() {
		for _, pp := range pipes {
			for _, f := range pp {
				if f != nil {
					f.Close()
				}
			}
		}
	}
	for i := range pipes {
		var err error
		if pipes[i][0], pipes[i][1], err = os.Pipe(); err != nil {
			closeAll()
			return nil, fmt.Errorf("launch: %w", err)
		}
	}
	pp := &stage2Pipes{
		specR: pipes[0][0], specW: pipes[0][1],
		statusR: pipes[1][0], statusW: pipes[1][1],
		goR: pipes[2][0], goW: pipes[2][1],
	}
	if notify {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("launch: %w", err)
		}
		pp.notifyR, pp.notifyW = os.NewFile(uintptr(fds[0]), "notify"), os.NewFile(uintptr(fds[1]), "notify")
	}
	return pp, nil
}

// closeChildEnds closes stage 2's ends once it started (or failed to).
func (pp *stage2Pipes) closeChildEnds() {
	pp.specR.Close()
	pp.statusW.Close()
	pp.goR.Close()
	if pp.notifyW != nil {
		pp.notifyW.Close()
	}
}

// closeParentEnds closes klock's ends when stage 2 did not start.
func (pp *stage2Pipes) closeParentEnds() {
	pp.specW.Close()
	pp.statusR.Close()
	pp.goW.Close()
	if pp.notifyR != nil {
		pp.notifyR.Close()
	}
}

// stage2Cmd is stage 2's command: path (the launcher, or the running
// binary) with files after stdio, the pipes' fd numbers in
// stage2.EnvVar, started in new mount and pid (and net) namespaces,
// in the session cgroup, sent SIGKILL when the thread that starts it
// ends (Pdeathsig: see onSpawnerThread).
func stage2Cmd(s Spec, path string, files []*os.File, cgfd *os.File) *exec.Cmd {
	n := len(s.ExtraFiles)
	cloneflags := uintptr(syscall.CLONE_NEWNS | syscall.CLONE_NEWPID)
	if s.NewNetNS {
		cloneflags |= syscall.CLONE_NEWNET
	}
	return &exec.Cmd{
		Path:       path,
		Args:       []string{"klock-stage2"},
		Env:        []string{stage2.EnvVar + "=" + strconv.Itoa(3+n) + "," + strconv.Itoa(4+n) + "," + strconv.Itoa(5+n)},
		Stdin:      s.Stdin,
		Stdout:     s.Stdout,
		Stderr:     s.Stderr,
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  cloneflags,
			UseCgroupFD: true,
			CgroupFD:    int(cgfd.Fd()),
			Pdeathsig:   syscall.SIGKILL,
		},
	}
}

// newPending is the session whose stage 2 started: a retry without the
// launcher when that is possible, and, from here on, a kill of the
// whole cgroup on any failure (Abort) or when ctx is done.
func newPending(ctx context.Context, s Spec, plan *LandlockPlan, cmd *exec.Cmd, launcher string, lid fileID, pp *stage2Pipes) *Pending {
	p := &Pending{
		proc:   &Process{Pid: cmd.Process.Pid, Landlock: plan, Launcher: launcher, cmd: cmd, group: s.Group, done: make(chan struct{})},
		goW:    pp.goW,
		status: pp.statusR,
		notify: pp.notifyR,
		ctx:    ctx,
		uid:    s.User.UID,
	}
	// A retry gives a second stage 2 the same Stdin, so the first must have
	// consumed none of it: stage 2 reads none, but exec.Cmd's copy from a
	// Stdin that is not a file would.
	if _, isFile := s.Stdin.(*os.File); launcher != selfLauncher && (s.Stdin == nil || isFile) {
		p.retry = func() (*Pending, error) {
			staleLaunchers.Store(lid, struct{}{})
			return spawn(ctx, s, plan, false)
		}
	}
	// From here on the session exists: any failure kills it.
	p.stop = context.AfterFunc(ctx, func() { _ = s.Group.Kill() })
	p.abort = func(err error) (*Process, error) {
		p.stop()
		pp.goW.Close()
		pp.statusR.Close()
		if pp.notifyR != nil {
			pp.notifyR.Close()
		}
		if l := p.proc.ConnectListener; l != nil {
			l.Close()
		}
		_ = s.Group.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return p
}

// Pid is stage 2's pid, which the agent keeps across its exec: its
// namespaces (/proc/<pid>/ns/net with Spec.NewNetNS) exist from Spawn on,
// so the caller can join or configure them before Release.
func (p *Pending) Pid() int { return p.proc.Pid }

// OnRelaunch sets what Release calls, with the new stage 2's pid, when it
// starts stage 2 over (a klock-stage2 of another build): namespaces are the
// new process's, and what the caller set up in Pid's must be set up again
// before the agent runs. An error aborts the session.
func (p *Pending) OnRelaunch(f func(pid int) error) { p.relaunched = f }

// OnListener sets what Release calls with the agent's connect listener
// (Process.ConnectListener) as soon as stage 2 hands it over, before the
// agent's exec: every trapped connect waits for an answer, stage 2's
// connect canary among them, so the caller must be answering by then.
func (p *Pending) OnListener(f func(*os.File)) { p.onListener = f }

// Abort kills stage 2 (the whole session cgroup) and waits for it to end.
func (p *Pending) Abort() { _, _ = p.abort(nil) }

// Release lets stage 2 exec the agent and returns once it runs, or the
// reason it could not (a *StageError for failures inside stage 2), in
// which case nothing is left running.
func (p *Pending) Release() (*Process, error) {
	// Ended before the release: nothing of the agent ran. From the
	// release on, the agent may run at any moment (its exec closes the
	// status pipe), so an end from then on is the running session's to
	// handle (killed by p.stop, reported as interrupted): returning an
	// error would call a session whose agent ran one that never started,
	// and its log would be dropped.
	if p.ctx.Err() != nil {
		return p.abort(fmt.Errorf("launch: %w", p.ctx.Err()))
	}
	// A stage 2 that failed, or was killed, reads no byte: the write fails
	// or goes unread, and the status pipe tells why.
	_, werr := p.goW.Write([]byte{1})
	p.goW.Close()
	p.takeListener()
	if l := p.proc.ConnectListener; l != nil && p.onListener != nil {
		// Before the status: stage 2's connect canary is trapped too.
		p.onListener(l)
	}
	// EOF without data: the status pipe closed at exec, the agent runs.
	status, err := io.ReadAll(p.status)
	p.status.Close()
	if err != nil {
		return p.abort(fmt.Errorf("launch: read stage 2 status: %w", err))
	}
	ran, se, err := readStatus(status)
	if err != nil {
		return p.abort(fmt.Errorf("launch: read stage 2 canaries: %w", err))
	}
	p.proc.Canaries = append(p.proc.Canaries, ran...)
	if se != nil {
		if se.Step == stage2.StepBuild && p.retry != nil {
			return p.relaunch()
		}
		if se.Hint == "" {
			se.Hint = execHint(se, p.uid)
		}
		return p.abort(se)
	}
	if werr != nil && p.ctx.Err() == nil {
		return p.abort(fmt.Errorf("launch: release stage 2: %w", werr))
	}
	go p.proc.wait(p.stop)
	return p.proc, nil
}

// takeListener receives the connect listener stage 2 sent before it
// waited for the release (nothing when it failed before, or its kernel
// made none: the socket then reads EOF).
func (p *Pending) takeListener() {
	if p.notify == nil {
		return
	}
	defer p.notify.Close()
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	for {
		_, oobn, _, _, err := unix.Recvmsg(int(p.notify.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || oobn == 0 {
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return
		}
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			p.proc.ConnectListener = os.NewFile(uintptr(fds[0]), "seccomp-listener")
		}
		return
	}
}

// relaunch replaces a klock-stage2 of another build, which refused the
// spec before doing anything and is exiting, with the running binary as
// stage 2. It ends the first by its pid, not with cgroup.kill: on Linux
// 6.18 a group once killed kills every process cloned into it afterwards.
func (p *Pending) relaunch() (*Process, error) {
	p.stop()
	_ = p.proc.cmd.Process.Kill()
	_ = p.proc.cmd.Wait()
	q, err := p.retry()
	if err != nil {
		return nil, err
	}
	q.onListener = p.onListener
	if p.relaunched != nil {
		if err := p.relaunched(q.Pid()); err != nil {
			return q.abort(err)
		}
	}
	return q.Release()
}

func (p *Process) wait(stop func() bool) {
	err := p.cmd.Wait()
	stop()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		err = nil
	}
	if ps := p.cmd.ProcessState; ps == nil {
		p.exit = Exit{Code: -1}
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			p.exit = Exit{Code: -1, Signal: ws.Signal()}
		} else {
			p.exit = Exit{Code: ws.ExitStatus()}
		}
	}
	p.err = err
	close(p.done)
}

// Wait blocks until the agent (pid 1 of the session's pid namespace) has
// ended, and returns how. When the agent ends the kernel kills every other
// process of its pid namespace. The error is non-nil only when waiting
// itself failed (e.g. copying Stdout), never for a non-zero exit.
// Wait may be called any number of times, from any goroutine.
func (p *Process) Wait() (Exit, error) {
	<-p.done
	return p.exit, p.err
}

// Done is closed when the agent has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Kill kills every process of the session at once (cgroup.kill).
func (p *Process) Kill() error {
	p.killed.Store(true)
	return p.group.Kill()
}

// Signal sends sig to the agent. The agent is pid 1 of its pid namespace:
// the kernel delivers a signal from outside only when the agent handles it,
// except SIGKILL and SIGSTOP. Use Kill to end the session unconditionally.
func (p *Process) Signal(sig os.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	if p.cmd == nil {
		s, ok := sig.(syscall.Signal)
		if !ok {
			return fmt.Errorf("launch: signal %v: not a syscall.Signal", sig)
		}
		return syscall.Kill(p.Pid, s)
	}
	return p.cmd.Process.Signal(sig)
}
