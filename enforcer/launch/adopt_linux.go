//go:build linux

package launch

import (
	"fmt"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"golang.org/x/sys/unix"
)

// Adopt returns the Process of an agent klock did not start: a container's
// init, which its runtime forked into group g and will exec (through
// klock-stage2 when the runtime put it there) once started. Wait and Done
// follow the pid through a pidfd; the exit status belongs to the runtime,
// which reaps the process, so Exit is Code -1 unless klock killed the
// group (then SIGKILL). plan is the Landlock wall stage 2 enforces inside
// the container (nil: none).
func Adopt(pid int, g *cgroup.Group, plan *LandlockPlan) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("launch: adopt pid %d: pidfd_open: %w", pid, err)
	}
	p := &Process{Pid: pid, Landlock: plan, Launcher: "container runtime", group: g, done: make(chan struct{}), exit: Exit{Code: -1}}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == unix.EINTR {
				continue
			} else if err != nil {
				p.err = fmt.Errorf("launch: wait for pid %d: %w", pid, err)
			}
			break
		}
		if p.killed.Load() {
			p.exit = Exit{Code: -1, Signal: unix.SIGKILL}
		}
		close(p.done)
	}()
	return p, nil
}
