//go:build linux

package e2e

import (
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/cgroup"
	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/enforcer/netwall"
	"github.com/klocklabs/klock/enforcer/vlog"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/test/internal/harness"
)

// A session with NET intents runs in a network namespace
// of its own, joined to the host by netwall's veth and nftables table.
// The peers here are addresses of a dummy link the test adds to the host
// (a session reaches the host's own addresses through the wall's input
// hook, as it reaches any other host through its forward hook).

// hostPeer is a link of the test's (a veth pair: the dummy driver is not
// in every kernel, veth is what netwall needs anyway) with one IPv4
// address, removed at the end.
func hostPeer(t *testing.T) netip.Addr {
	t.Helper()
	testutil.RequirePrivileged(t)
	name := "kltest" + strconv.Itoa(os.Getpid()%100000)
	la := netlink.NewLinkAttrs()
	la.Name = name
	d := &netlink.Veth{LinkAttrs: la, PeerName: name + "p"}
	if err := netlink.LinkAdd(d); err != nil {
		testutil.Unavailable(t, "veth link: "+err.Error())
	}
	t.Cleanup(func() { _ = netlink.LinkDel(d) })
	a := netip.MustParseAddr("10.213.77.1")
	if err := netlink.AddrAdd(d, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(d); err != nil {
		t.Fatal(err)
	}
	return a
}

// sink accepts TCP connections on addr (IPv4 or IPv6) and counts the
// bytes it reads.
type sink struct {
	port  int
	bytes atomic.Int64
	// conns counts the connections it accepted.
	conns atomic.Int64
}

func startSink(t *testing.T, addr netip.Addr) *sink {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &sink{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go func() {
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				s.bytes.Add(n)
			}()
		}
	}()
	return s
}

// icmpEars counts the ICMP packets from the sessions' range (netwall.Range)
// that reach the host's raw sockets for addr.
type icmpEars struct {
	heard atomic.Int64
}

func listenICMP(t *testing.T, addr netip.Addr) *icmpEars {
	t.Helper()
	c, err := net.ListenPacket("ip4:icmp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e := &icmpEars{}
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			if ip, ok := netip.AddrFromSlice(from.(*net.IPAddr).IP.To4()); ok && netwall.Range.Contains(ip) {
				e.heard.Add(1)
			}
		}
	}()
	return e
}

// whileRunning waits for session id's agent, calls f with its pid, then
// ends the agent's wait-stdin step by closing w.
func whileRunning(t *testing.T, id string, w io.Closer, f func(pid int)) {
	defer w.Close()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		g, err := cgroup.Open(id)
		if err != nil {
			continue
		}
		pids, err := g.Procs()
		if err != nil || len(pids) == 0 {
			continue
		}
		f(int(pids[0]))
		return
	}
	t.Errorf("session %s: no agent in 30s", id)
}

// allowPing lets every group open ICMP datagram sockets in pid's network
// namespace (net.ipv4.ping_group_range, "1 0" in a new namespace): the
// agent, with no capability, can then send ICMP echoes that cgroup-net
// does not see (no hook decides an ICMP socket's sends).
func allowPing(t *testing.T, pid int) {
	done := make(chan error, 1)
	go func() {
		// The thread goes back to the host's namespace and is unlocked:
		// a locked thread that ends kills the children it forked (stage 2's
		// parent-death signal).
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer self.Close()
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		err = os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0)
		if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr != nil {
			done <- serr // the thread stays locked, and ends
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	if err := <-done; err != nil {
		t.Errorf("ping_group_range in the agent's namespace: %v", err)
	}
}

func tableExists(t *testing.T, name string) bool {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		if tb.Name == name {
			return true
		}
	}
	return false
}

func linkExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

func peerCounts(l *vlog.Log, peer string) (vlog.PeerCounters, bool) {
	if l.Network == nil {
		return vlog.PeerCounters{}, false
	}
	for _, p := range l.Network.Peers {
		if p.Peer == peer {
			return p, true
		}
	}
	return vlog.PeerCounters{}, false
}

