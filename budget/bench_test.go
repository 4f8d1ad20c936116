package budget

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkDurableAuthorizations measures durable pre-charges (fsync on,
// synchronous=FULL) with group commit against one transaction per call, in
// the same run so the ratio holds on a shared machine. Run with
// -benchtime 1x (make bench does).
func BenchmarkDurableAuthorizations(b *testing.B) {
	for i := 0; i < b.N; i++ {
		gRate, gP99 := authorize(b, []Option{WithGroupCommit(256)}, 16, 40_000)
		pRate, pP99 := authorize(b, nil, 16, 2_000)
		b.ReportMetric(gRate, "group-auth/s")
		b.ReportMetric(float64(gP99.Microseconds())/1000, "group-p99-ms")
		b.ReportMetric(pRate, "percall-auth/s")
		b.ReportMetric(float64(pP99.Microseconds())/1000, "percall-p99-ms")
		b.ReportMetric(gRate/pRate, "ratio")
		fmt.Printf("durable authorizations: group commit %.0f/s (p99 %v), one transaction per call %.0f/s (p99 %v): %.1fx\n",
			gRate, gP99, pRate, pP99, gRate/pRate)
	}
}

func authorize(b *testing.B, opts []Option, callers, total int) (float64, time.Duration) {
	f := newFixture(b)
	s := f.open(b, opts...)
	defer s.Close()
	g := Grant{Key: Key{"bench", 0}, Tool: "t", Limits: Limits{Currency: "USD"}}
	if err := s.Define(ctx, g); err != nil {
		b.Fatal(err)
	}
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
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
	all := slices.Concat(lat...)
	slices.Sort(all)
	return float64(total) / el.Seconds(), all[len(all)*99/100]
}
