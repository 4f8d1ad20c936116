package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klocklabs/klock/policy"
)

// refModel is the brute-force lease manager the indexed Table must agree
// with: every decision scans every lease held.
type refModel struct{ held map[string]Lease }

func (m *refModel) expire(now time.Time) {
	for id, l := range m.held {
		if !l.HeldAt(now) {
			delete(m.held, id)
		}
	}
}

func (m *refModel) decide(req Request, now time.Time) Decision {
	d := Decision{Outcome: Granted, Age: req.Age}
	for _, c := range req.Claims {
		for _, l := range m.held {
			if l.Holder.SameParty(req.Holder) || !policy.Conflicts(l.Predicate, c.Predicate) || !Overlap(l.Resource, c.Resource) {
				continue
			}
			o := Die
			if req.Age.Before(l.Age) {
				o = Wait
			}
			d.Conflicts = append(d.Conflicts, Conflict{Claim: c, Held: l, Outcome: o})
			d.Outcome = max(d.Outcome, o)
			if w := l.ExpiresAt.Add(l.Grace).Sub(now); d.WaitTime == 0 || w < d.WaitTime {
				d.WaitTime = w
			}
		}
	}
	return d
}

func conflictKeys(cs []Conflict) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s|%s|%s|%s", c.Claim.Intent, c.Held.ID, c.Outcome, c.Held.ExpiresAt))
	}
	slices.Sort(out)
	return out
}

func randResource(r *rand.Rand) (Resource, string) {
	if r.IntN(6) == 0 {
		nets := []string{"a.example:443", "A.example:1-1000/tcp", "b.example:*", "10.0.0.0/8:80", "10.1.0.0/16:*",
			"0.0.0.0/0:443", "[::/0]:*", "[2001:db8::1]:443/udp", "raw", "127.0.0.1:8080"}
		s := "NET:" + nets[r.IntN(len(nets))]
		res, err := ParseResource(s)
		if err != nil {
			panic(err)
		}
		return res, s
	}
	p := randPattern(r, 3)
	return Resource{Type: policy.ObjFile, Path: p}, "FILE:" + p.String()
}

func randClaims(r *rand.Rand) []Claim {
	var cs []Claim
	for range 1 + r.IntN(4) {
		res, obj := randResource(r)
		pr := policy.Predicate(r.IntN(6))
		if r.IntN(40) == 0 {
			pr = 9 // unknown to policy: conflicts with everything
		}
		cs = append(cs, Claim{Predicate: pr, Resource: res, Intent: pr.String() + " " + obj})
	}
	return cs
}

