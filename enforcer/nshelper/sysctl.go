//go:build linux

package nshelper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// MemfdNoexecSysctl is the per-pid-namespace switch SetMemfdNoexec sets.
const MemfdNoexecSysctl = "/proc/sys/vm/memfd_noexec"

// Helper stages: the first joins the pid namespace (for its children),
// the second is its child, in it, and writes the sysctl.
const (
	pidnsEnv      = "_KLOCK_NSHELPER_PIDNS"
	pidnsChildEnv = "_KLOCK_NSHELPER_PIDNS_CHILD"
)

// ErrNoMemfdNoexec: the kernel has no vm.memfd_noexec (before 6.3).
var ErrNoMemfdNoexec = errors.New("nshelper: this kernel has no vm.memfd_noexec")

// SetMemfdNoexec sets vm.memfd_noexec to 2 in the pid namespace pidns (an
// open /proc/<pid>/ns/pid): no memfd made there can be executed.
func SetMemfdNoexec(pidns *os.File) error {
	if _, err := os.Stat(MemfdNoexecSysctl); err != nil {
		return ErrNoMemfdNoexec
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.ExtraFiles = []*os.File{pidns} // fd 3
	cmd.Env = []string{pidnsEnv + "=3"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: set vm.memfd_noexec in the container's pid namespace: %v %s", ErrHelper, err, out)
	}
	return nil
}

func sysctlInit() {
	if os.Getenv(pidnsChildEnv) == "1" {
		// In the pid namespace: the sysctl is the namespace's own.
		if err := os.WriteFile(MemfdNoexecSysctl, []byte("2"), 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	v, ok := os.LookupEnv(pidnsEnv)
	if !ok {
		return
	}
	fd, err := strconv.Atoi(v)
	if err != nil {
		os.Exit(2)
	}
	// setns(CLONE_NEWPID) places the calling thread's later children in
	// the namespace, not itself: the child is forked from this thread.
	runtime.LockOSThread()
	if err := unix.Setns(fd, unix.CLONE_NEWPID); err != nil {
		fmt.Fprintln(os.Stderr, "setns:", err)
		os.Exit(1)
	}
	child := exec.Command("/proc/self/exe")
	child.Env = []string{pidnsChildEnv + "=1"}
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	if err := child.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
