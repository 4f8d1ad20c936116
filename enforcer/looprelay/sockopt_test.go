//go:build linux

package looprelay

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestLockToPeer: a socket locked to a peer admits segments from that
// address and port only, and the lock holds: were a handed-over socket
// made to listen, a client from any other port never gets in (its SYN
// is dropped), one from the peer's port does; the filter can be neither
// detached nor replaced.
func TestLockToPeer(t *testing.T) {
	testutil.RequirePrivileged(t)
	lo := [4]byte{127, 0, 0, 1}
	client := func(port int) int {
		s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(s) })
		if err := unix.Bind(s, &unix.SockaddrInet4{Addr: lo, Port: port}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	peer := client(0)
	sa, _ := unix.Getsockname(peer)
	peerPort := sa.(*unix.SockaddrInet4).Port
	other := client(0)

	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ln)
	if err := lockToPeer(ln, netip.AddrPortFrom(netip.AddrFrom4(lo), uint16(peerPort))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: lo}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 8); err != nil {
		t.Fatal(err)
	}
	la, _ := unix.Getsockname(ln)
	// The other client first: loopback delivers in order, so its SYN
	// has been judged when the peer's handshake completes.
	for _, s := range []int{other, peer} {
		if err := unix.Connect(s, la); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			t.Fatal(err)
		}
	}
	pf := []unix.PollFd{{Fd: int32(ln), Events: unix.POLLIN}}
	if _, err := unix.Poll(pf, 10000); err != nil {
		t.Fatal(err)
	}
	var got []int
	for {
		c, from, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
		if err != nil {
			break
		}
		unix.Close(c)
		got = append(got, from.(*unix.SockaddrInet4).Port)
	}
	if len(got) != 1 || got[0] != peerPort {
		t.Errorf("accepted clients from ports %v, want only the peer's %d", got, peerPort)
	}
	if err := unix.SetsockoptInt(ln, unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("detach the filter: %v, want EPERM", err)
	}
	if err := lockToPeer(ln, netip.AddrPortFrom(netip.AddrFrom4(lo), 1)); !errors.Is(err, unix.EPERM) {
		t.Errorf("replace the filter: %v, want EPERM", err)
	}
}
