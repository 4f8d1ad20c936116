package audit

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkCalls appends a dispatch and a result record per call, as the
// gateway does, from 1 and from 8 concurrent callers, durable (fsync on):
// calls/s and the median time a dispatch record takes to become durable.
// With 8 callers the dispatch records share fsyncs (group commit).
func BenchmarkCalls(b *testing.B) {
	for _, callers := range []int{1, 8} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			l, err := Open(filepath.Join(b.TempDir(), "audit.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			lat := make([][]time.Duration, callers)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for c := 0; c < callers; c++ {
				wg.Add(1)
				go func(c int) {
					defer wg.Done()
					for i := c; i < b.N; i += callers {
						t0 := time.Now()
						if err := l.Append(&Record{Event: EventDispatch, CallID: "c", Tool: "echo", Args: []byte(`{"text":"hello"}`)}); err != nil {
							b.Error(err)
							return
						}
						lat[c] = append(lat[c], time.Since(t0))
						if err := l.Append(&Record{Event: EventResult, CallID: "c", Tool: "echo", Result: "ok"}); err != nil {
							b.Error(err)
							return
						}
					}
				}(c)
			}
			wg.Wait()
			el := time.Since(start)
			all := slices.Concat(lat...)
			slices.Sort(all)
			b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "dispatch-median-µs")
		})
	}
}

// BenchmarkOpenReplay opens a log of 20,000 calls (a dispatch record with
// counters and a result record each) as a gateway does at its start:
// verified only, and verified with its counters replayed (WithReplay).
// The difference is what merging the counters back adds to a start.
func BenchmarkOpenReplay(b *testing.B) {
	path := filepath.Join(b.TempDir(), "audit.jsonl")
	l, err := Open(path, WithoutSync())
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20000 {
		c := &Counters{Calls: i + 1, Buckets: map[string]Bucket{"per_minute": {Tokens: 3, LastNS: int64(i)}}}
		for _, r := range []*Record{{Event: EventDispatch, Actor: "a", RunID: "r", Tool: "t", CallID: fmt.Sprint(i), Counters: c},
			{Event: EventResult, Actor: "a", RunID: "r", Tool: "t", CallID: fmt.Sprint(i), Result: "ok"}} {
			if err := l.Append(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	l.Close()
	for _, replay := range []bool{false, true} {
		b.Run(fmt.Sprintf("replay=%v", replay), func(b *testing.B) {
			n := 0
			for b.Loop() {
				opts := []Option{WithoutSync()}
				if replay {
					opts = append(opts, WithReplay("a", func(*Record) error { n++; return nil }))
				}
				l, err := Open(path, opts...)
				if err != nil {
					b.Fatal(err)
				}
				l.Close()
			}
			if replay && n == 0 {
				b.Fatal("nothing replayed")
			}
		})
	}
}
