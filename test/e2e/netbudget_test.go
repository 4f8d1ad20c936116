//go:build linux

package e2e

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// An outside attack suite's findings: a budget spent by an agent that
// exits at once, a host resolver on port 53, and pings under NET:raw.

// udpSink counts the datagrams and bytes that reach a UDP port of addr.
type udpSink struct {
	port         int
	dgram, bytes atomic.Int64
}

func startUDPSink(t *testing.T, addr netip.Addr) *udpSink {
	t.Helper()
	pc, err := net.ListenPacket("udp4", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &udpSink{port: pc.LocalAddr().(*net.UDPAddr).Port}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.dgram.Add(1)
			s.bytes.Add(int64(n))
		}
	}()
	return s
}

const (
	burstBudget = 20000
	burstN      = 200
	burstSize   = 1000
	// ipUDPHeaders is what the packet wall counts per datagram beyond its
	// payload (IPv4 and UDP headers): its counts are IP packets.
	ipUDPHeaders = 28
)

// budgetManifest is a strict manifest declaring peer (udp) with
// network.max_egress_bytes: burstBudget.
func budgetManifest(w *harness.World, peer string) []byte {
	return []byte(harness.ManifestYAML(w.Workdir, policy.ModeStrict, append(harness.ProbeIntents(), "CONSUMES "+peer)) +
		"network:\n  max_egress_bytes: " + strconv.Itoa(burstBudget) + "\n")
}

// checkBurstKilled: the session that sent burstN datagrams of burstSize
// bytes to peer and exited at once was killed for its budget, and its
// log says what was delivered (no more than the sink received: wallBytes
// is the per-packet overhead the peer's counts include) and what was sent.
func checkBurstKilled(t *testing.T, o *harness.Outcome, sink *udpSink, peer string, overhead uint64) {
	t.Helper()
	if !o.Res.Killed || o.Res.Interrupted || !strings.Contains(o.Res.Reason, "egress budget") || !strings.Contains(o.Res.Reason, strconv.Itoa(burstBudget)) {
		t.Errorf("not killed for its egress budget: killed %v, reason %q\n%s", o.Res.Killed, o.Res.Reason, o.Dump())
	}
	n := o.Log.Network
	if n == nil || !n.Exceeded || n.MaxEgressBytes != burstBudget || o.Log.Verdict != vlog.VerdictKilled || !strings.Contains(o.Log.Summary, "egress budget exceeded") {
		t.Fatalf("the log: verdict %s (%s), network %+v\n%s", o.Log.Verdict, o.Log.Summary, n, o.Dump())
	}
	// The sink reads what arrived before the session's end; give its
	// reader a moment.
	time.Sleep(100 * time.Millisecond)
	c, ok := peerCounts(o.Log, peer)
	t.Logf("%s: %+v; the sink received %d datagrams, %d bytes; total out %d, attempted %d", peer, c, sink.dgram.Load(), sink.bytes.Load(), n.OutBytes, n.AttemptedOutBytes)
	if !ok {
		t.Fatalf("no counters for %s: %+v", peer, n.Peers)
	}
	if c.OutPackets > uint64(sink.dgram.Load()) || c.OutBytes-overhead*c.OutPackets > uint64(sink.bytes.Load()) {
		t.Errorf("the log says %d datagrams, %d bytes delivered; the sink received %d, %d bytes", c.OutPackets, c.OutBytes, sink.dgram.Load(), sink.bytes.Load())
	}
	if got := sink.bytes.Load(); got > burstBudget {
		t.Errorf("the sink received %d bytes past a budget of %d", got, burstBudget)
	}
	// The budget is spent at its last byte: a session killed right then
	// may have held nothing over it (the agent was killed before its next
	// datagram), so what was sent reached the budget, and sent is
	// delivered plus held.
	if n.AttemptedOutBytes < burstBudget || n.AttemptedOutBytes != n.OutBytes+c.OverBudgetBytes || n.OutBytes > burstBudget+uint64(burstSize)+overhead {
		t.Errorf("sent and delivered: peer %+v, total out %d, attempted %d", c, n.OutBytes, n.AttemptedOutBytes)
	}
}

