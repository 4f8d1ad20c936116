//go:build linux

package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

func TestParseMountinfo(t *testing.T) {
	hybrid := "25 1 8:1 / / rw - ext4 /dev/vda rw\n" +
		"31 23 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	got, err := parseMountinfo(bufio.NewScanner(strings.NewReader(hybrid)))
	if err != nil || got != "/sys/fs/cgroup/unified" {
		t.Fatalf("hybrid: got %q, %v", got, err)
	}
	escaped := "41 31 0:38 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n"
	if got, _ := parseMountinfo(bufio.NewScanner(strings.NewReader(escaped))); got != "/mnt/cg two" {
		t.Fatalf("escaped: got %q", got)
	}
	// A bind mount of a sub-tree is not the hierarchy root.
	sub := "41 31 0:38 /klock /x rw - cgroup2 cgroup2 rw\n"
	if _, err := parseMountinfo(bufio.NewScanner(strings.NewReader(sub))); !errors.Is(err, ErrNoCgroup2) {
		t.Fatalf("sub-tree mount accepted: %v", err)
	}
}

func TestCreateCloneIntoKill(t *testing.T) {
	testutil.RequirePrivileged(t)
	g, err := Create(fmt.Sprintf("test-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Delete()
	fd, err := g.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & sleep 60")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Born inside the group: /proc/<pid>/cgroup names it before any code ran.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "/klock/"+fmt.Sprintf("test-%d", os.Getpid())) {
		t.Fatalf("child not in session cgroup: %s", data)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("want SIGKILL, got %v", err)
	}
	if err := g.Delete(); err != nil {
		t.Fatalf("delete after kill (the background sleep must be dead too): %v", err)
	}
	if _, err := os.Stat(g.Path); !os.IsNotExist(err) {
		t.Fatalf("group dir still there: %v", err)
	}
}

// TestSweepStale: an empty group older than the age (a killed klock's) is
// removed; an old group with a process in it, and a new empty one (a
// session in its first instant), stay.
func TestSweepStale(t *testing.T) {
	testutil.RequirePrivileged(t)
	old := time.Now().Add(-2 * time.Hour)
	mk := func(name string, when time.Time) *Group {
		g, err := Create(fmt.Sprintf("test-sweep-%s-%d", name, os.Getpid()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Delete() })
		if !when.IsZero() {
			if err := os.Chtimes(g.Path, when, when); err != nil {
				t.Fatal(err)
			}
		}
		return g
	}
	stale, busy, fresh := mk("stale", old), mk("busy", old), mk("fresh", time.Time{})
	fd, err := busy.OpenFD()
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { busy.Kill(); cmd.Wait() }()

	removed, err := SweepStale(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, stale.Path) {
		t.Errorf("removed %v, want %s among them", removed, stale.Path)
	}
	if _, err := os.Stat(stale.Path); !os.IsNotExist(err) {
		t.Errorf("the stale group is still there: %v", err)
	}
	for _, g := range []*Group{busy, fresh} {
		if _, err := os.Stat(g.Path); err != nil {
			t.Errorf("%s was swept: %v", g.Path, err)
		}
	}
}
