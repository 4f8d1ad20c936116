package etcdqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/klocklabs/klock/guard/approval"
	"github.com/klocklabs/klock/internal/etcdtest"
)

// client is a client of c of its own (each "host" dials separately).
func client(t *testing.T, c *etcdtest.Cluster) *clientv3.Client { return c.Client(t) }

// pair is a gateway's queue and an operator's queue on the same store, on
// two hosts for etcd; clk drives both deadlines.
type pair struct {
	name    string
	gw, op  approval.Queue
	advance func(time.Duration)
}

func queues(t *testing.T, c *etcdtest.Cluster) []pair {
	var mu sync.Mutex
	now := time.Now()
	clk := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	dir := t.TempDir()
	fgw, err := approval.Open(dir, approval.WithClock(clk), approval.WithPoll(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	fop, _ := approval.Open(dir, approval.WithClock(clk))
	prefix := fmt.Sprintf("/t%d", time.Now().UnixNano())
	return []pair{
		{"file", fgw, fop, advance},
		{"etcd", New(client(t, c), prefix, "host-a", WithClock(clk)), New(client(t, c), prefix, "host-b", WithClock(clk)), advance},
	}
}

// TestSameSemanticsAsTheFileStore runs one script against the file store
// and the fleet's queue: a decision on another store (host) wakes the
// waiter, a second decision is refused, a deadline expires a request.
func TestSameSemanticsAsTheFileStore(t *testing.T) {
	c := etcdtest.Start(t, 3)
	for _, p := range queues(t, c) {
		t.Run(p.name, func(t *testing.T) {
			r, err := p.gw.Submit(approval.Request{Agent: "a", Tool: "send_email", Fingerprint: "f1", Why: "IRREVERSIBLE-WRITE"}, time.Minute)
			if err != nil || r.State != approval.Pending || !approval.ValidID(r.ID) {
				t.Fatalf("submit: %+v %v", r, err)
			}
			if p.name == "etcd" && r.Host != "host-a" {
				t.Fatalf("the request names host %q, want host-a", r.Host)
			}
			// A retry of the same call, from either host, is the same request.
			if again, err := p.op.Submit(approval.Request{Fingerprint: "f1"}, time.Minute); err != nil || again.ID != r.ID {
				t.Fatalf("retry filed a second request: %+v %v", again, err)
			}
			list, err := p.op.List(true)
			if err != nil || len(list) != 1 || list[0].ID != r.ID {
				t.Fatalf("list: %+v %v", list, err)
			}
			waited := make(chan *approval.Request, 1)
			go func() {
				got, err := p.gw.Wait(context.Background(), r.ID, 30*time.Second)
				if err != nil {
					t.Error(err)
				}
				waited <- got
			}()
			if _, err := p.op.Decide(r.ID, true, "alice", "ok"); err != nil {
				t.Fatal(err)
			}
			if got := <-waited; got == nil || got.State != approval.Approved || got.DecidedBy != "alice" {
				t.Fatalf("wait: %+v", got)
			}
			if _, err := p.gw.Decide(r.ID, false, "bob", ""); !errors.Is(err, approval.ErrDecided) {
				t.Fatalf("second decision: %v", err)
			}
			// Approved and unused, it still stands for its call; used, not.
			if again, _ := p.gw.Submit(approval.Request{Fingerprint: "f1"}, time.Minute); again.ID != r.ID {
				t.Fatalf("an approved request was not found again")
			}
			if err := p.gw.MarkUsed(r.ID); err != nil {
				t.Fatal(err)
			}
			if again, _ := p.gw.Submit(approval.Request{Fingerprint: "f1"}, time.Minute); again.ID == r.ID {
				t.Fatalf("a used approval covers a second call")
			}
			r2, _ := p.gw.Submit(approval.Request{Tool: "x", Fingerprint: "f2"}, time.Second)
			p.advance(2 * time.Second)
			if got, err := p.op.Get(r2.ID); err != nil || got.State != approval.Expired {
				t.Fatalf("after the deadline: %+v %v", got, err)
			}
			if _, err := p.op.Decide(r2.ID, true, "late", ""); !errors.Is(err, approval.ErrDecided) {
				t.Fatalf("approving an expired request: %v", err)
			}
			for _, id := range []string{"ap_0000deadbeef", "../../etc/passwd"} {
				if _, err := p.op.Decide(id, true, "x", ""); !errors.Is(err, approval.ErrNotFound) {
					t.Fatalf("decide %q: %v", id, err)
				}
			}
		})
	}
}

// TestOneDecisionUnderARace has hosts approve and deny one request at
// once, each through its own client: exactly one decision commits, and
// every other is told it was decided.
func TestOneDecisionUnderARace(t *testing.T) {
	c := etcdtest.Start(t, 3)
	prefix := fmt.Sprintf("/race%d", time.Now().UnixNano())
	gw := New(client(t, c), prefix, "host-a")
	const hosts = 6
	ops := make([]*Queue, hosts)
	for i := range ops {
		ops[i] = New(client(t, c), prefix, fmt.Sprintf("host-%d", i))
	}
	for round := 0; round < 5; round++ {
		r, err := gw.Submit(approval.Request{Tool: "t", Fingerprint: fmt.Sprint("race", round)}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		won := make(chan *approval.Request, hosts)
		for i, op := range ops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got, err := op.Decide(r.ID, i%2 == 0, fmt.Sprint("op", i), "")
				switch {
				case err == nil:
					won <- got
				case !errors.Is(err, approval.ErrDecided):
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(won)
		var winners []*approval.Request
		for w := range won {
			winners = append(winners, w)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d decisions committed, want 1", round, len(winners))
		}
		got, err := gw.Get(r.ID)
		if err != nil || got.State != winners[0].State || got.DecidedBy != winners[0].DecidedBy {
			t.Fatalf("round %d: stored %+v, the winner was %+v", round, got, winners[0])
		}
	}
}

// TestUnreachableFailsTyped stops every member: each operation fails with
// ErrUnreachable within its timeout, and a waiter does not report a
// decision nobody made.
func TestUnreachableFailsTyped(t *testing.T) {
	c := etcdtest.Start(t, 3)
	q := New(client(t, c), "/down", "host-a", WithTimeout(time.Second))
	r, err := q.Submit(approval.Request{Tool: "t", Fingerprint: "f"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if _, err := q.Submit(approval.Request{Tool: "t", Fingerprint: "g"}, time.Minute); !errors.Is(err, approval.ErrUnreachable) || !errors.Is(err, approval.ErrStore) {
		t.Fatalf("submit: %v", err)
	}
	if _, err := q.Decide(r.ID, true, "x", ""); !errors.Is(err, approval.ErrUnreachable) {
		t.Fatalf("decide: %v", err)
	}
	if _, err := q.List(true); !errors.Is(err, approval.ErrUnreachable) {
		t.Fatalf("list: %v", err)
	}
	if got, err := q.Wait(context.Background(), r.ID, 5*time.Second); !errors.Is(err, approval.ErrUnreachable) {
		t.Fatalf("wait: %+v %v", got, err)
	}
}
