//go:build linux

package netwall

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/klocklabs/klock/internal/testutil"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func tcpPeer(name string, a netip.Addr, port uint16) Peer {
	return Peer{Name: name, Prefix: netip.PrefixFrom(a, 32), Ports: policy.PortRange{Lo: port, Hi: port}, Proto: policy.ProtoTCP}
}

func setup(t *testing.T, ns netns.NsHandle, cfg Config) *Wall {
	t.Helper()
	w, err := Setup(context.Background(), testID(t), Target{FD: int(ns)}, cfg)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func counters(t *testing.T, w *Wall) map[string]Counts {
	t.Helper()
	c, err := w.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A process in the session's namespace reaches a declared peer on a host
// address (input path) and one behind the host (forwarded, masqueraded);
// an undeclared peer hears nothing, by TCP, UDP or raw ICMP, and the drop
// counter shows the packets were dropped.
func TestDeclaredAndUndeclared(t *testing.T) {
	privileged(t)
	declared, undeclared := hostAddrs(t)
	remote, remoteAddr := remoteNS(t)
	ld := listen(t, -1, declared)
	lu := listen(t, -1, undeclared)
	lr := listen(t, remote, remoteAddr)
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{
		tcpPeer("host", declared, ld.port),
		tcpPeer("remote", remoteAddr, lr.port),
	}})

	reachDeclared(t, ns, declared, ld, remoteAddr, lr)
	before := counters(t, w)[Dropped].OutPackets
	reps := icmpOutEchoReps(t)
	refuseUndeclared(t, ns, declared, undeclared, lu)
	udpSend(t, ns, netip.AddrPortFrom(undeclared, lu.port))
	// The declared address by UDP: not declared.
	udpSend(t, ns, netip.AddrPortFrom(declared, ld.port))
	ping(t, ns, undeclared)
	ping(t, ns, declared)
	ping(t, ns, remoteAddr)
	time.Sleep(200 * time.Millisecond)
	if n := lu.conns.Load(); n != 0 {
		t.Errorf("undeclared listener accepted %d connections", n)
	}
	if n := lu.dgram.Load() + ld.dgram.Load(); n != 0 {
		t.Errorf("%d undeclared datagrams arrived", n)
	}
	if n := icmpOutEchoReps(t) - reps; n != 0 {
		t.Errorf("the host answered %d echo requests from the session", n)
	}
	c := counters(t, w)
	// 2 SYNs at least (retransmits add more), 2 datagrams, 3 echoes.
	if got := c[Dropped].OutPackets - before; got < 7 {
		t.Errorf("drop counter: %d packets, want >= 7", got)
	}
	checkDeclaredPeers(t, c, ld, lr)
}

// The cloud metadata address is dropped even when a peer covers
// everything (IPv6's: TestIPv6MetadataAndLoopbackDropped).
func TestMetadataDropped(t *testing.T) {
	privileged(t)
	checkDroppedUnderAll(t, Peer{Name: "all", Prefix: netip.MustParsePrefix("0.0.0.0/0"), Ports: policy.AllPorts}, Metadata)
}

// checkDroppedUnderAll: with the one peer all (covering every address),
// a SYN from the session to a:80 is still dropped.
func checkDroppedUnderAll(t *testing.T, all Peer, a netip.Addr) {
	t.Helper()
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{all}})
	before := counters(t, w)[Dropped].OutPackets
	_ = dial(t, ns, netip.AddrPortFrom(a, 80), 1, 300*time.Millisecond)
	if got := counters(t, w)[Dropped].OutPackets - before; got == 0 {
		t.Errorf("a SYN to %s was not dropped", a)
	}
}

// checkPingPeer sets up a wall with the peer host (on declared, port 443)
// and the ping peer raw, and pings declared, then undeclared: the first
// echo goes out and its reply comes back, counted under raw; the second is
// dropped. It returns the session's namespace.
func checkPingPeer(t *testing.T, host Peer, declared, undeclared netip.Addr) netns.NsHandle {
	t.Helper()
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{host}, PingPeer: "raw"})
	before := counters(t, w)[Dropped].OutPackets
	ping(t, ns, declared)
	time.Sleep(200 * time.Millisecond)
	// Out: the request went; in: the host's reply came back through the
	// wall.
	if c := counters(t, w); c["raw"].OutPackets != 1 || c["raw"].InPackets != 1 || c["host"].OutPackets != 0 {
		t.Errorf("ping counters %+v, want 1 out, 1 in, under the ping peer", c)
	}
	ping(t, ns, undeclared)
	time.Sleep(200 * time.Millisecond)
	if c := counters(t, w)["raw"]; c.OutPackets != 1 {
		t.Errorf("an echo to an undeclared address went out: %+v", c)
	}
	if got := counters(t, w)[Dropped].OutPackets - before; got != 1 {
		t.Errorf("dropped %d packets, want the one echo", got)
	}
	return ns
}

