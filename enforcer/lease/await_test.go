package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func queued(tb *Table) []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var ids []string
	for _, w := range tb.waiters {
		ids = append(ids, w.Holder.Session)
	}
	return ids
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type awaited struct {
	who string
	d   Decision
	err error
}

func noLeak(t *testing.T) func() {
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	}
}

// TestAwaitOldestFirst: three waiters of different ages queue (youngest
// first) on a lease a younger holder has; the release grants the oldest,
// and the two others, which now conflict with an older holder, die at once
// (Wait-Die: nobody waits for an older holder) instead of being woken to
// retry together.
func TestAwaitOldestFirst(t *testing.T) {
	defer noLeak(t)()
	ctx := context.Background()
	tb := NewTable()
	now := time.Now()
	young := Holder{Agent: "y", Session: "young"}
	if d, _ := tb.Acquire(ctx, Request{Holder: young, Claims: []Claim{claim(t, "MUTATES FILE:/r/**")}, Age: now}); d.Outcome != Granted {
		t.Fatal(d.Outcome)
	}
	events, stop := tb.Subscribe(64)
	defer stop()
	out := make(chan awaited, 3)
	for i, s := range []string{"w3", "w2", "w1"} { // youngest queues first
		h := Holder{Agent: s, Session: s}
		age := now.Add(-time.Duration(i+1) * time.Second) // w1 is the oldest
		go func() {
			d, err := tb.Await(ctx, Request{Holder: h, Claims: []Claim{claim(t, "MUTATES FILE:/r/a")}, Age: age}, time.Minute)
			out <- awaited{h.Session, d, err}
		}()
		waitFor(t, s+" to queue", func() bool { return len(queued(tb)) == i+1 })
	}
	if q := fmt.Sprint(queued(tb)); q != "[w1 w2 w3]" {
		t.Fatalf("queue %s, want oldest first", q)
	}
	if n, _ := tb.Release(ctx, young); n != 1 {
		t.Fatal(n)
	}
	got := map[string]awaited{}
	for range 3 {
		a := <-out
		got[a.who] = a
	}
	if got["w1"].d.Outcome != Granted || got["w2"].d.Outcome != Die || got["w3"].d.Outcome != Die {
		t.Fatalf("w1 %v, w2 %v, w3 %v: want GRANTED, DIE, DIE", got["w1"].d.Outcome, got["w2"].d.Outcome, got["w3"].d.Outcome)
	}
	if c := got["w2"].d.Conflicts; len(c) != 1 || c[0].Held.Holder.Session != "w1" {
		t.Fatalf("w2 dies against %+v, want w1's lease", c)
	}
	if q := queued(tb); len(q) != 0 {
		t.Fatalf("queue left %v", q)
	}
	// One grant: the freed lease, then w1's grant, and nothing else.
	var seq []string
	for len(events) > 0 {
		if e := <-events; e.Type != ContentionDetected {
			seq = append(seq, string(e.Type)+":"+e.Lease.Holder.Session)
		}
	}
	if s := fmt.Sprint(seq); s != "[LeaseFreed:young LeaseGranted:w1]" {
		t.Fatalf("events %s", s)
	}
}

// TestAwaitOthersKeepWaiting: the release frees what the oldest waits
// for; the two younger waiters also wait for a lease still held, so they
// stay queued (not woken), and are granted, oldest first, when it is
// released.
func TestAwaitOthersKeepWaiting(t *testing.T) {
	defer noLeak(t)()
	ctx := context.Background()
	tb := NewTable()
	now := time.Now()
	r := Holder{Agent: "r", Session: "r"}
	s := Holder{Agent: "s", Session: "s"}
	tb.Acquire(ctx, Request{Holder: r, Claims: []Claim{claim(t, "MUTATES FILE:/r/**")}, Age: now})
	tb.Acquire(ctx, Request{Holder: s, Claims: []Claim{claim(t, "MUTATES FILE:/s/**")}, Age: now})
	events, stop := tb.Subscribe(64)
	defer stop()
	out := make(chan awaited, 3)
	claims := map[string][]string{
		"w1": {"MUTATES FILE:/r/a"},
		"w2": {"MUTATES FILE:/r/b", "MUTATES FILE:/s/b"},
		"w3": {"MUTATES FILE:/r/c", "MUTATES FILE:/s/c"},
	}
	for i, w := range []string{"w3", "w2", "w1"} {
		h := Holder{Agent: w, Session: w}
		var cs []Claim
		for _, c := range claims[w] {
			cs = append(cs, claim(t, c))
		}
		age := now.Add(-time.Duration(i+1) * time.Second)
		go func() {
			d, err := tb.Await(ctx, Request{Holder: h, Claims: cs, Age: age}, time.Minute)
			out <- awaited{h.Session, d, err}
		}()
		waitFor(t, w+" to queue", func() bool { return len(queued(tb)) == i+1 })
	}
	tb.Release(ctx, r)
	a := <-out
	if a.who != "w1" || a.d.Outcome != Granted || a.err != nil {
		t.Fatalf("first answer %+v, want w1 granted", a)
	}
	if q := fmt.Sprint(queued(tb)); q != "[w2 w3]" {
		t.Fatalf("after the first release the queue is %s, want [w2 w3]", q)
	}
	select {
	case a := <-out:
		t.Fatalf("%s woken while what it waits for is held: %v", a.who, a.d.Outcome)
	case <-time.After(50 * time.Millisecond):
	}
	tb.Release(ctx, s)
	for _, want := range []string{"w2", "w3"} {
		if a := <-out; a.d.Outcome != Granted {
			t.Fatalf("%s: %v", a.who, a.d.Outcome)
		}
		_ = want
	}
	var grants []string
	for len(events) > 0 {
		if e := <-events; e.Type == LeaseGranted {
			grants = append(grants, e.Lease.Holder.Session)
		}
	}
	if g := fmt.Sprint(grants); g != "[w1 w2 w2 w3 w3]" {
		t.Fatalf("grants in order %s, want oldest first", g)
	}
}

