//go:build linux

package ctrtest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemon is a background daemon (containerd, dockerd) a test started.
type daemon struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
}

// startDaemon starts bin with args, logging to a buffer, and waits until
// ready() (polled) says it serves. When it exits first, or is not ready
// within a minute (a bound on bring-up, not a measurement), the test is
// skipped saying why with the log's tail: the one skip allowed under
// KLOCK_REQUIRE_PRIVILEGED=1, a daemon that cannot start on this machine.
// The daemon is stopped (SIGTERM, then SIGKILL) when the test ends.
func startDaemon(t testing.TB, name, bin string, args []string, ready func() bool) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(bin, args...), log: &bytes.Buffer{}, done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	// Its own process group: a test's Ctrl-C does not reach it first, and
	// stop can signal what it forked (dockerd's containerd) too.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Skipf("%s cannot start on this machine: %v", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(d.stop)
	deadline := time.Now().Add(time.Minute)
	for !ready() {
		select {
		case <-d.done:
			t.Skipf("%s cannot start on this machine: it exited (%v):\n%s", name, d.cmd.ProcessState, tail(d.log.String()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Skipf("%s cannot start on this machine: not serving after a minute:\n%s", name, tail(d.log.String()))
		}
	}
	return d
}

func (d *daemon) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