// TestTableAgainstBruteForce runs random workloads on the indexed Table
// and checks every answer against refModel: decisions (outcome, every
// conflict, wait time), heartbeats, releases, revocations, expiry and
// listings.
func TestTableAgainstBruteForce(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(0); seed < 30; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		now := time.Unix(1_000_000, 0)
		tb := NewTable(WithClock(func() time.Time { return now }))
		m := &refModel{held: map[string]Lease{}}
		var holders []Holder
		for i := range 8 {
			holders = append(holders, Holder{Tenant: []string{"", "uid:1"}[i%2], Agent: fmt.Sprint("ag", i%3), Session: fmt.Sprint("s", i%5)})
		}
		var stats [3]int
		for step := 0; step < 1500; step++ {
			now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
			m.expire(now)
			h := holders[r.IntN(len(holders))]
			switch k := r.IntN(20); {
			case k < 12:
				req := Request{Holder: h, Claims: randClaims(r), Age: now.Add(-time.Duration(r.IntN(20)) * time.Second),
					TTL: time.Duration(1+r.IntN(20)) * time.Second, Grace: time.Duration(r.IntN(5)) * time.Second}
				want := m.decide(req, now)
				got, err := tb.Acquire(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if got.Outcome != want.Outcome || got.WaitTime != want.WaitTime || !slices.Equal(conflictKeys(got.Conflicts), conflictKeys(want.Conflicts)) {
					t.Fatalf("seed %d step %d: %v\n got %v %v %v\nwant %v %v %v", seed, step, req.Claims,
						got.Outcome, got.WaitTime, conflictKeys(got.Conflicts), want.Outcome, want.WaitTime, conflictKeys(want.Conflicts))
				}
				stats[got.Outcome]++
				if got.Outcome == Granted {
					if len(got.Leases()) != len(req.Claims) {
						t.Fatalf("granted %d leases for %d claims", len(got.Leases()), len(req.Claims))
					}
					for i, l := range got.Leases() {
						if l.Resource != req.Claims[i].Resource || l.Holder != h || !l.ExpiresAt.Equal(now.Add(req.TTL)) {
							t.Fatalf("lease %+v for claim %v", l, req.Claims[i])
						}
						m.held[l.ID] = l
					}
				}
			case k < 14:
				want := 0
				var until time.Time
				for id, l := range m.held {
					if l.Holder == h {
						l.ExpiresAt = now.Add(l.TTL)
						m.held[id] = l
						want++
						if until.IsZero() || l.ExpiresAt.Before(until) {
							until = l.ExpiresAt
						}
					}
				}
				got, err := tb.Heartbeat(ctx, h)
				if (want == 0) != errors.Is(err, ErrGone) || !got.Equal(until) {
					t.Fatalf("heartbeat %v: %v %v, want %d leases until %v", h, got, err, want, until)
				}
			case k < 17:
				var ids []string
				some := r.IntN(2) == 0
				for id, l := range m.held {
					if l.Holder == h && (!some || r.IntN(2) == 0) {
						ids = append(ids, id)
					}
				}
				if some {
					ids = append(ids, "l-nonexistent")
					for id := range m.held { // another holder's lease is not released
						ids = append(ids, id)
						break
					}
				}
				want := 0
				for _, id := range ids {
					if l, ok := m.held[id]; ok && l.Holder == h {
						want++
						delete(m.held, id)
					}
				}
				if !some {
					ids = nil
				}
				got, _ := tb.Release(ctx, h, ids...)
				if got != want {
					t.Fatalf("release %v %v: %d, want %d", h, ids, got, want)
				}
			case k < 18:
				target := h.Session
				if r.IntN(2) == 0 {
					for id := range m.held {
						target = id
						break
					}
				}
				want := 0
				for id, l := range m.held {
					if id == target || l.Holder.Session == target {
						want++
						delete(m.held, id)
					}
				}
				if got, _ := tb.Revoke(ctx, target); got != want {
					t.Fatalf("revoke %s: %d, want %d", target, got, want)
				}
			default:
				res, _ := randResource(r)
				f := Filter{Tenant: []string{"", "uid:1"}[r.IntN(2)]}
				if r.IntN(2) == 0 {
					f.Overlapping = &res
				}
				var want []string
				for id, l := range m.held {
					if (f.Tenant == "" || l.Holder.Tenant == f.Tenant) && (f.Overlapping == nil || Overlap(res, l.Resource)) {
						want = append(want, id+"@"+l.ExpiresAt.String())
					}
				}
				ls, _ := tb.List(ctx, f)
				var got []string
				for _, l := range ls {
					got = append(got, l.ID+"@"+l.ExpiresAt.String())
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("list %+v:\n got %v\nwant %v", f, got, want)
				}
			}
			checkIndex(t, tb)
		}
		if stats[Granted] < 50 || stats[Wait] < 20 || stats[Die] < 20 {
			t.Fatalf("seed %d: the workload does not exercise every outcome: %v", seed, stats)
		}
	}
}

func TestEndedHistoryIsCapped(t *testing.T) {
	ctx := context.Background()
	tb := NewTable(WithEndedHistory(10))
	h := Holder{Agent: "a", Session: "s"}
	start := time.Now()
	for i := range 25 {
		d, _ := tb.Acquire(ctx, Request{Holder: h, Claims: []Claim{claim(t, fmt.Sprintf("MUTATES FILE:/r/%d", i))}})
		if d.Outcome != Granted {
			t.Fatal(d.Outcome)
		}
		tb.Release(ctx, h)
	}
	ls, _ := tb.List(ctx, Filter{EndedSince: start})
	if len(ls) != 10 {
		t.Fatalf("remembers %d ended leases, want 10", len(ls))
	}
	for i, l := range ls {
		if want := fmt.Sprintf("FILE:/r/%d", 15+i); l.Object != want || l.State != Released {
			t.Fatalf("ended[%d] = %s %s, want %s Released", i, l.Object, l.State, want)
		}
	}
}

