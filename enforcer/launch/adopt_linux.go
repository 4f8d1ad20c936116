//go:build linux

package launch

import (
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"golang.org/x/sys/unix"
)

// AdoptedCanaries are an adopted container's canaries: the ones the wall
// its stage 2 reads asks for (PlanCanaries) are reported on Report, the
// read end of the pipe stage 2 writes (stage2.CanaryFlag), which Adopt
// takes over (nil: none was tried); Skipped are the others.
type AdoptedCanaries struct {
	Skipped []CanaryResult
	Report  *os.File
}

// Adopt returns the Process of an agent klock did not start: a container's
// init, which its runtime forked into group g and will exec (through
// klock-stage2 when the runtime put it there) once started. Wait and Done
// follow the pid through a pidfd; the exit status belongs to the runtime,
// which reaps the process, so Exit is Code -1 unless klock killed the
// group (then SIGKILL). plan is the Landlock wall stage 2 enforces inside
// the container (nil: none). With canaries, the process's Canaries are
// known (CanariesKnown) once stage 2 has reported them, before the
// entrypoint's exec, or once the init ended without.
func Adopt(pid int, g *cgroup.Group, plan *LandlockPlan, canaries *AdoptedCanaries) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if canaries != nil {
			canaries.Report.Close()
		}
		return nil, fmt.Errorf("launch: adopt pid %d: pidfd_open: %w", pid, err)
	}
	p := &Process{Pid: pid, Landlock: plan, Launcher: "container runtime", group: g, done: make(chan struct{}), exit: Exit{Code: -1}}
	var report *canaryReader
	if canaries != nil {
		p.Canaries = canaries.Skipped
	}
	if canaries != nil && canaries.Report != nil {
		p.canariesIn = make(chan struct{})
		report = &canaryReader{f: canaries.Report}
	}
	go p.follow(fd, report)
	return p, nil
}

// follow waits for the adopted process to end, reading its stage 2's
// canary report meanwhile.
func (p *Process) follow(pidfd int, report *canaryReader) {
	defer unix.Close(pidfd)
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		if report != nil {
			fds = append(fds, unix.PollFd{Fd: int32(report.f.Fd()), Events: unix.POLLIN})
		}
		if _, err := unix.Poll(fds, -1); err == unix.EINTR {
			continue
		} else if err != nil {
			p.err = fmt.Errorf("launch: wait for pid %d: %w", p.Pid, err)
			break
		}
		if report != nil && fds[1].Revents != 0 && report.read() {
			p.canariesDone(report)
			report = nil
		}
		if fds[0].Revents != 0 {
			break
		}
	}
	if report != nil {
		report.read() // what it wrote before it ended
		p.canariesDone(report)
	}
	if p.killed.Load() {
		p.exit = Exit{Code: -1, Signal: unix.SIGKILL}
	}
	close(p.done)
}

// canariesDone records what the report said and closes it.
func (p *Process) canariesDone(r *canaryReader) {
	r.f.Close()
	ran, se, err := readStatus(r.buf)
	p.Canaries = append(p.Canaries, ran...)
	switch {
	case err != nil:
		p.canaryErr = &StageError{Step: "canary", Msg: fmt.Sprintf("unreadable canary report %q: %v", r.buf, err)}
	case se != nil:
		p.canaryErr = se
	}
	close(p.canariesIn)
}

// canaryReader collects a container's canary report from its pipe (read
// end non-blocking: a read before any writer came returns EOF, so it is
// read only once poll says there is something: data, or the writer's
// close).
type canaryReader struct {
	f   *os.File
	buf []byte
}

// read takes what is in the pipe; true at its end (the writer closed it:
// stage 2 exec'd the entrypoint, or exited).
func (r *canaryReader) read() bool {
	var b [4096]byte
	for len(r.buf) < 1<<20 {
		n, err := unix.Read(int(r.f.Fd()), b[:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return false // EAGAIN: the writer is still at it
		case n == 0:
			return true
		}
		r.buf = append(r.buf, b[:n]...)
	}
	return true
}
