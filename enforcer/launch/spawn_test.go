//go:build linux

package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// markerSpec is an agent that leaves a file behind when it runs at all.
func markerSpec(t *testing.T) (Spec, string) {
	wd := agentDir(t)
	marker := filepath.Join(wd, "ran")
	rs := compile(t, wd, "PROVIDES FILE:${workdir}/**", "PROVIDES PROC:/usr/bin/sh", "PROVIDES PROC:/bin/sh")
	s := Spec{Ruleset: rs, Args: []string{"/bin/sh", "-c", "echo > " + marker}, Env: []string{"PATH=/usr/bin:/bin"},
		NewNetNS: true, Group: newGroup(t), User: agentUser()}
	return s, marker
}

// waitBlockedOnRelease waits until stage 2 (pid) sits in read(2) on its go
// pipe (fd 5 without ExtraFiles): everything before the agent's exec is
// done and only Release remains.
func waitBlockedOnRelease(t *testing.T, pid int) {
	t.Helper()
	want := fmt.Sprintf("%d 0x5 ", unix.SYS_READ)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if err != nil {
			t.Fatalf("stage 2 is gone: %v", err)
		}
		if strings.HasPrefix(string(b), want) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSpawnWaitsForRelease: stage 2 prepares everything and then waits;
// the agent's first instruction comes only after Release.
func TestSpawnWaitsForRelease(t *testing.T) {
	s, marker := markerSpec(t)
	p, err := Spawn(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	pid := p.proc.Pid
	waitBlockedOnRelease(t, pid)
	if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); !strings.HasPrefix(string(cmd), "klock-stage2") {
		t.Fatalf("before Release the session runs %q, want klock's stage 2", cmd)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the agent ran before Release (%v)", err)
	}
	proc, err := p.Release()
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := proc.Wait(); err != nil || exit != (Exit{}) {
		t.Fatalf("agent: %v %v", exit, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the released agent did not run: %v", err)
	}
}

// TestSpawnAbort: a session given up before Release never runs its agent
// and leaves no process behind.
func TestSpawnAbort(t *testing.T) {
	s, marker := markerSpec(t)
	p, err := Spawn(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	waitBlockedOnRelease(t, p.proc.Pid)
	p.Abort()
	procs, err := s.Group.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 0 {
		t.Fatalf("processes left in the session cgroup after Abort: %v", procs)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an aborted session's agent ran (%v)", err)
	}
}
