//go:build linux

package netwall

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// requireIPv6 skips (a failure under KLOCK_REQUIRE_PRIVILEGED=1) where
// the host cannot give sessions IPv6.
func requireIPv6(t testing.TB) {
	t.Helper()
	if err := ipv6Available(); err != nil {
		testutil.Unavailable(t, err.Error())
	}
}

// testULA is address host of the test's /64 number net in fd6b:7465::/32
// ("te"), kind telling host links (1) from remote namespaces (2) apart.
func testULA(kind, net int, host byte) netip.Addr {
	b := netip.MustParseAddr("fd6b:7465::").As16()
	b[4], b[5], b[7], b[15] = byte(kind), byte(net>>8), byte(net), host
	return netip.AddrFrom16(b)
}

// hostAddrs6 puts two IPv6 addresses on a link of the host (without
// duplicate address detection: usable at once): the declared and the
// undeclared peer.
func hostAddrs6(t testing.TB) (declared, undeclared netip.Addr) {
	t.Helper()
	d, n := testVeth(t, "klw6", -1)
	if p, err := netlink.LinkByName(d.PeerName); err == nil {
		_ = netlink.LinkSetUp(p)
	}
	if err := netlink.LinkSetUp(d); err != nil {
		t.Fatal(err)
	}
	declared, undeclared = testULA(1, n, 1), testULA(1, n, 2)
	for _, a := range []netip.Addr{declared, undeclared} {
		if err := netlink.AddrAdd(d, &netlink.Addr{IPNet: ipnet6(a, 128), Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
		waitLocal(t, a)
	}
	return declared, undeclared
}

// waitLocal waits until the host routes a to itself: until then (the
// kernel's address worker) a packet to a is forwarded, not delivered.
func waitLocal(t testing.TB, a netip.Addr) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if rs, err := netlink.RouteGet(a.AsSlice()); err == nil && len(rs) > 0 && rs[0].Type == unix.RTN_LOCAL {
			return
		}
	}
	t.Fatalf("%s is not local after 2s", a)
}

// remoteNS6 is a namespace reached by IPv6 forwarding: a veth from the
// host (…::1/64) to it (…::2/64), the "internet" seen from the session.
func remoteNS6(t testing.TB) (netns.NsHandle, netip.Addr) {
	t.Helper()
	ns := testutil.NewNetNS(t)
	v, n := testVeth(t, "klr6", ns)
	host, remote := testULA(2, n, 1), testULA(2, n, 2)
	linkUp(t, v, &netlink.Addr{IPNet: ipnet6(host, 64), Flags: unix.IFA_F_NODAD}, ns, &netlink.Addr{IPNet: ipnet6(remote, 64), Flags: unix.IFA_F_NODAD})
	return ns, remote
}

func peer6(name string, a netip.Addr, port uint16, proto policy.Proto) Peer {
	return Peer{Name: name, Prefix: netip.PrefixFrom(a, 128), Ports: policy.PortRange{Lo: port, Hi: port}, Proto: proto}
}

// A process in the session's namespace reaches declared IPv6 peers, on a
// host address (input path) and behind the host (forwarded, NAT66), by
// TCP and UDP; an undeclared IPv6 peer, or a declared one on another
// port, hears nothing and the drop counter shows it, as for IPv4.
func TestIPv6DeclaredAndUndeclared(t *testing.T) {
	privileged(t)
	requireIPv6(t)
	declared, undeclared := hostAddrs6(t)
	remote, remoteAddr := remoteNS6(t)
	ld := listen(t, -1, declared)
	lu := listen(t, -1, undeclared)
	lr := listen(t, remote, remoteAddr)
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{
		peer6("host", declared, ld.port, policy.ProtoAny),
		peer6("remote", remoteAddr, lr.port, policy.ProtoTCP),
	}})
	if !w.Addr6.IsValid() || w.NoIPv6 != nil {
		t.Fatalf("the session has no IPv6: %v", w.NoIPv6)
	}
	reachDeclared(t, ns, declared, ld, remoteAddr, lr)
	udpSend(t, ns, netip.AddrPortFrom(declared, ld.port))
	before := counters(t, w)[Dropped].OutPackets
	refuseUndeclared(t, ns, declared, undeclared, lu)
	udpSend(t, ns, netip.AddrPortFrom(undeclared, lu.port))
	time.Sleep(200 * time.Millisecond)
	if n := lu.conns.Load() + lu.dgram.Load(); n != 0 {
		t.Errorf("the undeclared listener got %d connections or datagrams", n)
	}
	if ld.dgram.Load() != 1 {
		t.Errorf("the declared peer got %d datagrams, want 1", ld.dgram.Load())
	}
	c := counters(t, w)
	if got := c[Dropped].OutPackets - before; got < 3 {
		t.Errorf("drop counter: %d packets, want >= 3 (2 SYNs, 1 datagram)", got)
	}
	checkDeclaredPeers(t, c, ld, lr)
}

