package lease

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

func mustClaim(s string) Claim {
	in, err := policy.ParseIntent(s)
	if err != nil {
		panic(err)
	}
	c, ok, why := FromIntent(in)
	if !ok {
		panic(why)
	}
	return c
}

// heldByOthers fills s with n leases of n/10 other sessions: MUTATES of
// files in 100 package directories of one repository, a tenth of them
// whole vendored modules (subtrees), and a few endpoints.
func heldByOthers(b testing.TB, s Store, n int) {
	ctx := context.Background()
	age := time.Now().Add(-time.Hour)
	for h := 0; h < n/10; h++ {
		var cs []Claim
		for i := 0; i < 10; i++ {
			k := h*10 + i
			switch {
			case k%100 == 99:
				cs = append(cs, mustClaim(fmt.Sprintf("PROVIDES NET:127.0.0.1:%d/tcp", 10000+k)))
			case k%10 == 9:
				cs = append(cs, mustClaim(fmt.Sprintf("MUTATES FILE:/srv/repo/vendor/m%d/**", k)))
			default:
				cs = append(cs, mustClaim(fmt.Sprintf("MUTATES FILE:/srv/repo/pkg%03d/file%05d.go", k%100, k)))
			}
		}
		d, err := s.Acquire(ctx, Request{Holder: Holder{Agent: "other", Session: fmt.Sprint("s", h)}, Claims: cs, Age: age, TTL: MaxTTL})
		if err != nil || d.Outcome != Granted {
			b.Fatalf("setup: %v %v", d.Outcome, err)
		}
	}
}

// manifest is n intents of a session that conflict with none of
// heldByOthers: files beside theirs (in the same directories, so the index
// walks as deep as theirs), listed by directory as a manifest lists them,
// a subtree of its own, reads of the repository's docs and an endpoint.
func manifest(n int) []Claim {
	cs := []Claim{mustClaim("MUTATES FILE:/srv/repo/mine/**"), mustClaim("CONSUMES FILE:/srv/repo/docs/**"),
		mustClaim("CONSUMES NET:api.example.com:443/tcp")}
	for i := 0; len(cs) < n; i++ {
		cs = append(cs, mustClaim(fmt.Sprintf("MUTATES FILE:/srv/repo/pkg%03d/new%05d.go", (i/10)%100, i)))
	}
	return cs[:n]
}

// BenchmarkAcquireRelease: acquire and release a 10-intent manifest with
// 10,000 leases held by others (goal <= 2 us/op; Klock publishes ~670 ns).
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	tb := NewTable()
	heldByOthers(b, tb, 10000)
	me := Holder{Agent: "me", Session: "me"}
	req := Request{Holder: me, Claims: manifest(10)}
	b.ReportAllocs()
	for b.Loop() {
		d, err := tb.Acquire(ctx, req)
		if err != nil || d.Outcome != Granted {
			b.Fatalf("%v %v", d.Outcome, err)
		}
		if n, _ := tb.Release(ctx, me); n != 10 {
			b.Fatal(n)
		}
	}
}

// BenchmarkConflictCheck: decide a 1,000-intent manifest against 10,000
// held leases (goal <= 50 us/op; Klock publishes ~339 ns for 1,000
// triples, without an index of held leases to search).
func BenchmarkConflictCheck(b *testing.B) {
	ctx := context.Background()
	tb := NewTable()
	heldByOthers(b, tb, 10000)
	req := Request{Holder: Holder{Agent: "me", Session: "me"}, Claims: manifest(1000)}
	b.ReportAllocs()
	for b.Loop() {
		d, err := tb.Check(ctx, req)
		if err != nil || d.Outcome != Granted {
			b.Fatalf("%v %v", d.Outcome, err)
		}
	}
}

// BenchmarkConflictCheckContended: the same manifest with ten intents that
// conflict (a younger requester: DIE, every conflict reported).
func BenchmarkConflictCheckContended(b *testing.B) {
	ctx := context.Background()
	tb := NewTable()
	heldByOthers(b, tb, 10000)
	cs := manifest(990)
	for _, k := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 10} { // files heldByOthers holds
		cs = append(cs, mustClaim(fmt.Sprintf("CONSUMES FILE:/srv/repo/pkg%03d/file%05d.go", k%100, k)))
	}
	req := Request{Holder: Holder{Agent: "me", Session: "me"}, Claims: cs}
	b.ReportAllocs()
	for b.Loop() {
		d, err := tb.Check(ctx, req)
		if err != nil || d.Outcome != Die || len(d.Conflicts) != 10 {
			b.Fatalf("%v %v %d", d.Outcome, err, len(d.Conflicts))
		}
	}
}

// BenchmarkHostAcquireRelease: the same through the host store (lock,
// catch up, decide, journal; compaction amortized), with 10,000 leases
// held by other sessions.
func BenchmarkHostAcquireRelease(b *testing.B) {
	ctx := context.Background()
	h, err := OpenHost(b.TempDir() + "/leases")
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	heldByOthers(b, h, 10000)
	h.split = opSplit{}
	me := Holder{Agent: "me", Session: "me"}
	req := Request{Holder: me, Claims: manifest(10)}
	b.ReportAllocs()
	for b.Loop() {
		d, err := h.Acquire(ctx, req)
		if err != nil || d.Outcome != Granted {
			b.Fatalf("%v %v", d.Outcome, err)
		}
		if n, _ := h.Release(ctx, me); n != 10 {
			b.Fatal(n)
		}
	}
	// Where an operation's time goes (per acquire+release pair: two
	// operations).
	sp := h.split
	pair := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(sp.n) * 2 / 1000 }
	b.ReportMetric(pair(sp.lock), "µs-lock")
	b.ReportMetric(pair(sp.catchUp), "µs-catchup")
	b.ReportMetric(pair(sp.decide), "µs-decide")
	b.ReportMetric(pair(sp.journal), "µs-journal")
	b.ReportMetric(pair(sp.compact), "µs-compact")
}
