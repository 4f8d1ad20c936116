//go:build linux

package nshelper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// MemfdNoexecSysctl is the per-pid-namespace switch SetMemfdNoexec sets.
const MemfdNoexecSysctl = "/proc/sys/vm/memfd_noexec"

// pidnsChildEnv marks the helper process SetMemfdNoexec starts in the
// pid namespace: it writes the sysctl and exits.
const pidnsChildEnv = "_KLOCK_NSHELPER_PIDNS_CHILD"

// ErrNoMemfdNoexec: the kernel has no vm.memfd_noexec (before 6.3).
var ErrNoMemfdNoexec = errors.New("nshelper: this kernel has no vm.memfd_noexec")

// Option configures a helper process.
type Option func(*options)

type options struct{ bin *os.File }

// Binary runs the helper process from bin (an open executable whose main
// calls Init first: klock-stage2, launch.OpenHelper), which starts sooner
// than the running binary's re-execution, the default. The caller keeps
// bin open for the call.
func Binary(bin *os.File) Option { return func(o *options) { o.bin = bin } }

func (o *options) command() *exec.Cmd {
	if o.bin != nil {
		cmd := exec.Command("/proc/self/fd/3")
		cmd.ExtraFiles = []*os.File{o.bin} // exec'd by its descriptor: nothing swapped in by path
		return cmd
	}
	return exec.Command("/proc/self/exe")
}

// SetMemfdNoexec sets vm.memfd_noexec to 2 in the pid namespace pidns (an
// open /proc/<pid>/ns/pid): no memfd made there can be executed.
//
// The sysctl is the writer's pid namespace's, so a process in it writes
// it. setns(CLONE_NEWPID) moves no thread, only the children the calling
// thread creates next: one locked thread of this process joins the
// namespace for its children, starts the one helper process there, and is
// put back (or, if that fails, ends with its goroutine: the runtime never
// reuses a thread left locked).
func SetMemfdNoexec(pidns *os.File, opts ...Option) error {
	if _, err := os.Stat(MemfdNoexecSysctl); err != nil {
		return ErrNoMemfdNoexec
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/pid")
		if err != nil {
			done <- fmt.Errorf("%w: own pid namespace: %v", ErrHelper, err)
			return // the thread, locked, ends with the goroutine
		}
		defer own.Close()
		if err := unix.Setns(int(pidns.Fd()), unix.CLONE_NEWPID); err != nil {
			done <- fmt.Errorf("%w: join the container's pid namespace: %v", ErrHelper, err)
			return
		}
		cmd := o.command()
		cmd.Env = []string{pidnsChildEnv + "=1"}
		out, err := cmd.CombinedOutput()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWPID) == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			err = fmt.Errorf("%w: set vm.memfd_noexec in the container's pid namespace: %v %s", ErrHelper, err, out)
		}
		done <- err
	}()
	return <-done
}

func sysctlInit() {
	if os.Getenv(pidnsChildEnv) != "1" {
		return
	}
	// In the pid namespace: the sysctl is the namespace's own.
	if err := os.WriteFile(MemfdNoexecSysctl, []byte("2"), 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
