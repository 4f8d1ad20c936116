//go:build linux

package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// BenchmarkSessionWithStalledReader measures a session that reads 2000
// files (2000 observed triples) through klockd with no klock events
// reader, and with a reader of every record (--all) that never reads,
// interleaved per iteration. The stalled reader must not slow the session
// (stalled/none within noise of 1); it must then be told what it lost.
//
//	sudo go test ./enforcer/daemon -run '^$' -bench StalledReader -benchtime 10x
func BenchmarkSessionWithStalledReader(b *testing.B) {
	launcher := testutil.BuildCommand(b, b.TempDir(), "klock-stage2")
	s := startServer(b, Config{Stage2: launcher})
	// The agent reads 2000 files of its workdir: 2000 observed triples,
	// and nothing for the pre-flight backup to copy.
	wd, mpath, data := manifest(b, policy.ModePermissive)
	for i := range 2000 {
		if err := os.WriteFile(filepath.Join(wd, "f"+strconv.Itoa(i)), []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	run := func(i int) time.Duration {
		cl, err := Dial(s.Addr())
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		res, err := cl.Run(context.Background(), &Run{RunRequest: RunRequest{
			Manifest: data, ManifestPath: mpath, UID: agentUID, GID: agentUID, AllowDegraded: true,
			Argv: []string{"/bin/sh", "-c", "cd " + wd + " && cat f* > /dev/null"}, Env: []string{"PATH=/usr/bin:/bin"}}})
		d := time.Since(t0)
		if err != nil || res.Exit.Code != 0 || res.Killed {
			b.Fatalf("%v %+v", err, res)
		}
		return d
	}
	run(0) // warm-up
	var none, withStalled time.Duration
	var lost uint64
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so that neither pays for the other.
		if i%2 == 0 {
			none += run(i)
		}
		var d time.Duration
		l := withStalledReader(b, s, func() { d = run(i) })
		withStalled += d
		lost += l
		if i%2 == 1 {
			none += run(i)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(lost)/float64(b.N), "lost-records/op")
	n := float64(b.N)
	b.ReportMetric(float64(none)/n/1e6, "none-ms")
	b.ReportMetric(float64(withStalled)/n/1e6, "stalled-ms")
	b.ReportMetric(float64(withStalled)/float64(none), "stalled/none")
	b.ReportMetric(0, "ns/op")
}

// withStalledReader runs f while a klock events --all reader stalls, then
// lets the reader read and returns how many records it was told it lost
// (failing when it was told of none).
func withStalledReader(b *testing.B, s *Server, f func()) uint64 {
	c := newCollector(b)
	gate := make(chan struct{})
	c.gate = gate
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl, err := Dial(s.Addr())
		if err == nil {
			_ = cl.Events(ctx, EventsRequest{Follow: true, All: true}, c.take)
		}
	}()
	for !s.Events().WantsObserved() {
		time.Sleep(time.Millisecond)
	}
	f()
	c.gate = nil
	close(gate)
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		c.mu.Lock()
		var lost uint64
		for _, r := range c.recs {
			lost += r.Lost
		}
		c.mu.Unlock()
		if lost > 0 {
			return lost
		}
	}
	b.Fatal("the stalled reader was not told it lost records")
	return 0
}