// Allow opens a peer named by host at run time, and its timeout closes it.
func TestAllowTimeout(t *testing.T) {
	privileged(t)
	declared, _ := hostAddrs(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	ports := policy.PortRange{Lo: l.port, Hi: l.port}
	w := setup(t, ns, Config{Peers: []Peer{{Name: "svc.test", Ports: ports, Proto: policy.ProtoTCP}}})
	ap := netip.AddrPortFrom(declared, l.port)
	if err := dial(t, ns, ap, 1, 300*time.Millisecond); err == nil {
		t.Fatal("connected before Allow")
	}
	if err := w.AllowPeer("svc.test", declared, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := dial(t, ns, ap, 1, 2*time.Second); err != nil {
		t.Fatalf("after Allow: %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	if err := dial(t, ns, ap, 1, 300*time.Millisecond); err == nil {
		t.Error("connected after the timeout")
	}
	if c := counters(t, w)["svc.test"]; c.OutPackets == 0 {
		t.Errorf("svc.test counters: %+v", c)
	}
	if err := w.AllowPeer("nope", declared, time.Second); !errors.Is(err, ErrUnknownPeer) {
		t.Errorf("unknown peer: %v", err)
	}
	// Allow by ports and protocol: a peer made at run time.
	l2 := listen(t, -1, declared)
	if err := w.Allow(declared, policy.PortRange{Lo: l2.port, Hi: l2.port}, policy.ProtoTCP, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := dial(t, ns, netip.AddrPortFrom(declared, l2.port), 1, 2*time.Second); err != nil {
		t.Fatalf("after Allow of new ports: %v", err)
	}
}

// 1 MB to a declared peer shows >= 1 MB out for it; a budget of 100000
// bytes is reported exceeded and the kernel stops the flow.
func TestCountersAndBudget(t *testing.T) {
	privileged(t)
	declared, _ := hostAddrs(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{tcpPeer("peer", declared, l.port)}})
	if err := dial(t, ns, netip.AddrPortFrom(declared, l.port), 1<<20, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := counters(t, w)["peer"]; c.OutBytes < 1<<20 {
		t.Errorf("peer out: %d bytes, want >= 1 MiB", c.OutBytes)
	}
	if ex, _, _ := w.Exceeded(); ex {
		t.Error("Exceeded without a budget")
	}

	l2 := listen(t, -1, declared)
	ns2 := testutil.NewNetNS(t)
	w2 := setup(t, ns2, Config{Peers: []Peer{tcpPeer("peer", declared, l2.port)}, MaxEgressBytes: 100000})
	if ex, n, err := w2.Exceeded(); err != nil || ex {
		t.Fatalf("Exceeded at start: %v %d %v", ex, n, err)
	}
	derr := dial(t, ns2, netip.AddrPortFrom(declared, l2.port), 1<<20, time.Second)
	ex, n, err := w2.Exceeded()
	if err != nil || !ex || n > 100000+1500 {
		t.Errorf("Exceeded after 1 MiB: %v, %d bytes, %v (send: %v; counters %+v)", ex, n, err, derr, counters(t, w2))
	}
	if got := l2.bytes.Load(); got > 100000 {
		t.Errorf("the peer received %d bytes past a budget of 100000", got)
	}
}

// Close removes the table and the links; Sweep removes those of a session
// whose handle was dropped (a killed klock) and spares live ones.
func TestCloseAndSweep(t *testing.T) {
	privileged(t)
	ns := testutil.NewNetNS(t)
	w, err := Setup(context.Background(), testID(t), Target{FD: int(ns)}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tb, l := exists(t, w.ID); !tb || !l {
		t.Fatalf("after Setup: table %v, link %v", tb, l)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if tb, l := exists(t, w.ID); tb || l {
		t.Fatalf("after Close: table %v, link %v", tb, l)
	}

	crashed, err := Setup(context.Background(), testID(t)+"-crashed", Target{FD: int(testutil.NewNetNS(t))}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Its klock is gone: the kernel dropped the owner's lock.
	releaseOwner(crashed.owner)
	crashed.owner = nil
	live := setup(t, testutil.NewNetNS(t), Config{})
	// A wall whose owner lives is kept even when the session's cgroup says
	// otherwise (a session reading its counters after its agent ended, a
	// wall with no session cgroup at all).
	owned := setup(t, testutil.NewNetNS(t), Config{})
	removed, err := Sweep(func(id string) bool { return id != crashed.ID && id != owned.ID })
	if err != nil {
		t.Fatal(err)
	}
	if tb, l := exists(t, crashed.ID); tb || l {
		t.Errorf("after Sweep: crashed session's table %v, link %v (removed %v)", tb, l, removed)
	}
	if tb, l := exists(t, live.ID); !tb || !l {
		t.Errorf("after Sweep: live session's table %v, link %v", tb, l)
	}
	if tb, l := exists(t, owned.ID); !tb || !l {
		t.Errorf("after Sweep: a wall whose owner lives lost its table (%v) or link (%v)", tb, l)
	}
	if _, err := os.Stat(ownerPath(crashed.Short)); !os.IsNotExist(err) {
		t.Errorf("the crashed wall's owner file is still there: %v", err)
	}
	// A table whose link is gone (the namespace died) is swept too.
	orphan, err := Setup(context.Background(), testID(t)+"-orphan", Target{FD: int(testutil.NewNetNS(t))}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := delLink(orphan.Link); err != nil {
		t.Fatal(err)
	}
	releaseOwner(orphan.owner)
	orphan.owner = nil
	if _, err := Sweep(func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if tb, _ := exists(t, orphan.ID); tb {
		t.Error("a table without its link survived Sweep")
	}
}

// The probe leaves nothing behind.
func TestProbe(t *testing.T) {
	privileged(t) // runs Probe
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if strings.HasPrefix(tb.Name, fmt.Sprintf("klock_probe_%d_", os.Getpid())) {
			t.Errorf("probe table %s left behind", tb.Name)
		}
	}
	if _, err := netlink.LinkByName(fmt.Sprintf("klprobe%d", os.Getpid()%100000)); err == nil {
		t.Error("probe link left behind")
	}
	if _, err := ForwardBlockers(); err != nil {
		t.Error(err)
	}
}

// Allowing an address again renews its timeout; a second Setup of the
// same session id fails and leaves the first wall whole.
func TestRenewAndSameID(t *testing.T) {
	privileged(t)
	declared, _ := hostAddrs(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	ports := policy.PortRange{Lo: l.port, Hi: l.port}
	w := setup(t, ns, Config{Peers: []Peer{{Name: "svc.test", Ports: ports, Proto: policy.ProtoTCP}}})
	ap := netip.AddrPortFrom(declared, l.port)
	if err := w.AllowPeer("svc.test", declared, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := w.AllowPeer("svc.test", declared, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := dial(t, ns, ap, 1, 2*time.Second); err != nil {
		t.Errorf("after a renewal to a minute, past the first second: %v", err)
	}

	if _, err := Setup(context.Background(), w.ID, Target{FD: int(testutil.NewNetNS(t))}, Config{}); err == nil {
		t.Fatal("a second Setup of the same id worked")
	}
	if tb, l := exists(t, w.ID); !tb || !l {
		t.Fatalf("the failed Setup removed the first wall: table %v, link %v", tb, l)
	}
	if err := dial(t, ns, ap, 1, 2*time.Second); err != nil {
		t.Errorf("the first wall after the failed Setup: %v", err)
	}
}

// rawUDP sends, from the namespace ns, one UDP datagram built by hand
// (IP_HDRINCL) from src to dst.
func rawUDP(t *testing.T, ns netns.NsHandle, src netip.Addr, dst netip.AddrPort) {
	t.Helper()
	inNS(t, ns, func() {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		payload := []byte("forged")
		p := make([]byte, 20+8+len(payload))
		p[0], p[8], p[9] = 0x45, 64, unix.IPPROTO_UDP
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		copy(p[12:16], src.AsSlice())
		copy(p[16:20], dst.Addr().AsSlice())
		binary.BigEndian.PutUint16(p[20:], 40000)
		binary.BigEndian.PutUint16(p[22:], dst.Port())
		binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
		copy(p[28:], payload) // UDP checksum 0: none (IPv4)
		if err := unix.Sendto(fd, p, 0, &unix.SockaddrInet4{Addr: dst.Addr().As4()}); err != nil {
			t.Errorf("raw send: %v", err)
		}
	})
}

// A packet whose source is not the session's address is dropped, even to
// a declared peer; the same packet with the session's own source arrives.
func TestForgedSource(t *testing.T) {
	privileged(t)
	declared, _ := hostAddrs(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{{Name: "udp", Prefix: netip.PrefixFrom(declared, 32), Ports: policy.PortRange{Lo: l.port, Hi: l.port}, Proto: policy.ProtoUDP}}})
	dst := netip.AddrPortFrom(declared, l.port)
	before := counters(t, w)[Dropped].OutPackets
	rawUDP(t, ns, netip.MustParseAddr("192.0.2.77"), dst)
	time.Sleep(200 * time.Millisecond)
	if n := l.dgram.Load(); n != 0 {
		t.Errorf("a forged datagram arrived (%d)", n)
	}
	if got := counters(t, w)[Dropped].OutPackets - before; got != 1 {
		t.Errorf("drop counter: +%d, want +1", got)
	}
	rawUDP(t, ns, w.Addr, dst)
	// Wait for it (bounded), then check nothing else came.
	for deadline := time.Now().Add(5 * time.Second); l.dgram.Load() == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if n := l.dgram.Load(); n != 1 {
		t.Errorf("the genuine datagram: %d arrived, want 1", n)
	}
}

// A connection a peer's Allow entry accepted outlives the entry's expiry
// (as in stateful firewalls), counted as established; a new one does not.
func TestEstablishedOutlivesExpiry(t *testing.T) {
	privileged(t)
	declared, _ := hostAddrs(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	ports := policy.PortRange{Lo: l.port, Hi: l.port}
	w := setup(t, ns, Config{Peers: []Peer{{Name: "svc.test", Ports: ports, Proto: policy.ProtoTCP}}})
	if err := w.AllowPeer("svc.test", declared, time.Second); err != nil {
		t.Fatal(err)
	}
	ap := netip.AddrPortFrom(declared, l.port)
	var c net.Conn
	inNS(t, ns, func() {
		var err error
		if c, err = net.DialTimeout("tcp4", ap.String(), 2*time.Second); err != nil {
			t.Error(err)
		}
	})
	if c == nil {
		t.FailNow()
	}
	defer c.Close()
	time.Sleep(1500 * time.Millisecond)
	if _, err := c.Write(make([]byte, 10000)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for l.bytes.Load() < 10000 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := l.bytes.Load(); got != 10000 {
		t.Errorf("after the expiry the open connection carried %d bytes, want 10000", got)
	}
	if e := counters(t, w)[Established]; e.OutBytes < 10000 {
		t.Errorf("established counter: %+v", e)
	}
	if err := dial(t, ns, ap, 1, 300*time.Millisecond); err == nil {
		t.Error("a new connection after the expiry went through")
	}
}

// Past the budget, the peer's packets are counted as sent, not delivered
// (Over*, also in Dropped), and Spent says both: a burst of datagrams
// that ends at once is still seen whole.
func TestOverBudgetCountedApart(t *testing.T) {
	privileged(t)
	declared, _ := hostAddrs(t)
	l := listen(t, -1, declared)
	ns := testutil.NewNetNS(t)
	w := setup(t, ns, Config{Peers: []Peer{{Name: "peer", Prefix: netip.PrefixFrom(declared, 32), Ports: policy.PortRange{Lo: l.port, Hi: l.port}, Proto: policy.ProtoUDP}},
		MaxEgressBytes: 20000})
	inNS(t, ns, func() {
		c, err := net.Dial("udp4", netip.AddrPortFrom(declared, l.port).String())
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		for range 200 {
			_, _ = c.Write(make([]byte, 1000))
		}
	})
	time.Sleep(200 * time.Millisecond)
	c := counters(t, w)["peer"]
	sp, err := w.Spent()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peer %+v, spent %+v, the listener read %d datagrams", c, sp, l.dgram.Load())
	if !sp.Over || c.OutBytes >= 20000 || c.OutPackets+c.OverPackets != 200 || c.OverBytes == 0 {
		t.Errorf("peer %+v, spent %+v: want 200 datagrams, under 20000 bytes delivered, the rest over", c, sp)
	}
	if sp.Delivered != c.OutBytes || sp.Attempted != c.OutBytes+c.OverBytes {
		t.Errorf("spent %+v, peer %+v", sp, c)
	}
	if got := l.dgram.Load(); uint64(got) != c.OutPackets {
		t.Errorf("the listener read %d datagrams, the wall delivered %d", got, c.OutPackets)
	}
	if d := counters(t, w)[Dropped]; d.OutPackets < c.OverPackets {
		t.Errorf("dropped %+v holds fewer than the %d over the budget", d, c.OverPackets)
	}
}

// With PingPeer (NET:raw), an ICMP echo request reaches a peer's address
// whatever the peer's ports, and its reply comes back, counted under the
// ping peer; one to an address no peer covers is dropped.
func TestPingPeer(t *testing.T) {
	privileged(t)
	declared, undeclared := hostAddrs(t)
	ns := checkPingPeer(t, tcpPeer("host", declared, 443), declared, undeclared)
	if _, err := Setup(context.Background(), testID(t), Target{FD: int(ns)}, Config{Peers: []Peer{tcpPeer("raw", declared, 443)}, PingPeer: "raw"}); err == nil {
		t.Error("a peer named as the ping peer was accepted")
	}
}
