//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/test/internal/harness"
)

// IPv6 peers: the session's namespace has IPv6 from its wall (a /64 of
// netwall.Range6, NAT66 on the way out), walled as IPv4 is. The peers
// here live in a network namespace the test makes ("the internet"),
// joined to the host by a veth pair with unique local addresses, so the
// session's packets to them are forwarded and masqueraded by the host.

// requireIPv6 skips (fails under KLOCK_REQUIRE_PRIVILEGED=1) where the
// host has no IPv6 to give a session.
func requireIPv6(t *testing.T) {
	t.Helper()
	testutil.RequirePrivileged(t)
	for _, c := range []string{"all", "default"} {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + c + "/disable_ipv6")
		if err != nil || strings.TrimSpace(string(b)) != "0" {
			testutil.Unavailable(t, "IPv6 is disabled on this host (net.ipv6.conf."+c+".disable_ipv6)")
		}
	}
}

// peer6 is a namespace of the test's with a TCP and a UDP server on
// addr (port: both), reached from the host through the veth link.
type peer6 struct {
	ns   netns.NsHandle
	addr netip.Addr
	tcp  *net.TCPListener
	udp  *net.UDPConn
	port int
}

// ula6 is host h of the test's /64 number n in fd6b:7465:6::/48.
func ula6(n int, h byte) netip.Addr {
	b := netip.MustParseAddr("fd6b:7465:6::").As16()
	b[6], b[7], b[15] = byte(n>>8), byte(n), h
	return netip.AddrFrom16(b)
}

var peer6Seq int

func startPeer6(t *testing.T) *peer6 {
	t.Helper()
	requireIPv6(t)
	peer6Seq++
	n := os.Getpid()%1000*8 + peer6Seq
	p := &peer6{ns: testutil.NewNetNS(t), addr: ula6(n, 2)}
	name := "kle6" + strconv.Itoa(n)
	la := netlink.NewLinkAttrs()
	la.Name = name
	v := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(p.ns))}
	_ = netlink.LinkDel(v)
	if err := netlink.LinkAdd(v); err != nil {
		testutil.Unavailable(t, "veth link: "+err.Error())
	}
	t.Cleanup(func() { _ = netlink.LinkDel(v) })
	if err := netlink.LinkSetUp(v); err != nil {
		t.Fatal(err)
	}
	// Addresses on links already up, without duplicate address
	// detection: usable at once.
	if err := netlink.AddrAdd(v, &netlink.Addr{IPNet: ipNet6(ula6(n, 1), 64), Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatal(err)
	}
	err := testutil.InNetNS(p.ns, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipNet6(p.addr, 64), Flags: unix.IFA_F_NODAD}); err != nil {
			return err
		}
		if p.tcp, err = net.ListenTCP("tcp6", &net.TCPAddr{IP: p.addr.AsSlice()}); err != nil {
			return err
		}
		p.port = p.tcp.Addr().(*net.TCPAddr).Port
		p.udp, err = net.ListenUDP("udp6", &net.UDPAddr{IP: p.addr.AsSlice(), Port: p.port})
		return err
	})
	if err != nil {
		t.Fatalf("the peer's namespace: %v", err)
	}
	t.Cleanup(func() { p.tcp.Close(); p.udp.Close() })
	// The host routes to the peer once the kernel's address worker ran
	// for the host side's address.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		if rs, err := netlink.RouteGet(p.addr.AsSlice()); err == nil && len(rs) > 0 && rs[0].LinkIndex == v.Attrs().Index {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no route from the host to %s on %s after 2s", p.addr, name)
		}
	}
	return p
}

func ipNet6(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 128)}
}

// at is "[addr]:port".
func (p *peer6) at(port int) string { return netip.AddrPortFrom(p.addr, uint16(port)).String() }

