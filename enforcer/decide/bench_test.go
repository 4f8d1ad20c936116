package decide

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/policy"
)

// bench1000 is a 1,000-intent manifest (plus the system-ro baseline) and a
// mix of events that exercise every kind of lookup, all allowed.
func bench1000(b *testing.B) (*policy.Ruleset, []event.Event) {
	var intents []string
	for i := range 400 {
		intents = append(intents, fmt.Sprintf("CONSUMES FILE:/srv/data/d%03d/**", i))
	}
	for i := range 300 {
		intents = append(intents, fmt.Sprintf("MUTATES FILE:/srv/repo/src/pkg%03d/file.go", i))
	}
	for i := range 200 {
		intents = append(intents, fmt.Sprintf("PROVIDES FILE:/srv/repo/build/t%03d/*", i))
	}
	for i := range 50 {
		intents = append(intents, fmt.Sprintf("CONSUMES NET:10.0.%d.%d:443/tcp", i/250, i%250))
	}
	for i := range 50 {
		intents = append(intents, fmt.Sprintf("PROVIDES PROC:/opt/tools/bin/t%02d", i))
	}
	rs := compile(b, manifest(b, "strict", "system-ro", intents...))
	var evs []event.Event
	for i := range 1024 {
		switch i % 6 {
		case 0:
			evs = append(evs, fileEv(policy.Consumes, fmt.Sprintf("/srv/data/d%03d/sub/dir/f%d.csv", i%400, i), "openat"))
		case 1:
			evs = append(evs, fileEv(policy.Mutates, fmt.Sprintf("/srv/repo/src/pkg%03d/file.go", i%300), "openat"))
		case 2:
			evs = append(evs, fileEv(policy.Provides, fmt.Sprintf("/srv/repo/build/t%03d/o%d", i%200, i), "linkat"))
		case 3:
			evs = append(evs, event.Event{Triple: policy.NetTriple(policy.Consumes, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i % 50)}), 443), policy.ProtoTCP), Syscall: "connect"})
		case 4:
			evs = append(evs, execEv(fmt.Sprintf("/opt/tools/bin/t%02d", i%50)))
		case 5:
			evs = append(evs, fileEv(policy.Consumes, "/usr/lib/x86_64-linux-gnu/libc.so.6", "openat"))
		}
	}
	return rs, evs
}

// BenchmarkObserve measures Engine.Observe on a 1,000-intent ruleset
// (events/s is reported; every event is allowed, the hot path).
func BenchmarkObserve(b *testing.B) {
	rs, evs := bench1000(b)
	e := New(rs, policy.ModeStrict)
	for _, ev := range evs { // warm the observation map
		e.Observe(ev)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v := e.Observe(evs[i&1023]); v.Action != ActionAllow {
			b.Fatalf("%s: %s", evs[i&1023].Triple, v.Message())
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkObserveParallel is the same with every CPU feeding the engine.
func BenchmarkObserveParallel(b *testing.B) {
	rs, evs := bench1000(b)
	e := New(rs, policy.ModeStrict)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			e.Observe(evs[i&1023])
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
