//go:build linux

package perf

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netlink"
)

// sendHelper is the agent of the throughput benchmark: it sends
// KLOCK_PERF_BYTES to KLOCK_PERF_ADDR over TCP, waits for the peer to
// close, and prints the nanoseconds that took.
func sendHelper() int {
	n, _ := strconv.Atoi(os.Getenv("KLOCK_PERF_BYTES"))
	start := time.Now()
	c, err := net.Dial("tcp", os.Getenv("KLOCK_PERF_ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	buf := make([]byte, 256<<10)
	for n > 0 {
		w, err := c.Write(buf[:min(n, len(buf))])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		n -= w
	}
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c)
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}

// discard accepts connections on addr:0, reads each to its end and closes
// it; it returns the port.
func discard(b *testing.B, addr string) int {
	ln, err := net.Listen("tcp4", addr+":0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// netManifest is manifestYAML with NET intents added.
func netManifest(b *testing.B, wd string, nets []string, procs ...string) *policy.Manifest {
	src := manifestYAML(wd, procs...)
	var add strings.Builder
	for _, n := range nets {
		add.WriteString("  - CONSUMES NET:" + n + "\n")
	}
	src = strings.Replace(src, "cost_envelope:", add.String()+"cost_envelope:", 1)
	m, err := policy.Parse("perf.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// startTime runs /usr/bin/true as a strict session and returns how long
// its start took (session.Run until the agent runs) and the whole run.
func startTime(b *testing.B, m *policy.Manifest) (start, total time.Duration) {
	launcher, _ := stage2()
	t0 := time.Now()
	var started time.Time
	res, err := session.Run(context.Background(), session.Options{
		Manifest: m, Command: []string{"/usr/bin/true"}, User: &launch.Credential{UID: agentUID, GID: agentUID},
		LogDir: b.TempDir(), Logger: quiet(), AllowDegraded: true, Stage2: launcher,
		Backend: session.Backend(os.Getenv("KLOCK_TEST_BACKEND")),
		Started: func(int) { started = time.Now() },
	})
	total = time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if res.Killed || res.Exit.ExitCode() != 0 {
		b.Fatalf("session: %v %s", res.Exit, res.Reason)
	}
	if m.Intents[len(m.Intents)-1].Object.Type == policy.ObjNet && res.Log.Network == nil {
		b.Fatalf("a session with NET intents ran without its network wall: %+v", res.Log.Backends)
	}
	return started.Sub(t0), total
}

// BenchmarkNetSessionStart: the start of a strict session (session.Run
// until the agent runs) with NET intents (its own network namespace, the
// veth pair, the nftables table with a peer, a loopback relay) against the
// same session without a NET intent (its own namespace with loopback only),
// alternated in one run. Goal: <= +15 ms. The whole run (the wall's
// removal included) is reported beside it.
func BenchmarkNetSessionStart(b *testing.B) {
	wd := workdir(b)
	port := discard(b, "127.0.0.1")
	plain := manifestFor(b, wd, "/usr/bin/true")
	walled := netManifest(b, wd, []string{"192.0.2.1:443/tcp", "127.0.0.1:" + strconv.Itoa(port) + "/tcp"}, "/usr/bin/true")
	startTime(b, plain) // page cache, BTF
	startTime(b, walled)
	var s0, s1, t0, t1 time.Duration
	for b.Loop() {
		s, t := startTime(b, plain)
		s0, t0 = s0+s, t0+t
		s, t = startTime(b, walled)
		s1, t1 = s1+s, t1+t
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(s0), "ms-start-no-net")
	b.ReportMetric(ms(s1), "ms-start-net")
	b.ReportMetric(ms(s1-s0), "ms-start-added")
	b.ReportMetric(ms(t1-t0), "ms-run-added")
}

// throughputBytes is what each throughput round sends.
const throughputBytes = 256 << 20

// BenchmarkNetThroughput: TCP throughput of an agent sending 256 MiB to a
// declared peer under a strict session (cgroup-net, its own namespace,
// netwall) against the same sender run directly (the host's network, no
// klock), alternated. Two peers: a host address (the path through the
// veth and the nftables table; the direct sender reaches it over the
// host's loopback), and a host loopback service, reached two ways:
// handed a socket of the host's (looprelay's addfd path, the default)
// and copied by looprelay (the path of a session with an egress budget:
// the same manifest with a budget far past the bytes sent). Goal: >= 0.9x.
// The floor beside them: the direct sender to the loopback service while
// a session lives (its agent waiting on its stdin), whose system-wide
// costs (the syscall tracepoints) every process pays then.
func BenchmarkNetThroughput(b *testing.B) {
	wd := workdir(b)
	self, err := testutil.CopySelf(wd, "sender")
	if err != nil {
		b.Fatal(err)
	}
	host := hostAddress(b)
	hp := discard(b, host.String())
	lp := discard(b, "127.0.0.1")
	hostPeer := netip.AddrPortFrom(host, uint16(hp)).String()
	loopPeer := "127.0.0.1:" + strconv.Itoa(lp)
	m := netManifest(b, wd, []string{hostPeer + "/tcp", loopPeer + "/tcp"}, self)
	copied := *m
	copied.Network = &policy.Network{MaxEgressBytes: 1 << 50}
	waiting := netManifest(b, wd, []string{hostPeer + "/tcp", loopPeer + "/tcp"}, "/usr/bin/cat")
	env := func(addr string) []string {
		return []string{"KLOCK_PERF_HELPER=send", "KLOCK_PERF_BYTES=" + strconv.Itoa(throughputBytes), "KLOCK_PERF_ADDR=" + addr}
	}
	var dHost, kHost, dLoop, kLoop, cLoop, fLoop float64
	for b.Loop() {
		out, _ := direct(b, wd, []string{self}, env(hostPeer))
		dHost += ns(b, out)
		out, _ = underKlock(b, m, []string{self}, env(hostPeer))
		kHost += ns(b, out)
		out, _ = direct(b, wd, []string{self}, env(loopPeer))
		dLoop += ns(b, out)
		out, _ = underKlock(b, m, []string{self}, env(loopPeer))
		kLoop += ns(b, out)
		out, _ = underKlock(b, &copied, []string{self}, env(loopPeer))
		cLoop += ns(b, out)
		whileASessionLives(b, waiting, func() {
			out, _ = direct(b, wd, []string{self}, env(loopPeer))
			fLoop += ns(b, out)
		})
	}
	gbps := func(total float64) float64 { return float64(throughputBytes) * 8 * float64(b.N) / total }
	b.ReportMetric(gbps(dHost), "Gbps-host-direct")
	b.ReportMetric(gbps(kHost), "Gbps-host-walled")
	b.ReportMetric(dHost/kHost, "ratio-host")
	b.ReportMetric(gbps(dLoop), "Gbps-loopback-direct")
	b.ReportMetric(gbps(kLoop), "Gbps-loopback-addfd")
	b.ReportMetric(gbps(cLoop), "Gbps-loopback-copied")
	b.ReportMetric(dLoop/kLoop, "ratio-loopback-addfd")
	b.ReportMetric(dLoop/cLoop, "ratio-loopback-copied")
	b.ReportMetric(gbps(fLoop), "Gbps-loopback-floor")
	b.ReportMetric(fLoop/kLoop, "ratio-loopback-addfd-floor")
}

// whileASessionLives runs f while a strict session of m runs, its agent
// (cat) waiting on its stdin.
func whileASessionLives(b *testing.B, m *policy.Manifest, f func()) {
	launcher, _ := stage2()
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := session.Run(context.Background(), session.Options{
			Manifest: m, Command: []string{"/usr/bin/cat"}, Stdin: r, User: &launch.Credential{UID: agentUID, GID: agentUID},
			LogDir: b.TempDir(), Logger: quiet(), AllowDegraded: true, Stage2: launcher,
			Backend: session.Backend(os.Getenv("KLOCK_TEST_BACKEND")),
			Started: func(int) { close(started) },
		})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		b.Fatalf("the waiting session: %v", err)
	}
	f()
	w.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// hostAddress is an IPv4 address of the host outside loopback: a veth
// pair of the benchmark's own, removed at its end.
func hostAddress(b *testing.B) netip.Addr {
	name := "klperf" + strconv.Itoa(os.Getpid()%100000)
	la := netlink.NewLinkAttrs()
	la.Name = name
	v := &netlink.Veth{LinkAttrs: la, PeerName: name + "p"}
	if err := netlink.LinkAdd(v); err != nil {
		b.Fatalf("veth: %v", err)
	}
	b.Cleanup(func() { netlink.LinkDel(v) })
	a := netip.MustParseAddr("10.213.78.1")
	if err := netlink.AddrAdd(v, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		b.Fatal(err)
	}
	if err := netlink.LinkSetUp(v); err != nil {
		b.Fatal(err)
	}
	return a
}
