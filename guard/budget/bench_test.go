package budget

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDurableAuthorizations measures durable pre-charges (each
// answered only after the WAL holding it is fsynced) with group commit
// against one transaction per call, in the same run so the ratio holds on
// a shared machine. Run with -benchtime 1x (make bench does).
//
// auth/s counts decisions answered to their callers (durable in the
// ledger, which is what a caller waits for); receipted/s also waits for
// the last signed receipt to be durable in the chain (Flush), so a receipt
// emitter that falls behind shows there instead of hiding in a backlog.
func BenchmarkDurableAuthorizations(b *testing.B) {
	for i := 0; i < b.N; i++ {
		g := authorize(b, []Option{WithGroupCommit(256)}, 16, 40_000)
		p := authorize(b, nil, 16, 2_000)
		b.ReportMetric(g.rate, "group-auth/s")
		b.ReportMetric(float64(g.p99.Microseconds())/1000, "group-p99-ms")
		b.ReportMetric(g.receipted, "group-receipted/s")
		b.ReportMetric(float64(g.cpu.Microseconds()), "group-cpu-us/op")
		b.ReportMetric(p.rate, "percall-auth/s")
		b.ReportMetric(float64(p.p99.Microseconds())/1000, "percall-p99-ms")
		b.ReportMetric(g.rate/p.rate, "ratio")
		f50, f99 := fsyncFloor(b, 2_000)
		b.ReportMetric(float64(f99.Microseconds())/1000, "floor-fsync-p99-ms")
		fmt.Printf("durable authorizations: group commit %.0f/s (p99 %v; %.0f/s with every receipt durable; CPU %v per decision), one transaction per call %.0f/s (p99 %v; CPU %v): %.1fx\n",
			g.rate, g.p99, g.receipted, g.cpu, p.rate, p.p99, p.cpu, g.rate/p.rate)
		fmt.Printf("floor: a 4 KiB overwrite and fdatasync of the same disk, one at a time: p50 %v, p99 %v\n", f50, f99)
	}
}

// fsyncFloor times n 4 KiB overwrites of a preallocated file, each
// followed by an fdatasync, one at a time: what one durable decision
// costs at least on this disk, with nothing else of ours writing. A
// decision is answered only after such an fdatasync returns, so the
// group p99 cannot beat this p99 by much; on a shared disk it is the
// floor the p99 goal is measured against.
func fsyncFloor(b *testing.B, n int) (p50, p99 time.Duration) {
	f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rec := make([]byte, 4096)
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		t0 := time.Now()
		if _, err := f.WriteAt(rec, int64(i%256)*4096); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	return lat[n/2], lat[n*99/100]
}

type authRun struct {
	rate, receipted float64 // decisions/s answered; decisions/s with their receipts durable
	p99             time.Duration
	cpu             time.Duration // process CPU (user + system) per decision, receipts included
}

// processCPU is this process's user + system time. On a shared or virtual
// machine it is steadier than wall-clock rates, and it is what bounds the
// rate on few cores: an fsync alone costs some 200 us of CPU on the 2-core
// VM the figures come from.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func authorize(b *testing.B, opts []Option, callers, total int) authRun {
	f := newFixture(b)
	s := f.open(b, opts...)
	defer s.Close()
	g := Grant{Key: Key{"bench", 0}, Tool: "t", Limits: Limits{Currency: "USD"}}
	if err := s.Define(ctx, g); err != nil {
		b.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	cpu0 := processCPU()
	start := time.Now()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; i < total; i += callers {
				t0 := time.Now()
				if _, err := s.Reserve(ctx, Request{Key: g.Key, Cost: usd(1)}); err != nil {
					b.Error(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}(c)
	}
	wg.Wait()
	el := time.Since(start)
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	elFlushed := time.Since(start)
	cpu := (processCPU() - cpu0) / time.Duration(total)
	all := slices.Concat(lat...)
	slices.Sort(all)
	return authRun{rate: float64(total) / el.Seconds(), receipted: float64(total) / elFlushed.Seconds(), p99: all[len(all)*99/100], cpu: cpu}
}
