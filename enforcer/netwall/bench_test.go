//go:build linux

package netwall

import (
	"context"
	"fmt"
	"github.com/klocklabs/klock/internal/testutil"
	"net/netip"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
	"github.com/vishvananda/netns"
)

// BenchmarkSetupClose measures what a session with a network wall adds to
// its start and end: Setup (address, veth pair, namespace side, the
// nftables table with 16 peers) then Close, on a fresh namespace each time
// (the namespace itself comes with the session's clone and is not
// counted), reported apart: Setup delays the agent's start (goal: <= 15
// ms), Close runs after the agent ended, while the session's log is
// written (the kernel's RCU grace periods make most of it).
func BenchmarkSetupClose(b *testing.B) {
	privileged(b)
	var peers []Peer
	for i := 0; i < 15; i++ {
		peers = append(peers, tcpPeer(fmt.Sprintf("p%d", i), netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), 443))
	}
	peers = append(peers, Peer{Name: "svc.test", Ports: policy.PortRange{Lo: 443, Hi: 443}, Proto: policy.ProtoTCP})
	var setup, cl time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ns := testutil.NewNetNS(b)
		b.StartTimer()
		t0 := time.Now()
		w, err := Setup(context.Background(), fmt.Sprintf("bench-%d-%d", i, time.Now().UnixNano()), Target{FD: int(ns)}, Config{Peers: peers, MaxEgressBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		setup, cl = setup+t1.Sub(t0), cl+time.Since(t1)
		b.StopTimer()
		ns.Close()
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(setup), "setup-ms")
	b.ReportMetric(ms(cl), "close-ms")
}

// BenchmarkThroughput measures TCP throughput from a session's namespace
// to a declared peer (a host address) through the wall, against the same
// path (namespace, veth, routing) with no nftables table, alternating the
// two in rounds of 256 MiB, and reports both and their ratio. Goal: >= 0.9.
func BenchmarkThroughput(b *testing.B) {
	privileged(b)
	declared, _ := hostAddrs(b)
	l := listen(b, -1, declared)
	walledNS, plainNS := testutil.NewNetNS(b), testutil.NewNetNS(b)
	cfg := Config{Peers: []Peer{tcpPeer("peer", declared, l.port)}, MaxEgressBytes: 1 << 40}
	walled, err := Setup(context.Background(), fmt.Sprintf("bench-walled-%d", time.Now().UnixNano()), Target{FD: int(walledNS)}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer walled.Close()
	plain, err := Setup(context.Background(), fmt.Sprintf("bench-plain-%d", time.Now().UnixNano()), Target{FD: int(plainNS)}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	if err := delTable(TableName(plain.ID)); err != nil { // the same path, no wall
		b.Fatal(err)
	}
	const size = 256 << 20
	ap := netip.AddrPortFrom(declared, l.port)
	for _, ns := range []netns.NsHandle{walledNS, plainNS} { // ARP, caches
		if err := dial(b, ns, ap, 1<<20, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var wt, pt time.Duration
	for i := 0; i < b.N; i++ {
		// Alternate which goes first, so drift hits both alike.
		first, second := walledNS, plainNS
		fs, ss := &wt, &pt
		if i%2 == 1 {
			first, second, fs, ss = plainNS, walledNS, &pt, &wt
		}
		for _, r := range []struct {
			ns  netns.NsHandle
			sum *time.Duration
		}{{first, fs}, {second, ss}} {
			t0 := time.Now()
			if err := dial(b, r.ns, ap, size, time.Minute); err != nil {
				b.Fatal(err)
			}
			*r.sum += time.Since(t0)
		}
	}
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbs(wt), "walled-MB/s")
	b.ReportMetric(mbs(pt), "plain-MB/s")
	b.ReportMetric(mbs(wt)/mbs(pt), "ratio")
	if c, err := walled.Counters(); err == nil && c["peer"].OutBytes < uint64(size)*uint64(b.N) {
		b.Errorf("the walled transfers did not go through the peer's rule: %+v", c["peer"])
	}
}