// accepted reports whether a connection is queued.
func (p *peer6) accepted() bool {
	p.tcp.SetDeadline(time.Now().Add(50 * time.Millisecond))
	c, err := p.tcp.Accept()
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// received is the datagram the server got within a second ("": none).
func (p *peer6) received() string {
	p.udp.SetReadDeadline(time.Now().Add(time.Second))
	b := make([]byte, 64)
	n, _, err := p.udp.ReadFrom(b)
	if err != nil {
		return ""
	}
	return string(b[:n])
}

// TestIPv6PeerReachable: a strict agent reaches a declared IPv6 peer
// behind the host by TCP and by UDP through the packet wall (counted
// under its peers, via the wall), and is not killed.
func TestIPv6PeerReachable(t *testing.T) {
	p := startPeer6(t)
	w := harness.NewWorld(t)
	tcp, udp := "NET:"+p.at(p.port)+"/tcp", "NET:"+p.at(p.port)+"/udp"
	steps := []string{"tcp:" + p.at(p.port), "udp:" + p.at(p.port)}
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES "+tcp, "CONSUMES "+udp),
		Command: append([]string{harness.Probe}, steps...)})
	if o.Res.Killed {
		t.Fatalf("killed: %s\n%s", o.Res.Reason, o.Dump())
	}
	if o.Probe[steps[0]] != "ok" || !p.accepted() {
		t.Errorf("TCP to the declared IPv6 peer: probe %q\n%s", o.Probe[steps[0]], o.Dump())
	}
	if o.Probe[steps[1]] != "ok" || p.received() != harness.Payload {
		t.Errorf("UDP to the declared IPv6 peer: probe %q, nothing received\n%s", o.Probe[steps[1]], o.Dump())
	}
	for _, name := range []string{tcp, udp} {
		if c, ok := peerCounts(o.Log, name); !ok || c.OutPackets == 0 || c.Via != "packet wall" {
			t.Errorf("the log's counters for %s: %+v\n%+v", name, c, o.Log.Network)
		}
	}
	if c, ok := peerCounts(o.Log, tcp); ok && c.InPackets == 0 {
		t.Errorf("no reply counted for %s: %+v", tcp, c)
	}
	if !logSays(o, "IPv6 fd6b:6c6f:636b:") { // netwall.Range6

		t.Errorf("the wall's log entry does not name the session's IPv6 address\n%s", o.Dump())
	}
}

// TestIPv6UndeclaredPeerRefused: an undeclared IPv6 peer (the declared
// address on another port, and another address) is refused as an
// undeclared IPv4 one is: refused, the violation CONSUMES NET:[addr]:port/
// proto, a strict kill, and nothing reaches the peer.
func TestIPv6UndeclaredPeerRefused(t *testing.T) {
	p := startPeer6(t)
	w := harness.NewWorld(t)
	other := p.port + 1
	if other > 65535 {
		other = p.port - 1
	}
	for _, tc := range []struct{ step, triple string }{
		{"tcp:" + p.at(other), "CONSUMES NET:" + p.at(other) + "/tcp"},
		{"udp:" + p.at(p.port), "CONSUMES NET:" + p.at(p.port) + "/udp"},
		{"tcp:[fd6b:7465:6::99]:" + strconv.Itoa(p.port), "CONSUMES NET:[fd6b:7465:6::99]:" + strconv.Itoa(p.port) + "/tcp"},
	} {
		o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:"+p.at(p.port)+"/tcp"),
			Command: []string{harness.Probe, tc.step}})
		// The strict kill may come before the probe prints its refusal.
		if got := o.Probe[tc.step]; got != "" && got != harness.Refusal() && got != "EPERM" {
			t.Errorf("%s: probe %q, want it refused", tc.step, got)
		}
		if !o.Res.Killed || o.Violation(tc.triple) == nil {
			t.Errorf("strict session not killed for %s\n%s", tc.triple, o.Dump())
		}
	}
	if p.accepted() || p.received() != "" {
		t.Error("an undeclared flow reached the IPv6 peer")
	}
}

// TestIPv6LoopbackRelayed: a host service on [::1] the agent declared is
// reached from its namespace, as a 127.0.0.1 one: handed a socket of the
// host's (AF_INET6).
func TestIPv6LoopbackRelayed(t *testing.T) {
	requireIPv6(t)
	if l, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		testutil.Unavailable(t, "no [::1] on this host: "+err.Error())
	} else {
		l.Close()
	}
	s := startSink(t, netip.IPv6Loopback())
	w := harness.NewWorld(t)
	ap := "[::1]:" + strconv.Itoa(s.port)
	name := "NET:" + ap + "/tcp"
	step := "sendn:" + ap + ">1000"
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES "+name), Command: []string{harness.Probe, step}})
	if o.Probe[step] != "ok" || s.bytes.Load() != 1000 {
		t.Fatalf("the [::1] service: probe %q, it read %d bytes\n%s", o.Probe[step], s.bytes.Load(), o.Dump())
	}
	if c, ok := peerCounts(o.Log, name); !ok || c.OutBytes != 1000 || c.Via != handOffVia() {
		t.Errorf("the log's counters for %s: %+v (want 1000 bytes via %s)\n%+v", name, c, handOffVia(), o.Log.Network)
	}
}