// TestFastExitUDPBudgetKills: 200 datagrams of 1,000 bytes to a declared
// peer under network.max_egress_bytes: 20000, then an immediate exit:
// the strict session is killed for its budget (not CLEAN), the log's
// delivered bytes are what the peer received (plus the headers the wall
// counts), what the wall dropped past the budget is counted as sent.
func TestFastExitUDPBudgetKills(t *testing.T) {
	addr := hostPeer(t)
	w := harness.NewWorld(t)
	sink := startUDPSink(t, addr)
	ap := netip.AddrPortFrom(addr, uint16(sink.port)).String()
	peer := "NET:" + ap + "/udp"
	step := "udpburst:" + ap + ">" + strconv.Itoa(burstN) + ">" + strconv.Itoa(burstSize)
	o := w.Run(harness.Spec{Manifest: budgetManifest(w, peer), Command: []string{harness.Probe, step}})
	checkBurstKilled(t, o, sink, peer, ipUDPHeaders)
	if c, _ := peerCounts(o.Log, peer); c.Via != "packet wall" {
		t.Errorf("via %q", c.Via)
	}
}

// TestFastExitRelayedUDPBudgetKills: the same to a host loopback service,
// through the loopback relay: the relay's delivered bytes are the
// service's, never what the agent only tried to send.
func TestFastExitRelayedUDPBudgetKills(t *testing.T) {
	testutil.RequirePrivileged(t)
	w := harness.NewWorld(t)
	lo := netip.MustParseAddr("127.0.0.1")
	sink := startUDPSink(t, lo)
	ap := netip.AddrPortFrom(lo, uint16(sink.port)).String()
	peer := "NET:" + ap + "/udp"
	step := "udpburst:" + ap + ">" + strconv.Itoa(burstN) + ">" + strconv.Itoa(burstSize)
	o := w.Run(harness.Spec{Manifest: budgetManifest(w, peer), Command: []string{harness.Probe, step}})
	checkBurstKilled(t, o, sink, peer, 0)
	if c, _ := peerCounts(o.Log, peer); c.Via != "loopback relay (copy)" || c.OutBytes != uint64(sink.bytes.Load()) {
		t.Errorf("via %q, %d bytes delivered, the service received %d", c.Via, c.OutBytes, sink.bytes.Load())
	}
}

// TestFastExitUDPBudgetExits113: through a real `klock run`, the same
// burst ends with 113, the exit of every strict kill.
func TestFastExitUDPBudgetExits113(t *testing.T) {
	addr := hostPeer(t)
	w := harness.NewWorld(t)
	sink := startUDPSink(t, addr)
	ap := netip.AddrPortFrom(addr, uint16(sink.port)).String()
	m := filepath.Join(filepath.Dir(w.Workdir), "budget.yaml")
	if err := os.WriteFile(m, budgetManifest(w, "NET:"+ap+"/udp"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{daemon.SocketEnv + "=" + filepath.Join(t.TempDir(), "none.sock")}
	r := startKlockRun(t, env, "-m", m, "-q", "-e", harness.ProbeEnv+"=1", "--", harness.Probe,
		"udpburst:"+ap+">"+strconv.Itoa(burstN)+">"+strconv.Itoa(burstSize))
	if code := r.wait(t); code != 113 {
		t.Errorf("klock run exited %d, want 113\n%s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), "egress budget") {
		t.Errorf("klock run did not say why:\n%s", r.stderr.String())
	}
}

// TestHostResolverOnPort53ChangesNothing: with a resolver of the host's
// bound on 0.0.0.0:53 (UDP and TCP), a session that declares a host name
// starts (its DNS proxy listens in its own network namespace, not on a
// host address), and the agent resolves the name through it, the proxy
// asking that very resolver, and connects to the answer.
func TestHostResolverOnPort53ChangesNothing(t *testing.T) {
	testutil.RequirePrivileged(t)
	pc, err := net.ListenPacket("udp4", "0.0.0.0:53")
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skip("port 53 is already taken on this host by another program: the test needs to hold 0.0.0.0:53 itself")
	}
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "0.0.0.0:53")
	if errors.Is(err, syscall.EADDRINUSE) {
		pc.Close()
		t.Skip("TCP port 53 is already taken on this host by another program: the test needs to hold 0.0.0.0:53 itself")
	}
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	d := &testDNS{first: "127.0.0.31", then: "127.0.0.31", addr: "127.0.0.1:53"}
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: dns.HandlerFunc(d.serve)}, {Listener: ln, Handler: dns.HandlerFunc(d.serve)}} {
		go func() { _ = s.ActivateAndServe() }()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	w := harness.NewWorld(t)
	a := listenAt(t, "127.0.0.31", 0)
	port := strconv.Itoa(a.port)
	step := "resolve-dial:svc.test>" + port
	// The answer is a loopback address: declared, or the proxy withholds
	// it as a rebinding.
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:svc.test:"+port+"/tcp", "CONSUMES NET:127.0.0.31:9/tcp"),
		Command: []string{harness.Probe, step}, Env: []string{"GODEBUG=netdns=go"},
		DNSUpstreams: []string{d.addr}, Resolve: startResolve})
	if o.Probe[step] != "ok" || !a.accepted() || o.Res.Killed {
		t.Errorf("svc.test: probe %q, accepted %v, killed %v (%s)\n%s", o.Probe[step], a.accepted(), o.Res.Killed, o.Res.Reason, o.Dump())
	}
	if q := d.seen(); len(q) == 0 {
		t.Errorf("the host's resolver on :53 was never asked")
	}
	var proxy *vlog.Backend
	for i := range o.Log.Backends {
		if o.Log.Backends[i].Name == "dns-proxy" {
			proxy = &o.Log.Backends[i]
		}
	}
	if proxy == nil || !strings.Contains(strings.Join(proxy.Details, "\n"), "network namespace") {
		t.Errorf("the log's dns-proxy entry: %+v", proxy)
	}
}

