//go:build linux

package usock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInSessionCgroup(t *testing.T) {
	for path, want := range map[string]bool{
		"/klock":                 true,
		"/klock/20250101-abc":    true,
		"/klock/x/nested":        true,
		"/klockd":                false,
		"/user.slice/session-1":  false,
		"/":                      false,
		"/../../klock/x":         true, // outside klockd's cgroup namespace: fail closed
		"":                       true,
		"/system.slice/klockd.s": false,
	} {
		if got := InSessionCgroup(path); got != want {
			t.Errorf("InSessionCgroup(%q) = %v, want %v", path, got, want)
		}
	}
}

// PeerOf names this very process at the other end of a socketpair-like
// connection: its uid, gid, pid and cgroup as /proc says.
func TestPeerOfSelf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path, 0o600, 0o700, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := net.Dial("unix", path)
		if err == nil {
			defer c.Close()
			var b [1]byte
			_, _ = c.Read(b[:])
		}
	}()
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := PeerOf(c)
	if err != nil {
		t.Fatal(err)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.UID != uint32(os.Getuid()) || p.GID != uint32(os.Getgid()) || !strings.Contains(string(cg), "0::"+p.Cgroup) {
		t.Fatalf("peer %v, want this process (pid %d uid %d gid %d, cgroup %q)", p, os.Getpid(), os.Getuid(), os.Getgid(), cg)
	}
	if !p.InGroup(uint32(os.Getgid())) {
		t.Fatalf("peer %v not in its own primary group", p)
	}
}

// Listen refuses a path that is not a socket and a socket someone listens
// on, and replaces a stale one.
func TestListenStaleAndLive(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, 0o600, 0o700, Owner{}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("over a regular file: %v", err)
	}
	path := filepath.Join(dir, "sub", "s.sock") // the directory is made
	ln, err := Listen(path, 0o640, 0o750, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("socket mode: %v %v", st, err)
	}
	if _, err := Listen(path, 0o600, 0o700, Owner{}); err == nil || !strings.Contains(err.Error(), ErrInUse.Error()) {
		t.Fatalf("over a live socket: %v", err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // leaves a stale socket file behind
	ln, err = Listen(path, 0o600, 0o700, Owner{})
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln.Close()
}
