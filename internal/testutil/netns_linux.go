//go:build linux

package testutil

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NewNetNS makes an empty network namespace (loopback up), closed at the
// end of the test; one that cannot be made is Unavailable.
func NewNetNS(t testing.TB) netns.NsHandle {
	t.Helper()
	RequirePrivileged(t)
	type made struct {
		h   netns.NsHandle
		err error
	}
	ch := make(chan made, 1)
	go func() {
		// The thread that made the namespace is left locked: it dies with
		// the goroutine, never serving another one.
		runtime.LockOSThread()
		h, err := netns.New()
		if err == nil {
			if lo, err := netlink.LinkByName("lo"); err == nil {
				_ = netlink.LinkSetUp(lo)
			}
		}
		ch <- made{h, err}
	}()
	m := <-ch
	if m.err != nil {
		Unavailable(t, "new network namespace: "+m.err.Error())
	}
	t.Cleanup(func() { m.h.Close() })
	return m.h
}

// InNetNS runs f on a thread in ns (left locked: it dies after) and
// returns its error, or the setns's.
func InNetNS(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}
