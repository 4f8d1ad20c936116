//go:build linux

package daemon

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/session"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

// BenchmarkRunTrue measures `klock run -- /bin/true` in one run, four ways
// interleaved per iteration so they see the same machine state: /bin/true
// alone (bare), a whole embedded session (session.Run, which loads the BPF
// programs itself, as klock run does without klockd), the same session
// through klockd (dial, request, session, result), and session.Run on
// klockd's already-loaded backends in-process (shared: what klockd does
// minus the socket, so klockd-shared is the protocol's cost). It reports
// each in ms, the added latency of each path over bare, and
// klockd/embedded.
//
//	sudo go test ./enforcer/daemon -run '^$' -bench RunTrue -benchtime 20x
func BenchmarkRunTrue(b *testing.B) {
	// Sessions launch through cmd/klock-stage2, as an installed klock and
	// klockd do (it sits beside them).
	launcher := testutil.BuildCommand(b, b.TempDir(), "klock-stage2")
	s := startServer(b, Config{Stage2: launcher})
	_, mpath, data := manifest(b, policy.ModePermissive)
	m, err := policy.Parse(mpath, data)
	if err != nil {
		b.Fatal(err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer devnull.Close()
	opts := session.Options{
		Manifest: m, ManifestPath: mpath, ManifestData: data, User: agentUser(), AllowDegraded: true,
		Command: []string{"/bin/true"}, Env: []string{"PATH=/usr/bin:/bin"},
		Stdin: devnull, Stdout: devnull, Stderr: devnull,
		// The pre-flight backup, as klock run takes it (klockd does too).
		Snapshot: session.Backup(nil),
		Stage2:   launcher,
	}
	ctx := context.Background()
	var bare, embedded, viaDaemon, shared time.Duration
	sharedOpts := opts
	sharedOpts.Backends = s.Backends()
	check := func(res *session.Result, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if res.Exit.Code != 0 || res.Killed {
			b.Fatalf("exit %v killed %v %s", res.Exit, res.Killed, res.Reason)
		}
	}
	// One warm-up of each path (page cache, first BPF load).
	check(session.Run(ctx, opts))
	res, _, err := RunViaDaemon(ctx, s.Addr(), opts)
	check(res, err)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		check(session.Run(ctx, opts))
		t2 := time.Now()
		res, used, err := RunViaDaemon(ctx, s.Addr(), opts)
		if !used {
			b.Fatal("klockd not used")
		}
		check(res, err)
		t3 := time.Now()
		check(session.Run(ctx, sharedOpts))
		t4 := time.Now()
		shared += t4.Sub(t3)
		bare += t1.Sub(t0)
		embedded += t2.Sub(t1)
		viaDaemon += t3.Sub(t2)
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / n / 1e6 }
	b.ReportMetric(ms(bare), "bare-ms")
	b.ReportMetric(ms(embedded), "embedded-ms")
	b.ReportMetric(ms(viaDaemon), "klockd-ms")
	b.ReportMetric(ms(shared), "shared-ms")
	b.ReportMetric(ms(viaDaemon-shared), "protocol-ms")
	b.ReportMetric(ms(embedded-bare), "embedded-added-ms")
	b.ReportMetric(ms(viaDaemon-bare), "klockd-added-ms")
	b.ReportMetric(float64(viaDaemon)/float64(embedded), "klockd/embedded")
	b.ReportMetric(0, "ns/op")
}
