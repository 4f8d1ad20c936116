package testutil

import (
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// WhileSignalled runs call on a thread of its own while another goroutine
// sends that thread SIGURG every 20µs until call returned. Go handles
// SIGURG (its preemption signal) with SA_RESTART, so a call that waits
// (a connect a seccomp listener holds, an open of a FIFO with no writer)
// is interrupted and run again over and over: the syscall tracepoints see
// its exits with the kernel's restart codes before its answer.
func WhileSignalled(call func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := os.Getpid(), unix.Gettid()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			_ = unix.Tgkill(pid, tid, unix.SIGURG)
			time.Sleep(20 * time.Microsecond)
		}
	}()
	err := call()
	close(done)
	wg.Wait()
	return err
}
