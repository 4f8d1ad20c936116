//go:build linux

package launch

import (
	"context"
	"testing"
	"time"

	"github.com/klocklabs/klock/internal/testutil"
)

// BenchmarkSessionStart: Spawn, Release and Wait of /bin/true, with three
// stage-2 launchers in turn within each iteration, so that load on the
// machine falls on all of them alike: klock-stage2, klock itself (what
// klock and klockd re-execute without klock-stage2) and this test binary
// (/proc/self/exe). Each reports ms per session.
func BenchmarkSessionStart(b *testing.B) {
	testutil.RequirePrivileged(b)
	dir := b.TempDir()
	stage2, klock := buildStage2(b, dir), buildCmd(b, dir, "klock")
	launchers := []struct{ name, path, want string }{
		{"klock-stage2", stage2, stage2},
		{"klock", klock, klock},
		{"self", "/nonexistent", selfLauncher},
	}
	wd := agentDir(b)
	s := Spec{Ruleset: compile(b, wd, "PROVIDES PROC:/usr/bin/true"), Group: newGroup(b), User: agentUser(),
		Args: []string{"/bin/true"}, NewNetNS: true}
	total := make([]time.Duration, len(launchers))
	session := func(i int) {
		s.Stage2 = launchers[i].path
		start := time.Now()
		p, err := Start(context.Background(), s)
		if err != nil {
			b.Fatal(err)
		}
		if exit, err := p.Wait(); err != nil || exit != (Exit{}) {
			b.Fatalf("%s: %v %v", launchers[i].name, exit, err)
		}
		total[i] += time.Since(start)
		if p.Launcher != launchers[i].want {
			b.Fatalf("%s: launched by %s", launchers[i].name, p.Launcher)
		}
	}
	for i := range launchers { // warm the page cache
		session(i)
	}
	clear(total)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		for i := range launchers {
			session(i)
		}
	}
	for i, l := range launchers {
		b.ReportMetric(float64(total[i].Microseconds())/1000/float64(b.N), "ms/"+l.name)
	}
}

// BenchmarkCanaries: what proving the walls adds to a session's start
// (Spec.Canaries: the write, exec and connect stage 2 tries before the
// agent's exec), against the same session without them, alternated in
// each iteration so load falls on both alike.
func BenchmarkCanaries(b *testing.B) {
	testutil.RequirePrivileged(b)
	stage2 := buildStage2(b, b.TempDir())
	wd := agentDir(b)
	s := Spec{Ruleset: compile(b, wd, "PROVIDES PROC:/usr/bin/true"), Group: newGroup(b), User: agentUser(),
		Args: []string{"/bin/true"}, NewNetNS: true, Stage2: stage2}
	var without, with time.Duration
	session := func(c *Canaries) time.Duration {
		s.Canaries = c
		start := time.Now()
		p, err := Start(context.Background(), s)
		if err != nil {
			b.Fatal(err)
		}
		if exit, err := p.Wait(); err != nil || exit != (Exit{}) {
			b.Fatalf("%v %v", exit, err)
		}
		return time.Since(start)
	}
	canaries := &Canaries{Strict: true, NetWall: "netns"}
	session(nil)
	session(canaries)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		without += session(nil)
		with += session(canaries)
	}
	b.ReportMetric(float64(without.Microseconds())/1000/float64(b.N), "ms/start")
	b.ReportMetric(float64(with.Microseconds())/1000/float64(b.N), "ms/start-canaries")
	b.ReportMetric(float64((with-without).Microseconds())/float64(b.N), "µs/canaries")
}
