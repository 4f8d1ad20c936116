//go:build linux

package looprelay

import (
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// BenchmarkRelayThroughput: 64 MiB to a host loopback service that
// discards it, sent from the host directly and from a namespace through
// the relay, alternated in each iteration (the machine's other load
// weighs on both alike). Sender, relay and service share this process: a
// measure of the relay's own cost; test/perf's BenchmarkNetThroughput is
// the figure with a real session.
func BenchmarkRelayThroughput(b *testing.B) {
	testutil.RequirePrivileged(b)
	const size = 64 << 20
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	lo := netip.MustParseAddr("127.0.0.1")
	send := func() error {
		c, err := net.Dial("tcp4", netip.AddrPortFrom(lo, port).String())
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 256<<10)
		for n := size; n > 0; n -= len(buf) {
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
		c.(*net.TCPConn).CloseWrite()
		_, err = io.Copy(io.Discard, c)
		return err
	}
	ns := testutil.NewNetNS(b)
	r := relayFor(b, ns)
	if err := r.Add("peer", lo, policy.PortRange{Lo: port, Hi: port}, policy.ProtoTCP); err != nil {
		b.Fatal(err)
	}
	var direct, relayed time.Duration
	for b.Loop() {
		t := time.Now()
		if err := send(); err != nil {
			b.Fatal(err)
		}
		direct += time.Since(t)
		t = time.Now()
		if err := testutil.InNetNS(ns, send); err != nil {
			b.Fatal(err)
		}
		relayed += time.Since(t)
	}
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbs(direct), "MB/s-direct")
	b.ReportMetric(mbs(relayed), "MB/s-relayed")
	b.ReportMetric(direct.Seconds()/relayed.Seconds(), "ratio")
}

// BenchmarkHandOffThroughput: 64 MiB to a host loopback service that
// discards it, from a child process on the host's network (direct), and
// from a child in a namespace of its own whose connect traps to the
// relay and is handed a socket of the host's, alternated. The same
// sender (raw writes of 256 KiB), the handoff alone: no other wall.
func BenchmarkHandOffThroughput(b *testing.B) {
	testutil.RequirePrivileged(b)
	const size = 64 << 20
	svc := startService(b, "discard")
	step := []string{"send=" + svc.addr() + "," + strconv.Itoa(size)}
	var direct, handed time.Duration
	ns := func(res map[string]string) time.Duration {
		n, err := strconv.ParseInt(res["send"], 10, 64)
		if err != nil {
			b.Fatalf("send: %q", res["send"])
		}
		return time.Duration(n)
	}
	for b.Loop() {
		direct += ns(runDirect(b, step))
		res, r := runAgent(b, step, func(pid int, l *os.File) *Relay {
			r := relayOf(b, pid, svc)
			if err := r.HandOff(l); err != nil {
				b.Fatal(err)
			}
			return r
		})
		if r.Counters()["svc"].Handed != 1 {
			b.Fatalf("not handed over: %+v", r.Counters())
		}
		handed += ns(res)
		r.Close()
	}
	mbs := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbs(direct), "MB/s-direct")
	b.ReportMetric(mbs(handed), "MB/s-handed")
	b.ReportMetric(direct.Seconds()/handed.Seconds(), "ratio")
}