// pingSession runs a strict session with intents whose agent, once the
// test let its group open ICMP datagram sockets in its namespace, sends
// one ICMP echo to addr; during reports whether the session's veth and
// table existed while it ran.
func pingSession(t *testing.T, w *harness.World, addr netip.Addr, intents ...string) (o *harness.Outcome, step string, during bool) {
	t.Helper()
	id := harness.NewID()
	r, wr := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		whileRunning(t, id, wr, func(pid int) {
			// The agent waits for its stdin: the wall, built before it
			// was released, is there (pid may still be stage 2's).
			for deadline := time.Now().Add(30 * time.Second); !during && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				during = linkExists(netwall.LinkName(id)) && tableExists(t, netwall.TableName(id))
			}
			allowPing(t, pid)
		})
	}()
	step = "pingsend:" + addr.String()
	o = w.Run(harness.Spec{ID: id, Intents: append(harness.ProbeIntents(), intents...),
		Command: []string{harness.Probe, "wait-stdin", step}, Stdin: r})
	wg.Wait()
	if linkExists(netwall.LinkName(id)) || tableExists(t, netwall.TableName(id)) {
		t.Errorf("the session's link %s or table %s outlived it", netwall.LinkName(id), netwall.TableName(id))
	}
	return o, step, during
}

// TestPacketWallDropsWhatCgroupNetDoesNotSee: a strict session that
// declared one peer (tcp) and raw sockets sends an ICMP echo to an
// address no intent names: cgroup-net has no hook for an ICMP socket's
// send (and NET:raw declares the socket), so the packet leaves the
// socket, and the packet wall drops it (the log's dropped counter; the
// host's raw ICMP socket hears nothing): NET:raw's pings reach the
// declared peers' addresses only (TestPingUnderNetRaw).
// The session's veth and table exist while it runs and are gone after.
// The cgroup wall alone is shown apart: without NET:raw, the ICMP socket
// is refused before any packet, and the packet wall drops nothing.
func TestPacketWallDropsWhatCgroupNetDoesNotSee(t *testing.T) {
	addr := hostPeer(t)
	peer := startSink(t, addr)
	undeclared := secondAddr(t, addr)
	ears := listenICMP(t, undeclared)
	w := harness.NewWorld(t)
	declared := "CONSUMES NET:" + netip.AddrPortFrom(addr, uint16(peer.port)).String() + "/tcp"

	o, step, during := pingSession(t, w, undeclared, declared, "CONSUMES NET:raw")
	if !during {
		t.Errorf("the session's link or table did not exist while it ran")
	}
	if got := o.Probe[step]; got != "error: no reply" {
		t.Errorf("the ICMP echo: %q, want it sent and unanswered\n%s", got, o.Dump())
	}
	dropped, ok := peerCounts(o.Log, netwall.Dropped)
	if !ok || dropped.OutPackets == 0 {
		t.Errorf("the packet wall dropped nothing: %+v\n%s", o.Log.Network, o.Dump())
	}
	t.Logf("dropped: %+v", dropped)
	if n := ears.heard.Load(); n != 0 {
		t.Errorf("the host heard %d ICMP packet(s) from the session", n)
	}

	// The cgroup wall alone: no NET:raw, the ICMP socket is refused.
	o, step, _ = pingSession(t, w, undeclared, declared)
	if got := o.Probe[step]; got == "ok" || got == "error: no reply" {
		t.Errorf("without NET:raw the ICMP socket was made: %q", got)
	}
	if !o.Res.Killed || o.Violation("CONSUMES NET:raw") == nil {
		t.Errorf("strict session not killed for CONSUMES NET:raw\n%s", o.Dump())
	}
	if d, _ := peerCounts(o.Log, netwall.Dropped); d.OutPackets != 0 {
		t.Errorf("the packet wall saw %d packet(s) cgroup-net should have stopped at the socket", d.OutPackets)
	}
	if n := ears.heard.Load(); n != 0 {
		t.Errorf("the host heard %d ICMP packet(s) from the session", n)
	}
}