// TestIPv6HostNameAAAA: a declared host name whose resolver answers only
// AAAA (an IPv6 peer) is reached over IPv6 through the session's DNS
// proxy and the wall; an answer with an undeclared unique local address
// is withheld (DNS rebinding, as an RFC 1918 one) and kills the session.
func TestIPv6HostNameAAAA(t *testing.T) {
	p := startPeer6(t)
	w := harness.NewWorld(t)
	rogue := netip.MustParseAddr("fd6b:7465:6::77")
	d := startMsgDNS(t, func(name string) []netip.Addr {
		if strings.HasPrefix(name, "rogue.") {
			return []netip.Addr{rogue}
		}
		return []netip.Addr{p.addr}
	})
	port := strconv.Itoa(p.port)
	noStart := func(context.Context, string) ([]netip.Addr, error) { return nil, nil }
	// The peer's address is a unique local one: answers may give it only
	// because the manifest declares it (on the discard port).
	step := "resolve-dial6:svc6.test>" + port
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:svc6.test:"+port+"/tcp", "CONSUMES NET:["+p.addr.String()+"]:9/tcp"),
		Command: []string{harness.Probe, step}, Env: []string{"GODEBUG=netdns=go"}, DNSUpstreams: []string{d.addr}, Resolve: noStart})
	if o.Probe[step] != "ok" || !p.accepted() || o.Res.Killed {
		t.Errorf("svc6.test over IPv6: probe %q, killed %v\n%s", o.Probe[step], o.Res.Killed, o.Dump())
	}
	if c, ok := peerCounts(o.Log, "NET:svc6.test:"+port+"/tcp"); !ok || c.OutPackets == 0 {
		t.Errorf("svc6.test's counters: %+v\n%+v", c, o.Log.Network)
	}

	step = "resolve-dial6:rogue.svc6.test>" + port
	o = w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:*.svc6.test:"+port+"/tcp"),
		Command: []string{harness.Probe, step}, Env: []string{"GODEBUG=netdns=go"}, DNSUpstreams: []string{d.addr}, Resolve: noStart})
	tr := "CONSUMES NET:[" + rogue.String() + "]:" + port + "/tcp"
	v := o.Violation(tr)
	if o.Probe[step] == "ok" || v == nil || !v.ByDNSProxy() || !strings.Contains(v.Syscall, "unique local") || !o.Res.Killed {
		t.Errorf("an undeclared ULA answer: probe %q, violation %+v, killed %v\n%s", o.Probe[step], v, o.Res.Killed, o.Dump())
	}
}

// TestIPv6NoRoute: a declared IPv6 peer the host has no route to (an
// unreachable route the test adds for its prefix) makes the agent's
// connect fail at once with ENETUNREACH, as it would without klock (the
// host's ICMPv6 error reaches the agent: no silent hang), and the log
// says the peer is unreachable, and why.
func TestIPv6NoRoute(t *testing.T) {
	requireIPv6(t)
	dst := netip.MustParsePrefix(fmt.Sprintf("fd6b:7465:7:%x::/64", os.Getpid()%0xffff))
	r := &netlink.Route{Dst: ipNet6(dst.Addr(), 64), Type: unix.RTN_UNREACHABLE}
	if err := netlink.RouteAdd(r); err != nil {
		t.Fatalf("unreachable route: %v", err)
	}
	t.Cleanup(func() { _ = netlink.RouteDel(r) })
	w := harness.NewWorld(t)
	ap := "[" + dst.Addr().Next().String() + "]:443"
	step := "tcp:" + ap
	start := time.Now()
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:"+ap+"/tcp"), Command: []string{harness.Probe, step}})
	if got := o.Probe[step]; got != "ENETUNREACH" {
		t.Errorf("connect to an unrouted declared peer: %q, want ENETUNREACH\n%s", got, o.Dump())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the session took %v", d)
	}
	if o.Res.Killed {
		t.Errorf("killed for a declared peer: %s", o.Res.Reason)
	}
	if !logSays(o, "unreachable: NET:"+ap+"/tcp: this host has no IPv6 route to") {
		t.Errorf("the log does not say the peer is unreachable\n%s", o.Dump())
	}
}

// logSays reports whether a backend's detail in the session's log holds s.
func logSays(o *harness.Outcome, s string) bool {
	for _, b := range o.Log.Backends {
		for _, d := range b.Details {
			if strings.Contains(d, s) {
				return true
			}
		}
	}
	return false
}
