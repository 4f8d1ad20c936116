//go:build linux

package netguard

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the process that runs inside the session
// cgroup: with helperEnv set it performs the operations named in its
// arguments with raw syscalls and prints one line per operation, "ok" or
// the errno name, so the tests can assert exact errnos.
const helperEnv = "KLOCK_NETGUARD_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "ops":
		for _, op := range os.Args[1:] {
			fmt.Printf("%s => %s\n", op, result(runOp(op)))
		}
		os.Exit(0)
	case "bench":
		os.Exit(benchChild(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(unix.Errno); ok {
		return unix.ErrnoName(e)
	}
	return "error: " + err.Error()
}

func sockaddr(ap netip.AddrPort, family int) unix.Sockaddr {
	if family == unix.AF_INET {
		return &unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

// runOp performs one operation, "kind:target":
//
//	tcp4:127.0.0.1:P   connect an AF_INET stream socket
//	tcp6:[A]:P         connect an AF_INET6 stream socket (A may be ::ffff:127.0.0.1)
//	udp4:127.0.0.1:P   sendto from an unconnected AF_INET datagram socket
//	udp6:[A]:P         sendto from an unconnected AF_INET6 datagram socket
//	udpc4:127.0.0.1:P  connect an AF_INET datagram socket (no packet)
//	udpc6:[A]:P        connect an AF_INET6 datagram socket (no packet)
//	bind4:127.0.0.1:P  bind an AF_INET stream socket
//	bindu4:127.0.0.1:P bind an AF_INET datagram socket
//	bind6:[A]:P        bind an AF_INET6 stream socket
//	raw4, raw6         socket(AF_INET/AF_INET6, SOCK_RAW, ICMP)
//	packet             socket(AF_PACKET, SOCK_RAW, 0)
//	tfo4:127.0.0.1:P   sendto(MSG_FASTOPEN) on a fresh AF_INET stream socket
//	udp6via4:A:P       sendto an AF_INET sockaddr from an AF_INET6 datagram socket
//	udpc6via4:A:P      connect an AF_INET6 datagram socket to an AF_INET sockaddr
//	mptcp4:A:P         connect an AF_INET MPTCP stream socket
//	listen4            listen() on an unbound AF_INET stream socket (autobind)
//	xN:op              op, N times; the last result
func runOp(op string) error {
	if rest, ok := strings.CutPrefix(op, "x"); ok {
		// xN:op repeats op N times and returns the last result.
		count, inner, _ := strings.Cut(rest, ":")
		n, err := strconv.Atoi(count)
		if err != nil {
			return err
		}
		for i := 0; i < n-1; i++ {
			_ = runOp(inner)
		}
		return runOp(inner)
	}
	kind, target, _ := strings.Cut(op, ":")
	switch kind {
	case "raw4":
		return sock(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	case "raw6":
		return sock(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6)
	case "packet":
		return sock(unix.AF_PACKET, unix.SOCK_RAW, 0)
	case "listen4":
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Listen(fd, 1)
	}
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		return err
	}
	family := unix.AF_INET
	if strings.HasSuffix(kind, "6") || strings.Contains(kind, "6via4") {
		family = unix.AF_INET6
	}
	typ := unix.SOCK_STREAM
	if strings.HasPrefix(kind, "udp") || kind == "bindu4" {
		typ = unix.SOCK_DGRAM
	}
	proto := 0
	if kind == "mptcp4" {
		proto = unix.IPPROTO_MPTCP
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	sa := sockaddr(ap, family)
	if strings.Contains(kind, "via4") {
		sa = sockaddr(ap, unix.AF_INET)
	}
	switch kind {
	case "tfo4":
		return unix.Sendto(fd, []byte("klock"), unix.MSG_FASTOPEN, sa)
	case "udp6via4":
		return unix.Sendto(fd, []byte("klock"), 0, sa)
	case "udpc6via4", "mptcp4":
		return unix.Connect(fd, sa)
	case "tcp4", "tcp6", "udpc4", "udpc6":
		return unix.Connect(fd, sa)
	case "udp4", "udp6":
		return unix.Sendto(fd, []byte("klock"), 0, sa)
	case "bind4", "bindu4", "bind6":
		return unix.Bind(fd, sa)
	}
	return fmt.Errorf("unknown op %q", op)
}

func sock(family, typ, proto int) error {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

// benchChild connects n times to target (kind tcp or udp) and prints the
// total nanoseconds of the loop.
func benchChild(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "bench: want kind target n")
		return 2
	}
	ap, err := netip.ParseAddrPort(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	n, _ := strconv.Atoi(args[2])
	typ := unix.SOCK_STREAM
	if args[0] == "udp" {
		typ = unix.SOCK_DGRAM
	}
	sa := sockaddr(ap, unix.AF_INET)
	if typ == unix.SOCK_DGRAM {
		// One datagram socket, connected over and over: the loop is the
		// connect() syscall alone (hook, route lookup), no handshake.
		fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "socket:", err)
			return 1
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			if err := unix.Connect(fd, sa); err != nil {
				fmt.Fprintln(os.Stderr, "connect:", err)
				return 1
			}
		}
		fmt.Println(time.Since(start).Nanoseconds())
		return 0
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "socket:", err)
			return 1
		}
		// RST on close: no TIME_WAIT, so a long run does not run out of ports.
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		if err := unix.Connect(fd, sa); err != nil {
			fmt.Fprintln(os.Stderr, "connect:", err)
			return 1
		}
		unix.Close(fd)
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}