// TestTrieSweepsEmptyPaths: paths leased and released once do not stay in
// the index for ever.
func TestTrieSweepsEmptyPaths(t *testing.T) {
	ctx := context.Background()
	tb := NewTable()
	h := Holder{Agent: "a", Session: "s"}
	for i := range 5000 {
		tb.Acquire(ctx, Request{Holder: h, Claims: []Claim{claim(t, fmt.Sprintf("MUTATES FILE:/r/d%d/f", i))}})
		tb.Release(ctx, h)
	}
	n := 0
	var count func(*pnode)
	count = func(p *pnode) {
		n++
		for _, k := range p.kids() {
			count(k)
		}
	}
	count(&tb.files.root)
	if n > 2*1024+3 {
		t.Fatalf("%d trie nodes after every lease was released", n)
	}
	if !strings.HasPrefix(tb.newIDLocked("l-"), "l-") {
		t.Fatal("id prefix")
	}
}

// checkIndex verifies the table's indexes against its grants: every live
// FILE lease sits in the trie at its own path, with the counts above it.
func checkIndex(t *testing.T, tb *Table) {
	t.Helper()
	n := 0
	for _, g := range tb.byGrant {
		for i := range g.entries {
			e := &g.entries[i]
			if !e.live {
				continue
			}
			n++
			if e.res.Type != policy.ObjFile {
				continue
			}
			var parts []string
			for x := e.node; x.parent != nil; x = x.parent {
				parts = append([]string{x.name}, parts...)
			}
			if p := "/" + strings.Join(parts, "/"); p != e.res.Path.Path {
				t.Fatalf("lease %s on %s sits at %s in the trie", e.id, e.res.Path.Path, p)
			}
			if l := e.node.at[e.res.Path.Match]; e.nodeAt >= len(l) || l[e.nodeAt] != e {
				t.Fatalf("lease %s is not where it says in its node", e.id)
			}
		}
	}
	if n != tb.held {
		t.Fatalf("%d live leases, the table counts %d", n, tb.held)
	}
}

// TestEndedWritesOutliveManyEndedReads: the leases that let a session
// change files stay in the ended history however many read leases end
// after them (a strict rollback asks the history which files another
// session changed while it ran), in a table and across the host store's
// compaction.
func TestEndedWritesOutliveManyEndedReads(t *testing.T) {
	ctx := context.Background()
	h, err := OpenHost(t.TempDir()+"/leases", WithCompactSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, s := range []Store{NewTable(WithEndedHistory(10)), h} {
		writer, reader := Holder{Agent: "w", Session: "w"}, Holder{Agent: "r", Session: "r"}
		start := time.Now()
		if d, _ := s.Acquire(ctx, Request{Holder: writer, Claims: []Claim{claim(t, "MUTATES FILE:/r/src/**")}}); d.Outcome != Granted {
			t.Fatal(d.Outcome)
		}
		s.Release(ctx, writer)
		for i := range 5000 {
			if d, _ := s.Acquire(ctx, Request{Holder: reader, Claims: []Claim{claim(t, fmt.Sprintf("CONSUMES FILE:/r/docs/%d", i))}}); d.Outcome != Granted {
				t.Fatal(d.Outcome)
			}
			s.Release(ctx, reader)
		}
		ls, _ := s.List(ctx, Filter{EndedSince: start})
		if !slices.ContainsFunc(ls, func(l Lease) bool { return l.Holder == writer && l.Object == "FILE:/r/src/**" }) {
			t.Errorf("%T: the writer's ended lease was pushed out by %d ended reads", s, len(ls))
		}
	}
}
