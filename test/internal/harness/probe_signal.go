//go:build linux

package harness

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
)

// signalledConnect (ADDR:PORT) connects a blocking TCP socket to ADDR:PORT
// (an IPv4 socket for an IPv4 or v4-mapped address) while another thread
// sends the connecting thread SIGURG every 20µs until connect returned.
// Go handles SIGURG with SA_RESTART, so a connect that waits (trapped for
// the session's loopback relay, or in the handshake) is interrupted and
// restarted over and over: the tracepoints see its exit with the kernel's
// restart codes (ERESTARTSYS) before its answer. The step's outcome is
// connect's last answer.
func signalledConnect(arg string) error {
	ap, err := netip.ParseAddrPort(arg)
	if err != nil {
		return fmt.Errorf("tcp-signalled: %w", err)
	}
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
	if a := ap.Addr().Unmap(); a.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: a.As4(), Port: int(ap.Port())}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return testutil.WhileSignalled(func() error { return unix.Connect(fd, sa) })
}
