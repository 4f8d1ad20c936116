//go:build linux

package netwall

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

var testSeq atomic.Uint32

// inNS runs f on a thread in ns; a failed setns fails the test.
func inNS(t testing.TB, ns netns.NsHandle, f func()) {
	t.Helper()
	if err := testutil.InNetNS(ns, func() error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// testVeth adds a veth <prefix><n>, n unique to the test, deleted at the
// end of the test: its other end is <prefix><n>p on the host when ns is
// -1 (a pair with both ends on the host: no dummy module needed), else
// eth0 in the namespace ns.
func testVeth(t testing.TB, prefix string, ns netns.NsHandle) (v *netlink.Veth, n int) {
	t.Helper()
	n = os.Getpid()%200 + int(testSeq.Add(1))
	la := netlink.NewLinkAttrs()
	la.Name = fmt.Sprintf("%s%d", prefix, n)
	v = &netlink.Veth{LinkAttrs: la, PeerName: la.Name + "p"}
	if ns != -1 {
		v.PeerName, v.PeerNamespace = "eth0", netlink.NsFd(int(ns))
	}
	_ = netlink.LinkDel(v)
	if err := netlink.LinkAdd(v); err != nil {
		t.Fatalf("host link: %v", err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(v) })
	return v, n
}

// hostAddrs puts two addresses on a link of the host, removed at the
// end of the test: the declared and the undeclared peer.
func hostAddrs(t testing.TB) (declared, undeclared netip.Addr) {
	t.Helper()
	d, n := testVeth(t, "klwt", -1)
	if p, err := netlink.LinkByName(d.PeerName); err == nil {
		_ = netlink.LinkSetUp(p)
	}
	declared = netip.AddrFrom4([4]byte{10, 204, byte(n), 1})
	undeclared = netip.AddrFrom4([4]byte{10, 204, byte(n), 2})
	for _, a := range []netip.Addr{declared, undeclared} {
		if err := netlink.AddrAdd(d, &netlink.Addr{IPNet: ipnet(a, 32)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := netlink.LinkSetUp(d); err != nil {
		t.Fatal(err)
	}
	return declared, undeclared
}

// remoteNS is a namespace reached by forwarding: a veth from the host
// (10.205.n.1) to it (10.205.n.2), the "internet" seen from the session.
func remoteNS(t testing.TB) (netns.NsHandle, netip.Addr) {
	t.Helper()
	ns := testutil.NewNetNS(t)
	v, n := testVeth(t, "klwr", ns)
	host := netip.AddrFrom4([4]byte{10, 205, byte(n), 1})
	remote := netip.AddrFrom4([4]byte{10, 205, byte(n), 2})
	linkUp(t, v, &netlink.Addr{IPNet: ipnet(host, 24)}, ns, &netlink.Addr{IPNet: ipnet(remote, 24)})
	_ = os.WriteFile("/proc/sys/net/ipv4/conf/"+v.Name+"/forwarding", []byte("1"), 0)
	return ns, remote
}

// linkUp gives the host's end of a testVeth into ns its address host and
// the namespace's end (eth0) remote, and sets both up.
func linkUp(t testing.TB, v *netlink.Veth, host *netlink.Addr, ns netns.NsHandle, remote *netlink.Addr) {
	t.Helper()
	if err := netlink.AddrAdd(v, host); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(v); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Delete()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(l, remote); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
}

// listener counts what reaches a TCP and a UDP port of addr (in the
// namespace ns, or the host's when ns is -1).
type listener struct {
	tcp   net.Listener
	udp   net.PacketConn
	conns atomic.Int64
	bytes atomic.Int64
	dgram atomic.Int64
	port  uint16
}

func listen(t testing.TB, ns netns.NsHandle, addr netip.Addr) *listener {
	t.Helper()
	l := &listener{}
	mk := func() {
		var err error
		l.tcp, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		if err != nil {
			t.Error(err)
			return
		}
		l.port = uint16(l.tcp.Addr().(*net.TCPAddr).Port)
		l.udp, err = net.ListenPacket("udp", netip.AddrPortFrom(addr, l.port).String())
		if err != nil {
			t.Error(err)
		}
	}
	if ns == -1 {
		mk()
	} else {
		inNS(t, ns, mk)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Cleanup(func() { l.tcp.Close(); l.udp.Close() })
	go func() {
		for {
			c, err := l.tcp.Accept()
			if err != nil {
				return
			}
			l.conns.Add(1)
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					l.bytes.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := l.udp.ReadFrom(buf); err != nil {
				return
			}
			l.dgram.Add(1)
		}
	}()
	return l
}

// dial connects from the namespace ns to ap within timeout and sends
// payload bytes.
func dial(t testing.TB, ns netns.NsHandle, ap netip.AddrPort, payload int, timeout time.Duration) error {
	t.Helper()
	var err error
	inNS(t, ns, func() {
		var c net.Conn
		c, err = net.DialTimeout("tcp", ap.String(), timeout)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		buf := make([]byte, 64<<10)
		for payload > 0 {
			n := min(payload, len(buf))
			if _, err = c.Write(buf[:n]); err != nil {
				return
			}
			payload -= n
		}
		// Let the peer read everything before the close.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			_, _ = c.Read(buf[:1])
		}
	})
	return err
}

// ipFamily is "IPv6 " for an IPv6 address, for a failure message.
func ipFamily(a netip.Addr) string {
	if a.Is6() {
		return "IPv6 "
	}
	return ""
}

// reachDeclared connects from the namespace ns to the declared peers (the
// host's listener ld on declared, the remote namespace's lr on remote)
// and sends them data; a failure ends the test.
func reachDeclared(t *testing.T, ns netns.NsHandle, declared netip.Addr, ld *listener, remote netip.Addr, lr *listener) {
	t.Helper()
	if err := dial(t, ns, netip.AddrPortFrom(declared, ld.port), 1000, 3*time.Second); err != nil {
		t.Fatalf("declared %shost peer: %v", ipFamily(declared), err)
	}
	if err := dial(t, ns, netip.AddrPortFrom(remote, lr.port), 1000, 3*time.Second); err != nil {
		t.Fatalf("declared %sremote peer (forwarded): %v", ipFamily(remote), err)
	}
}

// refuseUndeclared tries the undeclared peer and the declared address on
// another port (lu's): neither may connect.
func refuseUndeclared(t *testing.T, ns netns.NsHandle, declared, undeclared netip.Addr, lu *listener) {
	t.Helper()
	if err := dial(t, ns, netip.AddrPortFrom(undeclared, lu.port), 10, 500*time.Millisecond); err == nil {
		t.Errorf("undeclared %speer: connected", ipFamily(undeclared))
	}
	if err := dial(t, ns, netip.AddrPortFrom(declared, lu.port), 10, 500*time.Millisecond); err == nil {
		t.Errorf("declared %saddress, undeclared port: connected", ipFamily(declared))
	}
}

// checkDeclaredPeers: each declared listener (ld on the host, lr behind
// it) got its one connection, and the peers host and remote counted
// packets both ways.
func checkDeclaredPeers(t *testing.T, c map[string]Counts, ld, lr *listener) {
	t.Helper()
	if ld.conns.Load() != 1 || lr.conns.Load() != 1 {
		t.Errorf("declared listeners: %d and %d connections, want 1 each", ld.conns.Load(), lr.conns.Load())
	}
	for _, p := range []string{"host", "remote"} {
		if c[p].OutPackets == 0 || c[p].InPackets == 0 {
			t.Errorf("peer %s counters: %+v", p, c[p])
		}
	}
}

// udpSend sends one datagram from the namespace ns to ap.
func udpSend(t testing.TB, ns netns.NsHandle, ap netip.AddrPort) {
	t.Helper()
	inNS(t, ns, func() {
		c, err := net.Dial("udp", ap.String())
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Errorf("udp send: %v", err)
		}
	})
}

// ping sends one raw ICMP echo request from the namespace ns to a, an
// ICMPv6 one when a is IPv6 (there the kernel fills in the checksum).
func ping(t testing.TB, ns netns.NsHandle, a netip.Addr) {
	t.Helper()
	family, proto, echo := unix.AF_INET, unix.IPPROTO_ICMP, []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1, 'k', 'l'}
	var to unix.Sockaddr
	if a.Is6() {
		family, proto, echo[0] = unix.AF_INET6, unix.IPPROTO_ICMPV6, 128
		to = &unix.SockaddrInet6{Addr: a.As16()}
	} else {
		to = &unix.SockaddrInet4{Addr: a.As4()}
		sum := uint32(0)
		for i := 0; i < len(echo); i += 2 {
			sum += uint32(echo[i])<<8 | uint32(echo[i+1])
		}
		sum = (sum >> 16) + (sum & 0xffff)
		cs := ^uint16(sum + sum>>16)
		echo[2], echo[3] = byte(cs>>8), byte(cs)
	}
	inNS(t, ns, func() {
		fd, err := unix.Socket(family, unix.SOCK_RAW, proto)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, echo, 0, to); err != nil {
			t.Errorf("icmp send: %v", err)
		}
	})
}

// pingReplies counts the echo replies the host sends: with the wall, the
// session's echo requests never reach the host, so nothing answers. It
// reads the host's Icmp OutEchoReps from /proc/net/snmp.
func icmpOutEchoReps(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names, vals []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "Icmp:" {
			if names == nil {
				names = f
			} else {
				vals = f
			}
		}
	}
	for i, n := range names {
		if n == "OutEchoReps" && i < len(vals) {
			var v int64
			fmt.Sscan(vals[i], &v)
			return v
		}
	}
	t.Fatal("no Icmp OutEchoReps in /proc/net/snmp")
	return 0
}

// exists reports whether id's table and link exist.
func exists(t testing.TB, id string) (table, link bool) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == TableName(id) {
			table = true
		}
	}
	_, err = netlink.LinkByName(LinkName(id))
	return table, err == nil
}

func privileged(t testing.TB) {
	t.Helper()
	testutil.RequirePrivileged(t)
	if err := Probe(); err != nil {
		testutil.Unavailable(t, err.Error())
	}
}

func testID(t testing.TB) string {
	return fmt.Sprintf("test-%s-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano())
}
