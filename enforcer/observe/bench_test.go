//go:build linux && (amd64 || arm64)

package observe

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const benchOps = 200000

// runLoop runs the open/close helper (in the session's cgroup when s is
// set) and returns the loop's own duration.
func runLoop(b *testing.B, s *session, path string, n int) (time.Duration, *exec.Cmd) {
	b.Helper()
	cmd := exec.Command(os.Args[0], path, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), helperEnv+"=loop")
	if s != nil {
		s.inCgroup(cmd)
	}
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("loop: %v", err)
	}
	var ns int64
	for _, l := range strings.Split(string(out), "\n") {
		fmt.Sscanf(l, "elapsed %d", &ns)
	}
	return time.Duration(ns), cmd
}

// BenchmarkObserveEventsPerSecond: a process in a watched cgroup opens and
// closes one directory benchOps times as fast as it can (a directory: the
// repeated opens of a file are counted in the kernel, not reported, while
// every open of a directory is reported, which is what this measures); we
// count the records delivered (resolved to triples) and the records lost,
// from the loop's start to the last record's arrival.
func BenchmarkObserveEventsPerSecond(b *testing.B) {
	for _, opts := range []struct {
		name string
		o    Options
	}{
		{"wakeup-every-record", Options{WakeEveryRecord: true}},
		{"wakeup-batched-default", Options{}},
	} {
		b.Run(opts.name, func(b *testing.B) {
			file := filepath.Join(b.TempDir(), "d")
			os.Mkdir(file, 0o755)
			// The same loop with no program loaded: the most opens one
			// process makes here, which no delivery rate can exceed.
			bare, _ := runLoop(b, nil, file, benchOps)
			o := loadObserverOpts(b, opts.o)
			var total, loop time.Duration
			var delivered, lost uint64
			for i := 0; i < b.N; i++ {
				s := newSession(b, o)
				start := time.Now()
				done := make(chan struct{})
				var n, l uint64
				go func() {
					defer close(done)
					for r := range s.w.Records() {
						switch r.Kind {
						case KindEvent:
							if r.Event.Syscall == "openat" && r.Event.Triple.Path == file {
								n++
							}
						case KindLost:
							l += r.Lost.Count
						}
					}
				}()
				d, _ := runLoop(b, s, file, benchOps)
				loop += d
				s.drain2(b)
				<-done
				total += time.Since(start)
				delivered += n
				lost += l
			}
			b.ReportMetric(float64(delivered)/total.Seconds(), "events/s")
			b.ReportMetric(float64(lost)/float64(b.N), "lost/run")
			// The producer's own rate: delivery cannot exceed it.
			b.ReportMetric(float64(b.N*benchOps)/loop.Seconds(), "loop-opens/s")
			b.ReportMetric(float64(benchOps)/bare.Seconds(), "bare-loop-opens/s")
			b.ReportMetric(float64(delivered)/float64(b.N), "delivered/run")
			kl, _ := o.LostTotal()
			b.ReportMetric(float64(kl), "kernel-lost-total")
		})
	}
}

// BenchmarkUnwatchedOverhead: the same open/close loop in a process no
// session watches, with the programs loaded (and one other cgroup watched)
// versus not loaded, in the same run.
func BenchmarkUnwatchedOverhead(b *testing.B) {
	loadObserver(b) // privileges check
	file := filepath.Join(b.TempDir(), "f")
	os.WriteFile(file, []byte("x"), 0o644)
	var base, loaded time.Duration
	for i := 0; i < b.N; i++ {
		d, _ := runLoop(b, nil, file, benchOps)
		base += d
		func() {
			o, err := Load()
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			newSession(b, o) // a watched cgroup the loop is not in
			d, _ := runLoop(b, nil, file, benchOps)
			loaded += d
		}()
	}
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N*benchOps), "ns/open-unloaded")
	b.ReportMetric(float64(loaded.Nanoseconds())/float64(b.N*benchOps), "ns/open-loaded")
	b.ReportMetric(float64(loaded)/float64(base), "ratio")
}

// BenchmarkWatch: what a session's Watch and Unwatch cost the observer,
// the syscall programs attached already (another Watch holds them, as
// klockd's linger does): the watched map's entry and the Watch's own
// memory (B/op), paid on every session's start.
func BenchmarkWatch(b *testing.B) {
	o := loadObserver(b)
	newSession(b, o) // keeps the syscall programs attached
	g := newSession(b, o)
	if err := o.Unwatch(g.g.ID); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := o.Watch(g.g.ID); err != nil {
			b.Fatal(err)
		}
		if err := o.Unwatch(g.g.ID); err != nil {
			b.Fatal(err)
		}
	}
}