// TestEgressCountedAndBudgeted: 1 MB to a declared peer is in the log
// under that peer (>= 1 MB out); with network.max_egress_bytes: 100000
// the same send kills a strict session, and the reason says so.
func TestEgressCountedAndBudgeted(t *testing.T) {
	addr := hostPeer(t)
	w := harness.NewWorld(t)
	const mb = 1 << 20

	peer := startSink(t, addr)
	ap := netip.AddrPortFrom(addr, uint16(peer.port)).String()
	name := "NET:" + ap + "/tcp"
	step := "sendn:" + ap + ">" + strconv.Itoa(mb)
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES "+name), Command: []string{harness.Probe, step}})
	if o.Probe[step] != "ok" || peer.bytes.Load() != mb {
		t.Fatalf("send: %q, the peer read %d bytes\n%s", o.Probe[step], peer.bytes.Load(), o.Dump())
	}
	c, ok := peerCounts(o.Log, name)
	if !ok || c.OutBytes < mb || c.InPackets == 0 || c.Via != "packet wall" {
		t.Errorf("the log's counters for %s: %+v (want >= %d bytes out)\n%+v", name, c, mb, o.Log.Network)
	}
	if o.Log.Network.OutBytes < mb {
		t.Errorf("total out %d, want >= %d", o.Log.Network.OutBytes, mb)
	}
	t.Logf("%s: %+v", name, c)

	budgetKills(t, w, addr, mb)
}

// budgetKills: an agent sending mb bytes to a peer at addr under
// network.max_egress_bytes: 100000 is killed in strict mode, the reason
// and the log say why, and the peer gets no more than the budget.
func budgetKills(t *testing.T, w *harness.World, addr netip.Addr, mb int) {
	t.Helper()
	peer := startSink(t, addr)
	ap := netip.AddrPortFrom(addr, uint16(peer.port)).String()
	step := "sendn:" + ap + ">" + strconv.Itoa(mb)
	m := harness.ManifestYAML(w.Workdir, policy.ModeStrict, append(harness.ProbeIntents(), "CONSUMES NET:"+ap+"/tcp")) + "network:\n  max_egress_bytes: 100000\n"
	o := w.Run(harness.Spec{Manifest: []byte(m), Command: []string{harness.Probe, step}})
	if !o.Res.Killed || !strings.Contains(o.Res.Reason, "egress budget") || !strings.Contains(o.Res.Reason, "100000") {
		t.Errorf("not killed for its egress budget: killed %v, reason %q\n%s", o.Res.Killed, o.Res.Reason, o.Dump())
	}
	if !o.Log.Network.Exceeded || o.Log.Network.MaxEgressBytes != 100000 || !strings.Contains(o.Log.Exit.Reason, "egress budget") {
		t.Errorf("the log: %+v, exit %+v", o.Log.Network, o.Log.Exit)
	}
	if got := peer.bytes.Load(); got > 100000 {
		t.Errorf("the peer read %d bytes past a budget of 100000", got)
	}
}

// TestRelayedEgressCountedAndBudgeted: the same for a host loopback
// service, reached through the loopback relay: 1 MB sent is counted
// exactly under its peer, via the relay; with network.max_egress_bytes:
// 100000 the send kills a strict session, and the reason says so, and
// the service gets no more than the budget. (Before the relay held its
// share of the budget, the agent's 1 MB went through and it exited
// within the budget's 50 ms poll, never killed.)
func TestRelayedEgressCountedAndBudgeted(t *testing.T) {
	testutil.RequirePrivileged(t)
	w := harness.NewWorld(t)
	const mb = 1 << 20
	lo := netip.MustParseAddr("127.0.0.1")

	peer := startSink(t, lo)
	ap := netip.AddrPortFrom(lo, uint16(peer.port)).String()
	name := "NET:" + ap + "/tcp"
	step := "sendn:" + ap + ">" + strconv.Itoa(mb)
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES "+name), Command: []string{harness.Probe, step}})
	if o.Probe[step] != "ok" || peer.bytes.Load() != mb {
		t.Fatalf("send: %q, the peer read %d bytes\n%s", o.Probe[step], peer.bytes.Load(), o.Dump())
	}
	// Without a budget the agent's connect is handed a socket of the
	// host's: the kernel's counters for it (bytes in count the
	// service's FIN as one).
	c, ok := peerCounts(o.Log, name)
	if !ok || c.OutBytes != mb || c.InBytes > 1 || c.OutPackets == 0 || c.Via != handOffVia() {
		t.Errorf("the log's counters for %s: %+v (want exactly %d bytes out, none in, via %s)\n%+v", name, c, mb, handOffVia(), o.Log.Network)
	}
	t.Logf("%s: %+v", name, c)
	budgetKills(t, w, lo, mb)
}

