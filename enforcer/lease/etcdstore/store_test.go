package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/enforcer/lease"
	"github.com/klocklabs/klock/internal/etcdtest"
	"github.com/klocklabs/klock/internal/testutil"
	"github.com/klocklabs/klock/policy"
)

func claim(t testing.TB, s string) lease.Claim {
	t.Helper()
	in, err := policy.ParseIntent(s)
	if err != nil {
		t.Fatal(err)
	}
	c, ok, why := lease.FromIntent(in)
	if !ok {
		t.Fatalf("%s: %s", s, why)
	}
	return c
}

// twoHosts is one cluster and a store per "host", each on its own client.
func twoHosts(t testing.TB, members int) (*etcdtest.Cluster, *Store, *Store) {
	testutil.RequirePrivileged(t)
	c := etcdtest.Start(t, members)
	a := New(c.Client(t), "/klock", "hostA")
	b := New(c.Client(t), "/klock", "hostB")
	t.Cleanup(func() { a.Close(); b.Close() })
	return c, a, b
}

var intents = []string{
	"MUTATES FILE:/repo/src/**", "CONSUMES FILE:/repo/src/a.go", "MUTATES FILE:/repo/docs/*",
	"CONSUMES FILE:/repo/**", "MUTATES FILE:/repo/docs/x.md", "CONSUMES FILE:/other/**",
	"MUTATES NET:db.internal:5432/tcp", "CONSUMES NET:db.internal:5432/tcp",
}

