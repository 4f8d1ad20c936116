package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The randomized test of the issue: 32 sessions acquire random
// overlapping scopes at once, with Wait-Die through AcquireWait (each
// keeps its age across retries), hold them briefly and release them.
//
// What is asserted:
//   - all finish: every session is granted (no deadlock);
//   - Wait-Die's bound on starvation: a session dies only against a holder
//     older than itself (every DIE it is told names only older holders),
//     so the oldest session never dies and the i-th oldest can only be
//     made to die by the i-1 older ones, each of which holds once, briefly;
//     and no session needs more than maxDecisions decisions (with a 5 ms
//     hold and a 50 ms backoff cap this allows every older session to hold
//     for the whole backoff twice over);
//   - from the event stream (Subscribe), replayed in order: at no instant
//     are two conflicting leases of different holders held together.
const (
	sessions     = 32
	maxDecisions = 2 * sessions
)

type sessionResult struct {
	who       string
	age       time.Time
	decisions int
	badDie    string
	err       error
}

func runSessions(t *testing.T, stores []Store, seed uint64) []sessionResult {
	ctx := context.Background()
	start := time.Now()
	results := make([]sessionResult, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			res := &results[i]
			res.who = fmt.Sprint("s", i)
			// Ages are distinct and spread over the start of the run.
			res.age = start.Add(time.Duration(i) * time.Microsecond)
			s := stores[i%len(stores)]
			req := Request{Holder: Holder{Agent: "agent-" + res.who, Session: res.who}, Claims: randomClaims(r), Age: res.age}
			res.decisions = 1
			d, err := AcquireWait(ctx, s, req, WaitOptions{For: 2 * time.Minute, Base: 2 * time.Millisecond, Cap: 50 * time.Millisecond,
				OnRetry: func(d Decision, _ time.Duration) {
					res.decisions++
					for _, c := range d.Conflicts {
						if c.Outcome == Die && !c.Held.Age.Before(res.age) && res.badDie == "" {
							res.badDie = fmt.Sprintf("%s died against %s, not older", res.who, c.Held.Holder.Session)
						}
					}
				}})
			if err == nil && d.Outcome != Granted {
				err = fmt.Errorf("%s: %v after 2 minutes", res.who, d.Outcome)
			}
			if err != nil {
				res.err = err
				return
			}
			time.Sleep(time.Duration(r.Int64N(int64(5 * time.Millisecond))))
			if n, err := s.Release(ctx, req.Holder); err != nil || n != len(req.Claims) {
				res.err = fmt.Errorf("%s: released %d of %d: %v", res.who, n, len(req.Claims), err)
			}
		}()
	}
	wg.Wait()
	return results
}

func checkSessions(t *testing.T, results []sessionResult, events <-chan Event) {
	t.Helper()
	worst, oldest := 0, results[0]
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Fatal(r.err)
		case r.badDie != "":
			t.Fatal(r.badDie)
		case r.decisions > maxDecisions:
			t.Fatalf("%s needed %d decisions (bound %d)", r.who, r.decisions, maxDecisions)
		}
		worst = max(worst, r.decisions)
		if r.age.Before(oldest.age) {
			oldest = r
		}
	}
	h := newHistory()
	grants := 0
	for len(events) > 0 {
		e := <-events
		h.event(e)
		if e.Type == LeaseGranted {
			grants++
		}
	}
	if h.first != "" {
		t.Fatal(h.first)
	}
	if grants < sessions || len(h.held) != 0 {
		t.Fatalf("events: %d grants, %d leases left held", grants, len(h.held))
	}
	t.Logf("%d sessions granted; most decisions for one: %d; the oldest (%s) took %d", sessions, worst, oldest.who, oldest.decisions)
}

func TestRandomSessionsTable(t *testing.T) {
	for seed := range uint64(5) {
		tb := NewTable()
		ev, stop := tb.Subscribe(1 << 16)
		res := runSessions(t, []Store{tb}, seed)
		checkSessions(t, res, ev)
		stop()
	}
}

// TestRandomSessionsHost: the same on the host store, the sessions spread
// over four stores on one directory (as four processes would be), watched
// from a fifth.
func TestRandomSessionsHost(t *testing.T) {
	for seed := range uint64(3) {
		dir := filepath.Join(t.TempDir(), "leases")
		w := openHost(t, dir)
		ev, stop := w.Subscribe(1 << 16)
		var stores []Store
		for range 4 {
			stores = append(stores, openHost(t, dir))
		}
		res := runSessions(t, stores, seed)
		// The watcher has read everything once it answers an operation.
		if _, err := w.List(context.Background(), Filter{}); err != nil {
			t.Fatal(err)
		}
		checkSessions(t, res, ev)
		if h := journalHistory(t, dir); h.first != "" {
			t.Fatal(h.first)
		}
		stop()
	}
}