// TestWallOfAKilledKlockIsSwept: kill -9 of klock run (embedded), and of
// klockd running the session, while the agent runs; its namespace goes
// with the agent (and the veth with it), its nftables table stays until
// the next session's start removes it.
func TestWallOfAKilledKlockIsSwept(t *testing.T) {
	testutil.RequirePrivileged(t)
	t.Run("embedded klock run", func(t *testing.T) {
		env := []string{daemon.SocketEnv + "=" + filepath.Join(t.TempDir(), "none.sock")}
		killAndSweep(t, env, func(r *klockRun) { r.cmd.Process.Signal(syscall.SIGKILL) })
	})
	t.Run("klockd", func(t *testing.T) {
		d, sock := startKlockdProcess(t)
		killAndSweep(t, []string{daemon.SocketEnv + "=" + sock}, func(*klockRun) { d.Process.Signal(syscall.SIGKILL); d.Wait() })
	})
}

func killAndSweep(t *testing.T, env []string, crash func(*klockRun)) {
	w := harness.NewWorld(t)
	before := klockTables(t)
	m := filepath.Join(filepath.Dir(w.Workdir), "net.yaml")
	if err := os.WriteFile(m, []byte(harness.ManifestYAML(w.Workdir, policy.ModeStrict, []string{"PROVIDES PROC:" + dash(t),
		"PROVIDES PROC:" + harness.Real(t, "/bin/sleep"), "CONSUMES NET:192.0.2.1:443/tcp"})), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startKlockRun(t, env, "-m", m, "-q", "--", "/bin/sh", "-c", "echo up; exec sleep 600")
	if line := a.line(t); line != "up" {
		t.Fatalf("the session: %q\n%s", line, a.stderr.String())
	}
	var table string
	for name := range klockTables(t) {
		if !before[name] {
			table = name
		}
	}
	if table == "" {
		t.Fatalf("no new klock_ table while the session runs (before: %v)", before)
	}
	link := "kl-" + strings.TrimPrefix(table, "klock_")
	if !linkExists(link) {
		t.Fatalf("no link %s while the session runs", link)
	}
	// The session's id, from its link's alias: its cgroup says when its
	// agent is gone.
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := strings.CutPrefix(l.Attrs().Alias, "klock ")
	if !ok {
		t.Fatalf("link %s has no klock alias: %q", link, l.Attrs().Alias)
	}
	crash(a)
	a.wait(t)
	t.Logf("after the kill: table %s there %v, link %s there %v", table, tableExists(t, table), link, linkExists(link))
	// The agent outlives its klock for a moment (the kernel kills it on
	// its parent's death, asynchronously): the session has ended only when
	// its cgroup is empty, and a sweep before that rightly leaves its wall.
	for deadline := time.Now().Add(30 * time.Second); cgroup.Alive(id); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the killed klock's agent (session %s) still runs 30 s later", id)
		}
	}
	o := w.Run(harness.Spec{Intents: append(harness.ProbeIntents(), "CONSUMES NET:192.0.2.1:443/tcp"), Command: []string{harness.Probe, "print:x"}})
	if o.Res.Killed {
		t.Fatalf("the next session: %s", o.Res.Reason)
	}
	if tableExists(t, table) {
		t.Errorf("table %s of the killed klock's session is still there after the next session", table)
	}
	// The namespace's teardown (the kernel's, asynchronous) takes the veth;
	// the sweep removes it when it is still there.
	for deadline := time.Now().Add(30 * time.Second); linkExists(link); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("link %s outlived its session by 30s", link)
		}
	}
}

func klockTables(t *testing.T) map[string]bool {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, tb := range ts {
		if strings.HasPrefix(tb.Name, "klock_") {
			out[tb.Name] = true
		}
	}
	return out
}

// handOffVia is how the log names the path of a connect to a declared
// host loopback service in a session without an egress budget: handed a
// host socket (addfd), under either file wall (under bpf-lsm the relay
// reports the connects it answers: TestHandOffReported).
func handOffVia() string { return "loopback relay (addfd)" }
