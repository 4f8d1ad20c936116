//go:build linux

package session

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetNS runs f on a thread of its own moved into the network namespace
// at path (/proc/<pid>/ns/net), then moved back: sockets f makes stay in the namespace, and
// a /proc/sys/net file it opens is the namespace's. A thread that cannot
// be moved back stays locked and ends with its goroutine, never reused in
// the wrong namespace.
func inNetNS(path string, f func() error) error {
	ns, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the session's network namespace: %w", err)
	}
	defer ns.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// loopbackUp brings the current thread's namespace's lo up (stage 2 and
// the packet wall do too; whichever comes first).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// netNSPath is pid's network namespace.
func netNSPath(pid int) string { return fmt.Sprintf("/proc/%d/ns/net", pid) }

// allowPing lets gid open ICMP echo ("ping") sockets in the network
// namespace at path: net.ipv4.ping_group_range, "1 0" (nobody) in a new
// namespace, is per namespace.
func allowPing(path string, gid uint32) error {
	return inNetNS(path, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", fmt.Appendf(nil, "%d %d", gid, gid), 0)
	})
}
