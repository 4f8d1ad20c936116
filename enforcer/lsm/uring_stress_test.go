package lsm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// uringStress opens p for writing with O_TRUNC and renames it, rounds
// times each from four goroutines, every ring its own and every other
// operation forced to the ring's io-wq workers (IOSQE_ASYNC), and returns
// how many of them succeeded.
func uringStress(p string, rounds int) int64 {
	var succeeded atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				var flags uint8
				if (i+w)%2 == 0 {
					flags = testutil.IOSQEAsync
				}
				if fd, err := testutil.IOURingOpenatFlags(p, unix.O_WRONLY|unix.O_TRUNC, flags); err == nil {
					unix.Close(fd)
					succeeded.Add(1)
				}
				if testutil.IOURingRenameat(p, p+".moved."+strconv.Itoa(w), flags) == nil {
					succeeded.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return succeeded.Load()
}

// TestIOURingStressNeverHasAnEffect: thousands of io_uring opens for
// writing (O_TRUNC) and renames of a CONSUMES-only file, from several
// rings at once, half of them forced to io-wq worker threads: bpf-lsm
// refuses every one, and the file is as it was.
func TestIOURingStressNeverHasAnEffect(t *testing.T) {
	l := requireLSM(t)
	if l == nil {
		return
	}
	dir := agentWorld(t)
	work := filepath.Join(dir, "work")
	ro := filepath.Join(work, "ro.txt")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ro, []byte("ro\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _, agent := agentSession(t, l, "CONSUMES FILE:"+work+"/**")
	// The session's events are read as a session reads them: a reader
	// that stops holds the kernel's reports back (and its Close with
	// them).
	var refused atomic.Int64
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case ev := <-s.Events():
				if ev.Blocked {
					refused.Add(1)
				}
			case <-s.Lost():
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-drained }()
	step := "uring-stress:" + ro + ">1000"
	cmd, out := agent(step)
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent: %v\n%s", err, out.String())
		}
	case <-time.After(3 * time.Minute): // a hang guard, not a timing
		stacks := kernelStacks(cmd.Process.Pid)
		cmd.Process.Kill()
		// A thread stuck in the kernel (uninterruptible) may never let
		// the kill end the agent: the test ends here rather than wait.
		panic(fmt.Sprintf("the io_uring operations did not complete in 3 minutes: a hang; the agent's threads in the kernel:\n%s\noutput:\n%s", stacks, out.String()))
	}
	if got := strings.TrimSpace(out.String()); got != step+"=0" {
		t.Errorf("io_uring writes and renames that succeeded: %s, want %s=0", got, step)
	}
	if b, err := os.ReadFile(ro); err != nil || string(b) != "ro\n" {
		t.Errorf("ro.txt = %q, %v: want it untouched", b, err)
	}
	if m, _ := filepath.Glob(ro + ".moved.*"); len(m) > 0 {
		t.Errorf("renamed: %v", m)
	}
	if refused.Load() == 0 {
		t.Error("no refusal was reported")
	}
}

// kernelStacks is what each thread of pid is doing in the kernel
// (/proc/<pid>/task/*/stack), for a hang's report.
func kernelStacks(pid int) string {
	var b strings.Builder
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*"))
	for _, task := range tasks {
		comm, _ := os.ReadFile(filepath.Join(task, "comm"))
		stack, _ := os.ReadFile(filepath.Join(task, "stack"))
		b.WriteString(filepath.Base(task) + " " + strings.TrimSpace(string(comm)) + ":\n" + string(stack))
	}
	return b.String()
}
