//go:build linux

package netnsdo

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f on a thread of its own moved into the network namespace ns
// (an open /proc/<pid>/ns/net), then moved back.
func Do(ns *os.File, f func() error) error {
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
			// The thread stays locked and ends with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// DoAt is Do for the namespace at path.
func DoAt(path string, f func() error) error {
	ns, err := os.Open(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	return Do(ns, f)
}

// LoopbackUp brings the calling thread's namespace's lo up (a new
// namespace's is down), if it is not up already.
func LoopbackUp() error {
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
