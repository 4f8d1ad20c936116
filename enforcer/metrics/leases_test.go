package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/policy"
)

// claim is one MUTATES FILE claim on pattern.
func claim(t *testing.T, pattern string) lease.Claim {
	t.Helper()
	r, err := lease.ParseResource("FILE:" + pattern)
	if err != nil {
		t.Fatal(err)
	}
	return lease.Claim{Predicate: policy.Mutates, Resource: r, Intent: "MUTATES FILE:" + pattern}
}

// The decorator counts the real table's Wait-Die decisions: a grant, a
// younger requester's death, an older one's wait that ends in a grant
// when the holder releases, and a revocation; it stays an Awaiter.
func TestLeasesCountsDecisions(t *testing.T) {
	m := New()
	s := Leases(lease.NewTable(), m)
	aw, ok := s.(lease.Awaiter)
	if _, sub := s.(Subscriber); !ok || !sub {
		t.Fatalf("the decorated table is no longer a lease.Awaiter (%v) or a Subscriber (%v)", ok, sub)
	}
	ctx := context.Background()
	older := time.Now().Add(-time.Hour)
	holder := lease.Holder{Agent: "a", Session: "s1"}
	d, err := s.Acquire(ctx, lease.Request{Holder: holder, Claims: []lease.Claim{claim(t, "/srv/x/**"), claim(t, "/srv/y/**")}})
	if err != nil || d.Outcome != lease.Granted {
		t.Fatalf("first acquire: %v %v", d.Outcome, err)
	}
	d, err = s.Acquire(ctx, lease.Request{Holder: lease.Holder{Agent: "b", Session: "s2"}, Claims: []lease.Claim{claim(t, "/srv/x/a")}})
	if err != nil || d.Outcome != lease.Die {
		t.Fatalf("younger acquire: %v %v", d.Outcome, err)
	}
	waited := make(chan lease.Decision)
	go func() {
		d, err := aw.Await(ctx, lease.Request{Holder: lease.Holder{Agent: "c", Session: "s3"}, Age: older, Claims: []lease.Claim{claim(t, "/srv/y/b")}}, time.Minute)
		if err != nil {
			t.Error(err)
		}
		waited <- d
	}()
	// Until the older requester waits (a bound on a hang, not a timing).
	for deadline := time.Now().Add(time.Minute); value(t, m, "klock_lease_decisions_total", `outcome="wait"`) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the older requester never got a WAIT")
		}
	}
	if _, err := s.Release(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if d := <-waited; d.Outcome != lease.Granted {
		t.Fatalf("the older requester's wait ended in %v", d.Outcome)
	}
	if n, err := s.Revoke(ctx, "s3"); n != 1 || err != nil {
		t.Fatalf("revoke: %d %v", n, err)
	}
	for name, want := range map[string]float64{
		`klock_lease_decisions_total{outcome="granted"}`: 2,
		`klock_lease_decisions_total{outcome="die"}`:     1,
		`klock_lease_decisions_total{outcome="wait"}`:    1,
		`klock_lease_grants_total`:                       3,
		`klock_lease_conflicts_total`:                    2,
		`klock_lease_revocations_total`:                  1,
	} {
		if got := series(t, m, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if _, err := s.Heartbeat(ctx, holder); err == nil {
		t.Fatal("a heartbeat of released leases succeeded")
	}
	if got := series(t, m, `klock_lease_store_errors_total{op="heartbeat"}`); got != 1 {
		t.Errorf("heartbeat errors %v", got)
	}
}

// A store that is not an Awaiter stays one that is not: AcquireWait
// must not believe it can wait in the store. Its event stream stays.
func TestLeasesKeepsNonAwaiter(t *testing.T) {
	tb := lease.NewTable()
	s := Leases(plainStore{tb}, New())
	if _, ok := s.(lease.Awaiter); ok {
		t.Fatal("a plain store became an Awaiter")
	}
	if _, ok := s.(Subscriber); ok {
		t.Fatal("a store without events got a Subscribe")
	}
	if _, ok := Leases(subscribing{plainStore{tb}, tb}, New()).(Subscriber); !ok {
		t.Fatal("a store with events lost them")
	}
	if Leases(s, nil) != s {
		t.Fatal("nil metrics wrapped the store")
	}
}

// plainStore hides the table's Await.
type plainStore struct{ lease.Store }

// subscribing is a plain store with the table's events.
type subscribing struct {
	plainStore
	Subscriber
}
