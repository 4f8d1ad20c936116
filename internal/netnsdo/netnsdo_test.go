//go:build linux

package netnsdo

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestDoRunsInTheNamespace: a socket made in f is in the other namespace
// (its loopback, brought up there, holds a listener this namespace cannot
// reach), and the caller's thread is back where it was.
func TestDoRunsInTheNamespace(t *testing.T) {
	testutil.RequirePrivileged(t)
	ns := newNetNS(t)
	var l net.Listener
	if err := Do(ns, func() error {
		if err := LoopbackUp(); err != nil {
			return err
		}
		var err error
		l, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		c.Close()
		t.Fatalf("reached %s from the test's namespace: the listener is not in the other one", l.Addr())
	}
	if err := Do(ns, func() error {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("inside the namespace: %v", err)
	}
}

// newNetNS makes a network namespace held by an open file.
func newNetNS(t *testing.T) *os.File {
	t.Helper()
	fc := make(chan *os.File, 1)
	ec := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the new namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ec <- err
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ec <- err
			return
		}
		fc <- f
	}()
	select {
	case err := <-ec:
		t.Fatal(err)
	case f := <-fc:
		t.Cleanup(func() { f.Close() })
		return f
	}
	return nil
}
