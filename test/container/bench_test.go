//go:build linux

package container

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/daemon"
	"github.com/klocklabs/klock/test/internal/ctrtest"
	"github.com/klocklabs/klock/test/internal/harness"
)

// BenchmarkRuncRunTrue: `run` of a busybox container running `true`, on
// runc and on crun, each bare and through klock-runtime (the manifest as an
// annotation, a klockd serving in this process), in the same run on the
// same root filesystem and workdir: runc, klock-runtime+runc, crun,
// klock-runtime+crun side by side (crun's skipped where it refuses the
// host: ctrtest.Crun). Each sub-benchmark reports its ns/op. klock-runtime's
// also report added-ms, the median over their iterations of (its run - a
// bare run of the same runtime just before it, untimed): paired, so that
// the machine's other load falls on both sides. The goal is added-ms <= 10
// (docs/benchmarks.md). What klock-runtime adds: the wrapper and
// klock-runtime's start, the spec rewrite and klock-stage2's copy into the
// state directory; the createRuntime hook (klock oci-hook) and klockd's
// session start (leases, kernel backends on the container's cgroup,
// wall.json, the pre-flight backup) while the init waits; klock-stage2's
// wall before the entrypoint; the poststop hook waiting for the session's
// end and its verification log. KLOCK_CTR_KLOCKD_LOG=FILE logs klockd's
// side.
func BenchmarkRuncRunTrue(b *testing.B) {
	w := newWorld(b)
	shippedLinger(b)
	rootfs := ctrtest.BusyboxRootfs(b, filepath.Join(b.TempDir(), "rootfs"))
	m := w.manifest()
	bundle := func(annotations map[string]string) *ctrtest.Bundle {
		return ctrtest.NewBundle(b, ctrtest.BundleOptions{Rootfs: rootfs, Args: []string{"true"}, Annotations: annotations,
			Binds: []ctrtest.Bind{{Host: w.work, Container: "/workspace"}}})
	}
	n := 0
	// run runs one container, on b's timer when timed; klock-runtime rewrites config.json, so the
	// bundle is written afresh first (as an engine gives it), untimed.
	run := func(b *testing.B, runtime string, bd *ctrtest.Bundle, timed bool) time.Duration {
		bd.Write(b)
		n++
		start := time.Now()
		if timed {
			b.StartTimer()
		}
		r := ctrtest.RunC(b, runtime, bd, fmt.Sprintf("kc-bench-%d", n))
		b.StopTimer()
		took := time.Since(start)
		if r.Exit != 0 {
			b.Fatalf("%s run: %+v", runtime, r)
		}
		// Each session leaves its log and backup; the next starts as the first.
		os.RemoveAll(filepath.Join(w.work, ".klock"))
		return took
	}
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			e := w.engine(b, name)
			if e.refuses != "" {
				b.Skip(e.refuses) // a figure this host cannot give
			}
			bd := bundle(nil)
			b.StopTimer()
			run(b, e.bare, bd, false) // warm: the page cache
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run(b, e.bare, bd, true)
			}
		})
		b.Run("klock-runtime+"+name, func(b *testing.B) {
			e := w.engine(b, name)
			if e.refuses != "" {
				b.Skip(e.refuses)
			}
			plain, walled := bundle(nil), bundle(map[string]string{"io.klock.manifest": m})
			b.StopTimer()
			run(b, e.klock, walled, false) // warm: the page cache, klockd's first session
			b.ResetTimer()
			added := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				p := run(b, e.bare, plain, false)
				added = append(added, run(b, e.klock, walled, true)-p)
			}
			slices.Sort(added)
			b.ReportMetric(float64(added[len(added)/2])/float64(time.Millisecond), "added-ms")
		})
	}
}

// shippedLinger keeps the syscall tracepoints attached between sessions
// for klockd's default linger (daemon.DefaultSyscallLinger), as the klockd
// binary does, for the rest of b: the suite's shared observer detaches
// them as each session ends (the tests count on that), so each container
// would pay their attach (~5 ms) that back-to-back containers on a klockd
// do not. The first container after the linger has passed still pays it.
func shippedLinger(b *testing.B) {
	if obs := harness.Shared().Observer; obs != nil {
		obs.SetSyscallLinger(daemon.DefaultSyscallLinger)
		b.Cleanup(func() { obs.SetSyscallLinger(0) })
	}
}

// BenchmarkRuntimePassthrough: a command klock-runtime only hands to the
// runtime (`list`, as `state`, `start`, `kill` and `delete` are: an
// engine runs four to six of them per container), bare and through
// klock-runtime, paired as in BenchmarkRuncRunTrue. What it adds is the
// wrapper's and klock-runtime's start and its exec of the runtime: a
// binary that links little starts sooner (policy without cel-go,
// test/layout's TestRuntimeLinksNoCEL).
func BenchmarkRuntimePassthrough(b *testing.B) {
	w := newWorld(b)
	root := ctrtest.StateRoot(b)
	for _, name := range engineNames {
		b.Run(name, func(b *testing.B) {
			e := w.engine(b, name)
			if e.refuses != "" {
				b.Skip(e.refuses)
			}
			list := func(runtime string) time.Duration {
				start := time.Now()
				if out, err := exec.Command(runtime, "--root", root, "list").CombinedOutput(); err != nil {
					b.Fatalf("%s list: %v\n%s", runtime, err, out)
				}
				return time.Since(start)
			}
			list(e.bare) // warm: the page cache
			list(e.klock)
			added := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				added = append(added, list(e.klock)-list(e.bare))
			}
			b.StopTimer()
			slices.Sort(added)
			b.ReportMetric(float64(added[len(added)/2])/float64(time.Millisecond), "added-ms")
		})
	}
}