// TestPingUnderNetRaw: with CONSUMES NET:raw, the agent's ICMP echo to a
// declared peer's address is answered (klock lets the agent's group open
// ping sockets in the session's namespace, and the wall lets the echo
// through, counted under NET:raw); the session goes on, strict as it is.
// A raw socket still fails with EPERM: the agent has no CAP_NET_RAW, and
// the log says so.
func TestPingUnderNetRaw(t *testing.T) {
	addr := hostPeer(t)
	peer := startSink(t, addr)
	w := harness.NewWorld(t)
	steps := []string{"pingsend:" + addr.String(), "raw4"}
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:"+netip.AddrPortFrom(addr, uint16(peer.port)).String()+"/tcp", "CONSUMES NET:raw"),
		Command: append([]string{harness.Probe}, steps...)})
	if got := o.Probe[steps[0]]; got != "ok" {
		t.Errorf("ping %s: %q, want a reply\n%s", addr, got, o.Dump())
	}
	if got := o.Probe[steps[1]]; got != "EPERM" {
		t.Errorf("raw socket: %q, want EPERM (no CAP_NET_RAW)", got)
	}
	if o.Res.Killed {
		t.Errorf("killed: %s\n%s", o.Res.Reason, o.Dump())
	}
	c, ok := peerCounts(o.Log, "NET:raw")
	if !ok || c.OutPackets != 1 || c.InPackets != 1 || c.Via != "packet wall" {
		t.Errorf("NET:raw counters: %+v\n%+v", c, o.Log.Network)
	}
	var details string
	for _, b := range o.Log.Backends {
		if b.Name == "netwall" {
			details = strings.Join(b.Details, "\n")
		}
	}
	if !strings.Contains(details, "ping_group_range") || !strings.Contains(details, "CAP_NET_RAW") {
		t.Errorf("the log's netwall entry does not say what NET:raw gives:\n%s", details)
	}
	var names []string
	for _, b := range o.Log.Backends {
		names = append(names, b.Name)
	}
	t.Logf("verdict %s; backends %v", o.Log.Summary, names)
}

// secondAddr puts another address on the link hostPeer made: one no
// intent declares.
func secondAddr(t *testing.T, of netip.Addr) netip.Addr {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	b := of.As4()
	b[3]++
	a := netip.AddrFrom4(b)
	for _, l := range links {
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, x := range addrs {
			if x.IP.Equal(net.IP(of.AsSlice())) {
				if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
					t.Fatal(err)
				}
				return a
			}
		}
	}
	t.Fatalf("no link holds %s", of)
	return netip.Addr{}
}