// A peer named by host only gets IPv6 addresses through AllowPeer (an
// AAAA answer), as IPv4 ones.
func TestIPv6AllowPeer(t *testing.T) {
	privileged(t)
	requireIPv6(t)
	declared, _ := hostAddrs6(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{{Name: "svc.test", Ports: policy.PortRange{Lo: l.port, Hi: l.port}, Proto: policy.ProtoTCP}}})
	ap := netip.AddrPortFrom(declared, l.port)
	if err := dial(t, ns, ap, 1, 300*time.Millisecond); err == nil {
		t.Fatal("connected before AllowPeer")
	}
	if err := w.AllowPeer("svc.test", declared, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := dial(t, ns, ap, 1, 2*time.Second); err != nil {
		t.Fatalf("after AllowPeer: %v", err)
	}
	if c := counters(t, w)["svc.test"]; c.OutPackets == 0 {
		t.Errorf("svc.test counters: %+v", c)
	}
}

// The IPv6 metadata address and the host's ::1 stay dropped under a peer
// covering every IPv6 address.
func TestIPv6MetadataAndLoopbackDropped(t *testing.T) {
	privileged(t)
	requireIPv6(t)
	checkDroppedUnderAll(t, Peer{Name: "all6", Prefix: netip.MustParsePrefix("::/0"), Ports: policy.AllPorts}, Metadata6)
}

// On a host whose IPv6 is disabled (its sysctls say so: a copy here) the
// wall is IPv4's alone: Setup takes IPv6 peers, NoIPv6 names the sysctl
// and the fix, IPv4 peers are reached, and an IPv6 address cannot be
// allowed.
func TestIPv6DisabledOnTheHost(t *testing.T) {
	privileged(t)
	conf := t.TempDir() + "/"
	for _, c := range []string{"all", "default"} {
		if err := os.MkdirAll(conf+c, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conf+c+"/disable_ipv6", []byte(map[string]string{"all": "1\n", "default": "0\n"}[c]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	real := ipv6Conf
	ipv6Conf = conf
	t.Cleanup(func() { ipv6Conf = real })
	declared, _ := hostAddrs(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{tcpPeer("v4", declared, l.port), peer6("v6", netip.MustParseAddr("2001:db8::10"), 443, policy.ProtoTCP),
		{Name: "host", Ports: policy.PortRange{Lo: 443, Hi: 443}}}})
	if w.Addr6.IsValid() || !errors.Is(w.NoIPv6, ErrNoIPv6) || !strings.Contains(w.NoIPv6.Error(), "sysctl -w net.ipv6.conf.all.disable_ipv6=0") {
		t.Errorf("Addr6 %v, NoIPv6 %v", w.Addr6, w.NoIPv6)
	}
	if err := dial(t, ns, netip.AddrPortFrom(declared, l.port), 1, 2*time.Second); err != nil {
		t.Errorf("the IPv4 peer: %v", err)
	}
	if err := w.AllowPeer("host", netip.MustParseAddr("2001:db8::11"), time.Minute); !errors.Is(err, ErrUnsupported) {
		t.Errorf("AllowPeer of an IPv6 address: %v, want ErrUnsupported", err)
	}
}

// With PingPeer, an ICMPv6 echo request reaches a declared IPv6 peer's
// address and its reply comes back, counted under the ping peer; one to
// an undeclared address is dropped.
func TestIPv6PingPeer(t *testing.T) {
	privileged(t)
	requireIPv6(t)
	declared, undeclared := hostAddrs6(t)
	checkPingPeer(t, peer6("host", declared, 443, policy.ProtoTCP), declared, undeclared)
}

// Before turning on IPv6 forwarding, a link whose accept_ra is 1 and that
// holds routes router advertisements made keeps accepting them (2); a
// link with none is left alone.
func TestKeepRouterAdvertisements(t *testing.T) {
	privileged(t)
	requireIPv6(t)
	d, n := testVeth(t, "klra", -1)
	name := d.Name
	for _, l := range []string{name, name + "p"} {
		if err := os.WriteFile(ipv6Conf+l+"/accept_ra", []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: l}}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipnet6(testULA(3, n, 0), 64), Protocol: unix.RTPROT_RA}
	if err := netlink.RouteAdd(r); err != nil {
		t.Fatalf("a route as from a router advertisement: %v", err)
	}
	if err := keepRouterAdvertisements(); err != nil {
		t.Fatal(err)
	}
	for l, want := range map[string]string{name: "2", name + "p": "1"} {
		if b, _ := os.ReadFile(ipv6Conf + l + "/accept_ra"); strings.TrimSpace(string(b)) != want {
			t.Errorf("%s accept_ra %q, want %s", l, b, want)
		}
	}
}