// TestSameAsTable replays one random sequence of acquire/release on a
// lease.Table and on two etcd stores (holders alternate hosts): every
// decision's outcome and conflict count must be the same.
func TestSameAsTable(t *testing.T) {
	_, a, b := twoHosts(t, 1)
	ctx := context.Background()
	tb := lease.NewTable()
	r := rand.New(rand.NewPCG(1, 2))
	holders := make([]lease.Holder, 6)
	ages := make([]time.Time, len(holders))
	base := time.Now()
	for i := range holders {
		holders[i] = lease.Holder{Agent: "ag", Session: fmt.Sprintf("s%d", i)}
		ages[i] = base.Add(time.Duration(i) * time.Second)
		// Register in age order: the etcd age is the first request's revision.
		st := []*Store{a, b}[i%2]
		if _, err := st.ageRev(ctx, holders[i]); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < 120; step++ {
		i := r.IntN(len(holders))
		st := []*Store{a, b}[i%2]
		if r.IntN(3) == 0 {
			n1, err1 := tb.Release(ctx, holders[i])
			n2, err2 := st.Release(ctx, holders[i])
			if err1 != nil || err2 != nil || n1 != n2 {
				t.Fatalf("step %d release %d: table %d %v, etcd %d %v", step, i, n1, err1, n2, err2)
			}
			continue
		}
		req := lease.Request{Holder: holders[i], Age: ages[i], TTL: 30 * time.Second,
			Claims: []lease.Claim{claim(t, intents[r.IntN(len(intents))])}}
		d1, err1 := tb.Acquire(ctx, req)
		d2, err2 := st.Acquire(ctx, req)
		if err1 != nil || err2 != nil {
			t.Fatalf("step %d: %v %v", step, err1, err2)
		}
		if d1.Outcome != d2.Outcome || len(d1.Conflicts) != len(d2.Conflicts) {
			t.Fatalf("step %d %s by %d: table %v (%d conflicts), etcd %v (%d)", step, req.Claims[0].Intent, i,
				d1.Outcome, len(d1.Conflicts), d2.Outcome, len(d2.Conflicts))
		}
	}
}

func TestHostAndFence(t *testing.T) {
	_, a, b := twoHosts(t, 1)
	ctx := context.Background()
	h := lease.Holder{Agent: "x", Session: "s1"}
	d, err := a.Acquire(ctx, lease.Request{Holder: h, Claims: []lease.Claim{claim(t, "MUTATES FILE:/r/**")}})
	if err != nil || d.Outcome != lease.Granted {
		t.Fatal(d.Outcome, err)
	}
	l := d.Lease(0)
	if l.Fence == 0 {
		t.Fatal("no fencing token")
	}
	ls, err := b.List(ctx, lease.Filter{})
	if err != nil || len(ls) != 1 || ls[0].Host != "hostA" || ls[0].Fence != l.Fence {
		t.Fatalf("list from the other host: %+v %v", ls, err)
	}
	if err := b.CheckFence(ctx, l); err != nil {
		t.Fatalf("fresh token refused: %v", err)
	}
	if n, err := b.Revoke(ctx, "s1"); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if err := b.CheckFence(ctx, l); !errors.Is(err, lease.ErrGone) {
		t.Fatalf("stale token: %v", err)
	}
	// The same id granted again gets a new token: the old one stays stale.
	d2, _ := a.Acquire(ctx, lease.Request{Holder: h, Claims: []lease.Claim{claim(t, "MUTATES FILE:/r/**")}})
	if d2.Outcome != lease.Granted || d2.Lease(0).Fence <= l.Fence {
		t.Fatalf("regrant: %+v", d2)
	}
	if err := a.CheckFence(ctx, l); !errors.Is(err, lease.ErrGone) {
		t.Fatalf("stale token after regrant: %v", err)
	}
}

// TestKeepAliveLoss: the holder's host cannot reach etcd (its member is
// paused); the lease runs out after its TTL for the other host, and the
// holder is told on Lost.
func TestKeepAliveLoss(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := etcdtest.Start(t, 3)
	ctx := context.Background()
	// Host A talks only to a follower, B to the two others: pausing A's
	// member cuts A off without an election, so B decides at once
	// while A's lease is still within its TTL.
	probe := c.Client(t)
	leader := c.Leader(ctx, probe)
	for end := time.Now().Add(10 * time.Second); leader == nil && time.Now().Before(end); leader = c.Leader(ctx, probe) {
		time.Sleep(50 * time.Millisecond)
	}
	if leader == nil {
		t.Fatal("the cluster elected no leader")
	}
	var mine *etcdtest.Member
	var others []string
	for _, m := range c.Members {
		if mine == nil && m != leader {
			mine = m
			continue
		}
		others = append(others, m.Client)
	}
	cliA := c.Client(t)
	cliA.SetEndpoints(mine.Client)
	a := New(cliA, "/klock", "hostA")
	defer a.Close()
	bc := c.Client(t)
	bc.SetEndpoints(others...)
	b := New(bc, "/klock", "hostB")
	defer b.Close()
	h := lease.Holder{Agent: "x", Session: "old"}
	d, err := a.Acquire(ctx, lease.Request{Holder: h, TTL: 2 * time.Second, Claims: []lease.Claim{claim(t, "MUTATES FILE:/r/**")}})
	if err != nil || d.Outcome != lease.Granted {
		t.Fatal(d.Outcome, err)
	}
	mine.Pause()
	defer mine.Resume()
	young := lease.Request{Holder: lease.Holder{Agent: "y", Session: "young"}, Claims: []lease.Claim{claim(t, "MUTATES FILE:/r/x")}}
	if d, err := b.Acquire(ctx, young); err != nil || d.Outcome != lease.Die {
		t.Fatalf("while held: %v %v", d.Outcome, err)
	}
	dw, err := lease.AcquireWait(ctx, b, young, lease.WaitOptions{For: 30 * time.Second})
	if err != nil || dw.Outcome != lease.Granted {
		t.Fatalf("after the TTL: %v %v", dw.Outcome, err)
	}
	select {
	case who := <-a.Lost():
		if who != h {
			t.Fatalf("lost %v", who)
		}
		// The session's heartbeat hears it: it must stop (fail closed).
		if _, err := a.Heartbeat(ctx, h); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("heartbeat after the loss: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the holder was never told its lease is lost")
	}
}

// TestAwaitAcrossHosts: an older session waiting on host B is granted when
// the younger holder on host A releases (B watches the lease keys).
func TestAwaitAcrossHosts(t *testing.T) {
	_, a, b := twoHosts(t, 1)
	ctx := context.Background()
	old := lease.Holder{Agent: "o", Session: "old"}
	young := lease.Holder{Agent: "y", Session: "young"}
	if _, err := b.ageRev(ctx, old); err != nil {
		t.Fatal(err)
	}
	if d, err := a.Acquire(ctx, lease.Request{Holder: young, Claims: []lease.Claim{claim(t, "MUTATES FILE:/w/**")}}); err != nil || d.Outcome != lease.Granted {
		t.Fatal(d.Outcome, err)
	}
	req := lease.Request{Holder: old, Claims: []lease.Claim{claim(t, "MUTATES FILE:/w/x")}}
	if d, _ := b.Acquire(ctx, req); d.Outcome != lease.Wait {
		t.Fatalf("older requester: %v, want WAIT", d.Outcome)
	}
	done := make(chan lease.Decision, 1)
	go func() {
		d, err := b.Await(ctx, req, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	if n, err := a.Release(ctx, young); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if d := <-done; d.Outcome != lease.Granted || d.Lease(0).Host != "hostB" {
		t.Fatalf("after the release: %+v", d)
	}
}

// A grant's fencing token checks out at once on every member: the check
// is a linearizable read, never a member's stale copy.
func TestFreshFenceHolds(t *testing.T) {
	_, a, b := twoHosts(t, 3)
	ctx := context.Background()
	for i := range 30 {
		h := lease.Holder{Agent: "ag", Session: fmt.Sprint("fresh", i)}
		d, err := a.Acquire(ctx, lease.Request{Holder: h, Claims: []lease.Claim{claim(t, fmt.Sprintf("MUTATES FILE:/fresh/%d/**", i))}})
		if err != nil || d.Outcome != lease.Granted {
			t.Fatal(d, err)
		}
		for _, s := range []*Store{a, b} {
			if err := s.CheckFence(ctx, d.Lease(0)); err != nil {
				t.Fatalf("grant %d: its fence does not check out right after the grant: %v", i, err)
			}
		}
	}
}

// A store says since when etcd has not answered it, in its errors (which
// klock leases shows through the lease API) and through Unreachable; an
// answer clears it.
func TestUnreachableSince(t *testing.T) {
	c, a, _ := twoHosts(t, 1)
	ctx := context.Background()
	if _, err := a.List(ctx, lease.Filter{}); err != nil || !a.Unreachable().IsZero() {
		t.Fatalf("a reachable etcd: %v, unreachable since %v", err, a.Unreachable())
	}
	c.Members[0].Pause()
	before := time.Now()
	// The pause takes effect between requests: one already on its way
	// may still be answered (seen once in a loaded CI run).
	_, err := a.List(ctx, lease.Filter{})
	for i := 0; err == nil && i < 50; i++ {
		time.Sleep(20 * time.Millisecond)
		_, err = a.List(ctx, lease.Filter{})
	}
	since := a.Unreachable()
	if !errors.Is(err, ErrNoEtcd) || !errors.Is(err, lease.ErrUnreachable) || since.Before(before) || !strings.Contains(err.Error(), "since "+since.UTC().Format(time.RFC3339)) {
		t.Fatalf("a paused etcd: %v, unreachable since %v", err, since)
	}
	if _, err := a.List(ctx, lease.Filter{}); err == nil || a.Unreachable() != since {
		t.Fatalf("a second failure moved the start of the outage: %v %v", err, a.Unreachable())
	}
	c.Members[0].Resume()
	if _, err := a.List(ctx, lease.Filter{}); err != nil || !a.Unreachable().IsZero() {
		t.Fatalf("etcd back: %v, unreachable since %v", err, a.Unreachable())
	}
}