// TestAwaitExpiryWithNobodyElse: the holder stops heartbeating; the
// waiter, alone, notices the lease ran out and takes it.
func TestAwaitExpiry(t *testing.T) {
	defer noLeak(t)()
	ctx := context.Background()
	tb := NewTable()
	now := time.Now()
	tb.Acquire(ctx, Request{Holder: Holder{Agent: "a", Session: "a"}, Claims: []Claim{claim(t, "MUTATES FILE:/r/**")},
		Age: now, TTL: 50 * time.Millisecond, Grace: 50 * time.Millisecond})
	d, err := tb.Await(ctx, Request{Holder: Holder{Agent: "b", Session: "b"}, Claims: []Claim{claim(t, "MUTATES FILE:/r/x")}, Age: now.Add(-time.Second)}, 10*time.Second)
	if err != nil || d.Outcome != Granted {
		t.Fatalf("%v %v", d.Outcome, err)
	}
	if took := time.Since(now); took < 100*time.Millisecond {
		t.Fatalf("granted after %v, before the lease ran out", took)
	}
}

// TestAwaitTimeoutAndCancel: a waiter leaves the queue at its deadline or
// when its context ends, and says WAIT.
func TestAwaitTimeoutAndCancel(t *testing.T) {
	defer noLeak(t)()
	ctx := context.Background()
	tb := NewTable()
	now := time.Now()
	tb.Acquire(ctx, Request{Holder: Holder{Agent: "a", Session: "a"}, Claims: []Claim{claim(t, "MUTATES FILE:/r/**")}, Age: now})
	req := Request{Holder: Holder{Agent: "b", Session: "b"}, Claims: []Claim{claim(t, "MUTATES FILE:/r/x")}, Age: now.Add(-time.Second)}
	d, err := tb.Await(ctx, req, 30*time.Millisecond)
	if err != nil || d.Outcome != Wait || len(queued(tb)) != 0 {
		t.Fatalf("timeout: %v %v, queue %v", d.Outcome, err, queued(tb))
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		waitFor(t, "the waiter to queue", func() bool { return len(queued(tb)) == 1 })
		cancel()
	}()
	d, err = tb.Await(cctx, req, time.Minute)
	if err != context.Canceled || d.Outcome != Wait || len(queued(tb)) != 0 {
		t.Fatalf("cancel: %v %v, queue %v", d.Outcome, err, queued(tb))
	}
	// A younger request dies at once, without queueing.
	req.Age = now.Add(time.Second)
	if d, _ := tb.Await(ctx, req, time.Minute); d.Outcome != Die {
		t.Fatal(d.Outcome)
	}
}

// TestAcquireWaitUsesAwait: AcquireWait on a Table waits in the queue
// (one attempt, granted when freed) instead of polling.
func TestAcquireWaitUsesAwait(t *testing.T) {
	defer noLeak(t)()
	ctx := context.Background()
	tb := NewTable()
	now := time.Now()
	a := Holder{Agent: "a", Session: "a"}
	tb.Acquire(ctx, Request{Holder: a, Claims: []Claim{claim(t, "MUTATES FILE:/r/**")}, Age: now})
	go func() {
		waitFor(t, "the waiter to queue", func() bool { return len(queued(tb)) == 1 })
		tb.Release(ctx, a)
	}()
	retries := 0
	d, err := AcquireWait(ctx, tb, Request{Holder: Holder{Agent: "b", Session: "b"}, Claims: []Claim{claim(t, "MUTATES FILE:/r/x")}, Age: now.Add(-time.Second)},
		WaitOptions{For: time.Minute, OnRetry: func(Decision, time.Duration) { retries++ }})
	if err != nil || d.Outcome != Granted || retries != 0 {
		t.Fatalf("%v %v after %d retries", d.Outcome, err, retries)
	}
}

// TestExpiryIsHeard: a subscriber hears a lease expire when it does, with
// no operation to notice it (Table and host store).
func TestExpiryIsHeard(t *testing.T) {
	host := openHost(t, t.TempDir()+"/leases")
	for _, s := range []interface {
		Store
		Subscribe(int) (<-chan Event, func())
	}{NewTable(), host} {
		ev, stop := s.Subscribe(16)
		r := Request{Holder: Holder{Agent: "a", Session: "a"}, Claims: []Claim{claim(t, "MUTATES FILE:/r/**")},
			TTL: 30 * time.Millisecond, Grace: time.Millisecond}
		if d, _ := s.Acquire(context.Background(), r); d.Outcome != Granted {
			t.Fatal(d.Outcome)
		}
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case e := <-ev:
				if e.Type == LeaseFreed {
					if e.Lease.State != Expired {
						t.Fatalf("%T: freed %v", s, e.Lease.State)
					}
					break wait
				}
			case <-deadline:
				t.Fatalf("%T: no expiry heard", s)
			}
		}
		stop()
	}
	if _, err := host.List(context.Background(), Filter{}); err != nil {
		t.Fatal(err)
	}
	host.Close()
	if _, err := host.List(context.Background(), Filter{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
