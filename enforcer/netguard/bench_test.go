//go:build linux

package netguard

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/klocklabs/klock/enforcer/cgroup"
)

// benchRules is the guarded session's rule count; the rule that allows the
// benchmark's destination is the last one, so every connect scans them all.
const benchRules = 64

// BenchmarkConnect measures connect() inside a guarded session cgroup and
// inside an unguarded cgroup in the same run, and reports both and their
// ratio. The loop runs in a child process born in each cgroup (the hooks run
// for the caller's cgroup); the child times its own loop, so process start-up
// is not counted. tcp: socket+connect+close (RST) to a loopback listener;
// udp: connect() alone, repeated on one datagram socket (no handshake, no
// packet: the hook is a large share of the cost, the worst case for the
// ratio).
func BenchmarkConnect(b *testing.B) {
	g := newGuard(b)
	guarded := newCgroup(b, "bench-guarded")
	plain := newCgroup(b, "bench-plain")
	port := tcpListener(b, "tcp4", "127.0.0.1:0")
	_, uport := udpReceiver(b)
	var intents []string
	for i := 0; i < benchRules-2; i++ {
		intents = append(intents, fmt.Sprintf("CONSUMES NET:127.0.1.%d:443/tcp", i+1))
	}
	intents = append(intents,
		fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/tcp", port),
		fmt.Sprintf("CONSUMES NET:127.0.0.1:%d/udp", uport))
	s, err := g.Attach(guarded, ruleset(b, nil, intents...))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		kind string
		port uint16
	}{{"tcp", port}, {"udp", uport}} {
		b.Run(c.kind, func(b *testing.B) {
			target := fmt.Sprintf("127.0.0.1:%d", c.port)
			// Alternate the two cgroups in rounds so drift (other load,
			// frequency, the listener's goroutine) hits both alike.
			const rounds = 4
			var gns, pns float64
			for r := 0; r < rounds; r++ {
				n := (b.N + rounds - 1) / rounds
				gns += benchRun(b, guarded, c.kind, target, n) / rounds
				pns += benchRun(b, plain, c.kind, target, n) / rounds
			}
			b.ReportMetric(gns, "guarded-ns/connect")
			b.ReportMetric(pns, "unguarded-ns/connect")
			b.ReportMetric(gns/pns, "ratio")
		})
	}
}

func benchRun(b *testing.B, cg *cgroup.Group, kind, target string, n int) float64 {
	b.Helper()
	fd, err := os.OpenFile(cg.Path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer fd.Close()
	cmd := exec.Command(os.Args[0], kind, target, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), helperEnv+"=bench")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("bench child: %v", err)
	}
	total, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		b.Fatal(err)
	}
	return total / float64(n)
}

// BenchmarkAttach measures a session's Attach and Close on one cgroup
// (the rules written, the programs attached and detached), with its
// allocations: what every klock session pays for cgroup-net.
func BenchmarkAttach(b *testing.B) {
	g := newGuard(b)
	cg := newCgroup(b, "attach")
	rs := ruleset(b, nil, "CONSUMES NET:127.0.0.1:443/tcp", "CONSUMES NET:10.0.0.0/8:53/udp")
	b.ReportAllocs()
	for b.Loop() {
		s, err := g.Attach(cg, rs)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
